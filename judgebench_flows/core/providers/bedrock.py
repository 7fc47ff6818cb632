"""AWS Bedrock's Converse API (`calls/bedrock_api.py`): each request signed with SigV4 by botocore, with
AWS's standard credential chain instead of a key (`core/aws_credentials.py`), the region from the
environment or the profile, the endpoint from `--base-url`, AWS_ENDPOINT_URL_BEDROCK_RUNTIME or the
region's; each model family's request limits as data (`calls/bedrock_rules.py`). A model is named by its
Bedrock model id, a cross-region inference profile (`us.` before it) or an ARN ending in either
(`model_id`): prices are looked up by the model id (a geography's profile bills the calling region's price)."""

from __future__ import annotations

import re

from judgebench_flows.core import aws_credentials
from judgebench_flows.core.providers.base import CHAT, Provider, Settings

ROLE_ARN = re.compile(r"^arn:aws(-[a-z]+)*:iam::\d{12}:role/.+$")
S3_URI = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/.*)?$")
# Bedrock's batch inference takes no job of fewer records (its quota "minimum number of records per job")
MIN_BATCH_RECORDS = 100


def batch_problem(settings: Settings) -> str | None:
    """What `--batch --provider bedrock` lacks: the S3 locations of its jobs and the role they run as."""
    given = {
        "--bedrock-batch-input": (settings.bedrock_batch_input, S3_URI, "s3://BUCKET/PREFIX/"),
        "--bedrock-batch-output": (settings.bedrock_batch_output, S3_URI, "s3://BUCKET/PREFIX/"),
        "--bedrock-role-arn": (settings.bedrock_role_arn, ROLE_ARN, "arn:aws:iam::ACCOUNT:role/NAME"),
    }
    missing = [option for option, (value, _, _) in given.items() if not value]
    if missing:
        return (
            f"--batch with --provider bedrock needs {', '.join(missing)}: Bedrock's batch jobs read their input "
            "from S3 and write their output there, as an IAM service role"
        )
    for option, (value, pattern, shape) in given.items():
        if not pattern.match(str(value)):
            return f"{option}: expected {shape}, got {value!r}"
    return None


# What comes before a model id in a cross-region inference profile's name.
GEOGRAPHIES = frozenset({"us", "eu", "apac", "global", "us-gov", "jp", "au", "ca"})


def model_id(model: str) -> str:
    """The model id inside an ARN or a cross-region profile's name, lower-cased."""
    name = model.rsplit("/", 1)[-1].lower()
    geography, _, rest = name.partition(".")
    return rest if geography in GEOGRAPHIES and rest else name


class BedrockProvider(Provider):
    """No key: botocore's session finds the credentials (environment, profile, SSO, a role) and signs."""

    def priced_name(self, model: str) -> str:
        """The model id the price table lists: a geography's profile bills its model's on-demand price in the
        calling region (AWS: no charge for cross-region routing); `global.` profiles are priced apart."""
        name = model_id(model)
        return model if model.lower().startswith("global.") else name

    def default_base_url(self, settings: Settings) -> str | None:
        return aws_credentials.region_endpoint(aws_credentials.region(aws_credentials.session()))

    def settings_problem(self, settings: Settings) -> str | None:
        if settings.api_key_env or settings.api_key_secret:
            return (
                "--provider bedrock signs with AWS's credential chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, SSO, a "
                "role), not a key: leave out --api-key-env / --api-key-secret"
            )
        if settings.batch:
            return batch_problem(settings)
        return None

    def check_credentials(self, settings: Settings, base_url: str) -> None:
        aws = aws_credentials.session()
        aws_credentials.region(aws)
        aws_credentials.credentials(aws)


BEDROCK = BedrockProvider(
    name="bedrock",
    title="AWS Bedrock's Converse API",
    base_url_envs=aws_credentials.ENDPOINT_ENVS,
    credentials=aws_credentials.CHAIN,
    wires={CHAT: "bedrock_api:BedrockTransport"},
    request_rule="bedrock_rules:bedrock_rule",
    batch="bedrock_batch:BedrockBatches",
    # Bedrock Runtime in any region (and its FIPS endpoints): the bundled `bedrock` prices apply there
    priced_hosts=("bedrock-runtime.*.amazonaws.com", "bedrock-runtime-fips.*.amazonaws.com"),
)
