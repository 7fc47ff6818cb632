"""Bedrock's batch inference for `--batch --provider bedrock` (`batch.BatchAPI`): a JSONL file of
`{"recordId", "modelInput"}` records written to S3 (`--bedrock-batch-input`), a job created on it with
CreateModelInvocationJob (botocore's `bedrock` control-plane client, `modelInvocationType` Converse, run as
`--bedrock-role-arn`), polled with GetModelInvocationJob, and its `<input file>.out` read from
`--bedrock-batch-output`/<job id>/ when it ends.

Each record's `modelInput` is the Converse body the synchronous wire sends (`bedrock_api.converse_body`), so
the family rules hold inside jobs too, and each output record's `modelOutput` is a Converse answer, read by
the wire. A job holds at least 100 records (Bedrock refuses fewer): a smaller round (a follow-up turn, a
retry) is sent synchronously instead, at the on-demand price (`batch.BatchTransport`). The job's
`clientRequestToken` is a hash of its records, so a create retried after a lost answer makes no second job.
All calls are botocore's (SigV4, the credential chain), synchronous, in threads.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from typing import Any

from pydantic import JsonValue
from typing_extensions import TypedDict

from judgebench_flows.calls.batch import BatchState, LineResult
from judgebench_flows.calls.bedrock_api import BedrockTransport, client_error, converse_body
from judgebench_flows.calls.errors import CallError
from judgebench_flows.calls.transport import JsonBody
from judgebench_flows.core import aws_credentials
from judgebench_flows.core.completion import Sampling
from judgebench_flows.core.providers.bedrock import MIN_BATCH_RECORDS

ENDED = frozenset({"Completed", "PartiallyCompleted", "Failed", "Stopped", "Expired"})


def split_uri(uri: str) -> tuple[str, str]:
    """s3://bucket/prefix/ -> (bucket, "prefix/"); the prefix ends with "/" unless empty."""
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, (prefix.rstrip("/") + "/") if prefix.strip("/") else ""


class BedrockBatches:
    provider = "bedrock"
    max_lines = 50_000  # records per job (Bedrock's default quota)
    max_bytes = 1024 * 1024 * 1024  # 1 GB per input file
    min_lines = MIN_BATCH_RECORDS

    def __init__(self, wire: BedrockTransport, input_uri: str, output_uri: str, role_arn: str, aws: Any = None):
        import botocore.config

        aws = aws or aws_credentials.session()
        region = aws_credentials.region(aws)
        config = botocore.config.Config(retries={"total_max_attempts": 3, "mode": "standard"})
        self.wire, self.model = wire, wire.model
        self.input_uri, self.output_uri, self.role_arn = input_uri, output_uri, role_arn
        self.control = aws_credentials.client(aws, "bedrock", region_name=region, config=config)
        self.s3 = aws_credentials.client(aws, "s3", region_name=region, config=config)
        self._submitted: Counter[str] = Counter()  # records' hash -> jobs made of them by this process

    @classmethod
    def for_wire(cls, wire: Any, api_key: str, settings: Any) -> BedrockBatches:
        return cls(wire, settings.bedrock_batch_input, settings.bedrock_batch_output, settings.bedrock_role_arn)

    def body(self, messages: list[dict[str, str]], sampling: Sampling) -> JsonBody:
        return converse_body(self.wire.family, messages, sampling)

    def line(self, custom_id: str, body: JsonBody) -> bytes:
        return (json.dumps({"recordId": custom_id, "modelInput": body}, ensure_ascii=False) + "\n").encode()

    async def _aws(self, call: Any, **params: Any) -> Any:
        """One botocore call in a thread; its failure as a `CallError`."""
        self.wire._register()  # the credentials' secrets are redacted wherever they could show
        try:
            return await asyncio.to_thread(call, **params)
        except Exception as exc:
            raise client_error(exc, {}) from None

    async def submit(self, lines: list[bytes]) -> str:
        content = b"".join(lines)
        digest = hashlib.sha256(content).hexdigest()
        self._submitted[digest] += 1  # the same records again (after an expiry) are a new job
        token = hashlib.sha256(f"{digest}:{self._submitted[digest]}".encode()).hexdigest()[:40]
        bucket, prefix = split_uri(self.input_uri)
        key = f"{prefix}judgebench-{token}.jsonl"
        await self._aws(self.s3.put_object, Bucket=bucket, Key=key, Body=content)
        job = await self._aws(
            self.control.create_model_invocation_job,
            jobName=f"judgebench-{token[:32]}",
            roleArn=self.role_arn,
            clientRequestToken=token,
            modelId=self.model,
            modelInvocationType="Converse",
            inputDataConfig={"s3InputDataConfig": {"s3Uri": f"s3://{bucket}/{key}", "s3InputFormat": "JSONL"}},
            outputDataConfig={"s3OutputDataConfig": {"s3Uri": self.output_uri}},
        )
        return str(job["jobArn"])

    async def state(self, batch_id: str) -> BatchState:
        job = await self._aws(self.control.get_model_invocation_job, jobIdentifier=batch_id)
        status = str(job.get("status"))
        counts = {
            name: int(job[field])
            for name, field in (("processed", "processedRecordCount"), ("failed", "errorRecordCount"))
            if job.get(field) is not None
        }
        state = BatchState(status, counts, ended=status in ENDED, handle=job)
        if status == "Failed":
            state.refused = str(job.get("message") or "failed without a reason")
        return state

    async def cancel(self, batch_id: str) -> None:
        await self._aws(self.control.stop_model_invocation_job, jobIdentifier=batch_id)

    async def results(self, state: BatchState) -> dict[str, LineResult]:
        """The job's output records: `modelOutput` (200) or `error` (its code, else 500); a record the job
        never ran is absent (the batch layer sends it again)."""
        job = state.handle
        input_key = job["inputDataConfig"]["s3InputDataConfig"]["s3Uri"].rsplit("/", 1)[-1]
        bucket, prefix = split_uri(job["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"])
        key = f"{prefix}{str(job['jobArn']).rsplit('/', 1)[-1]}/{input_key}.out"
        try:
            answer = await self._aws(self.s3.get_object, Bucket=bucket, Key=key)
        except CallError as exc:
            if exc.status == 404:  # stopped or expired before any record was written
                return {}
            raise
        text = (await asyncio.to_thread(answer["Body"].read)).decode()
        results: dict[str, LineResult] = {}
        for raw in text.splitlines():
            if raw.strip():
                record = json.loads(raw)
                results[str(record["recordId"])] = record_result(record)
        return results


class RecordError(TypedDict, total=False):
    """An output record's `error`: Bedrock's code (an HTTP status, as a number or text) and message."""

    errorCode: int | str
    errorMessage: str


class OutputRecord(TypedDict, total=False):
    """One line of a job's `<input file>.out`: its record's id and either the Converse answer or an error."""

    recordId: str
    modelOutput: JsonValue
    error: RecordError


def record_result(record: OutputRecord) -> LineResult:
    if "modelOutput" in record and not record.get("error"):
        return LineResult(200, record["modelOutput"])
    error = record.get("error") or {}
    code = error.get("errorCode")
    status = int(code) if isinstance(code, int) or (isinstance(code, str) and code.isdigit()) else 500
    body: dict[str, JsonValue] = {"error": {"code": str(code or ""), "message": str(error.get("errorMessage") or "")}}
    return LineResult(status, body)
