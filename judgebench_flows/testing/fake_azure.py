"""A real server answering as Azure OpenAI does, on loopback: `FakeOpenAIServer` behind Azure's checks.

- The path is a deployment's: `POST /openai/deployments/{deployment}/chat/completions`; a deployment the
  resource does not have is 404 `DeploymentNotFound`. The responder sees the body with `model` set to the
  model the deployment serves (Azure ignores the body's `model`).
- `api-version` is a required query parameter, one of `API_VERSIONS` (else 404 / 400 as Azure answers).
- Auth: the `api-key` header, or `Authorization: Bearer <token>` with a Microsoft Entra ID token this
  server issued (`issue_token`, or `credential()`: an object with azure-identity's `get_token`) and that
  has not expired (an expired one is 401 "Access token has expired").

    with FakeAzureServer("[[A>B]]", deployments={"judge": "gpt-4o-2024-08-06"}, api_key="k") as server:
        server.endpoint  # what AZURE_OPENAI_ENDPOINT holds

`FakeAzureBatchServer` adds Azure's Files and Batch APIs (`/openai/files`, `/openai/batches`): the fake
batch server's validation and faults (`fake_batches.FakeBatchServer`) behind the same api-version and
auth checks, with Azure's rules on top: lines and the batch name `/chat/completions`, each line's `model`
is a deployment of the resource (else the batch fails `model_not_found`) whose type is a batch one
(`deployment_types`: GlobalBatch or DataZoneBatch; any other fails the batch as Azure does), one
deployment per file (`model_mismatch`), at most 100,000 lines, API versions that know batches.
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, NamedTuple

from judgebench_flows.testing.fake_batches import FakeBatchServer
from judgebench_flows.testing.fake_openai import CHAT_PATH, FakeOpenAIServer, FaultSettings, _Handler, serve

API_VERSIONS = frozenset({"2024-06-01", "2024-10-21", "2025-01-01-preview"})
# The versions whose data plane has the Batch API (GA in 2024-10-21; 2024-06-01 has none)
BATCH_API_VERSIONS = frozenset({"2024-10-21", "2025-01-01-preview"})
DEPLOYMENTS_PREFIX = "/openai/deployments/"
BATCH_TYPES = frozenset({"GlobalBatch", "DataZoneBatch"})


class AccessToken(NamedTuple):
    """azure.core.credentials.AccessToken's shape."""

    token: str
    expires_on: int


def azure_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class FakeAzureServer(FakeOpenAIServer):
    def __init__(
        self,
        *args: Any,
        deployments: dict[str, str] | None = None,
        deployment_types: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.deployments = dict(deployments or {})
        # deployment -> its type (GlobalStandard unless given; GlobalBatch or DataZoneBatch to take batches)
        self.deployment_types = {name: "GlobalStandard" for name in self.deployments} | dict(deployment_types or {})
        self._tokens: dict[str, float] = {}  # issued token -> when it expires (time.time())
        self._token_lock = threading.Lock()
        self.seen: Counter[str] = Counter()  # "api-key", "bearer", "expired", "no-version", ...

    @property
    def endpoint(self) -> str:
        """The resource's endpoint, as AZURE_OPENAI_ENDPOINT holds it."""
        return f"http://{self._host}:{self.port}"

    def issue_token(self, lifetime: float) -> AccessToken:
        token = "entra-" + secrets.token_hex(16)
        expires = time.time() + lifetime
        with self._token_lock:
            self._tokens[token] = expires
        return AccessToken(token, int(expires))

    def credential(self, lifetime: float = 3600.0) -> Any:
        """A TokenCredential whose tokens this server issues, living `lifetime` seconds; counts its calls."""
        server = self

        class Credential:
            calls = 0

            def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
                assert scopes == ("https://cognitiveservices.azure.com/.default",), scopes
                Credential.calls += 1
                return server.issue_token(lifetime)

        return Credential()

    def _model_paths(self) -> dict[str, Callable[[_Handler, bytes], None]]:
        return {CHAT_PATH: self._answer_deployment}

    def _answer_deployment(self, handler: _Handler, body_bytes: bytes) -> None:
        """The chat answer, the body's `model` being what the deployment serves (Azure ignores the body's)."""
        try:
            body = json.loads(body_bytes or b"null")
        except ValueError:
            body = None
        if isinstance(body, dict):
            body_bytes = json.dumps({**body, "model": self.deployments[handler.deployment]}).encode()  # type: ignore[attr-defined]
        self._answer_chat(handler, body_bytes)

    def _api_version(self, handler: _Handler) -> str | None:
        query = handler.path.partition("?")[2]
        return dict(p.partition("=")[::2] for p in query.split("&") if p).get("api-version")

    def _handle_post(self, handler: _Handler) -> None:
        path = handler.path.partition("?")[0]
        parts = path.removeprefix(DEPLOYMENTS_PREFIX).split("/", 1)
        if not path.startswith(DEPLOYMENTS_PREFIX) or len(parts) != 2 or parts[1] != "chat/completions":
            handler.read_body()
            self._note("wrong-path")
            handler.send_json(404, azure_error("404", "Resource not found"))
            return
        version = self._api_version(handler)
        if version not in API_VERSIONS:
            handler.read_body()
            self._note("no-version" if version is None else "bad-version")
            message = "Resource not found" if version is None else "API version not supported"
            handler.send_json(
                404 if version is None else 400, azure_error("404" if version is None else "400", message)
            )
            return
        if parts[0] not in self.deployments:
            handler.read_body()
            self._note("no-deployment")
            handler.send_json(
                404,
                azure_error("DeploymentNotFound", "The API deployment for this resource does not exist."),
            )
            return
        handler.deployment = parts[0]  # type: ignore[attr-defined]
        handler.path = CHAT_PATH
        super()._handle_post(handler)

    def _note(self, what: str) -> None:
        with self._token_lock:
            self.seen[what] += 1

    def _authorized(self, handler: _Handler, settings: FaultSettings) -> bool:
        key = handler.headers.get("api-key")
        bearer = handler.headers.get("Authorization", "").removeprefix("Bearer ")
        if key is not None:
            self._note("api-key")
            return settings.api_key is not None and secrets.compare_digest(key, settings.api_key)
        with self._token_lock:
            expires = self._tokens.get(bearer)
        if expires is None:
            self._note("unknown-token")
            return False
        if time.time() >= expires:
            self._note("expired")
            return False
        self._note("bearer")
        return True


class FakeAzureBatchServer(FakeAzureServer, FakeBatchServer):
    """An Azure OpenAI resource with its Files and Batch APIs (see the module docstring). Counters are the
    fake batch server's (`batches_created`, `submitted_lines`, `answered_lines`) and `seen`."""

    API_ROOT = "/openai"
    chat_url = "/chat/completions"
    MISMATCH_CODE = "model_mismatch"
    MAX_LINES = 100_000

    def _handle_post(self, handler: _Handler) -> None:
        if self._batch_path(handler) is None:
            super()._handle_post(handler)  # a deployment's chat completions
        elif self._batch_allowed(handler):
            FakeBatchServer._handle_post(self, handler)

    def _handle_get(self, handler: _Handler) -> None:
        if self._batch_path(handler) is None:
            super()._handle_get(handler)
        elif self._batch_allowed(handler):
            FakeBatchServer._handle_get(self, handler)

    def _batch_allowed(self, handler: _Handler) -> bool:
        """A Files or Batch API request passes Azure's checks: an API version with batches, a valid key or
        token (else the answer is sent here)."""
        version = self._api_version(handler)
        if version not in BATCH_API_VERSIONS:
            handler.read_body()
            self._note("no-version" if version is None else "bad-version")
            handler.send_json(404, azure_error("404", "Resource not found"))
            return False
        if not self._authorized(handler, self.settings):
            handler.read_body()
            handler.send_json(
                401,
                azure_error("401", "Access denied due to invalid subscription key or wrong API endpoint."),
            )
            return False
        self._note("batch-api")
        return True

    def _line_problems(self, lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Each line's `model` is a batch deployment of this resource."""
        for name in sorted({str(line["body"].get("model")) for line in lines}):
            if name not in self.deployments:
                message = f"The model deployment '{name}' in the input file was not found."
                return [{"code": "model_not_found", "message": message, "line": None}]
            kind = self.deployment_types.get(name)
            if kind not in BATCH_TYPES:
                message = (
                    f"The model deployment '{name}' is a {kind} deployment: batches need a GlobalBatch or "
                    "DataZoneBatch deployment."
                )
                return [{"code": "model_not_found", "message": message, "line": None}]
        return []

    def _answer_line(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """A line answered by the model its deployment serves (Azure ignores the name beyond routing)."""
        return super()._answer_line({**body, "model": self.deployments[str(body["model"])]})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.fake_azure",
        description="Serve a fake Azure OpenAI resource on loopback (deployment paths, api-version and api-key "
        "checked as Azure checks them, and its Batch API for batch deployments), for `judgebench run --provider "
        "azure [--batch]` with AZURE_OPENAI_ENDPOINT.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--answer", default="My final verdict is [[A>B]]")
    parser.add_argument("--api-key", default=None)
    parser.add_argument(
        "--deployment", action="append", default=[], help="NAME=MODEL, a deployment and the model it serves"
    )
    parser.add_argument(
        "--batch-deployment",
        action="append",
        default=[],
        help="NAME=MODEL, a GlobalBatch deployment (for `judgebench run --batch --provider azure`)",
    )
    args = parser.parse_args(argv)
    deployments = dict(d.partition("=")[::2] for d in args.deployment)
    batch = dict(d.partition("=")[::2] for d in args.batch_deployment)
    if not deployments and not batch:
        deployments = {"judge": "gpt-4o-2024-08-06"}
    server = FakeAzureBatchServer(
        args.answer,
        deployments=deployments | batch,
        deployment_types=dict.fromkeys(batch, "GlobalBatch"),
        api_key=args.api_key,
        host=args.host,
        port=args.port,
    )
    return serve(server, lambda started: started.endpoint)


if __name__ == "__main__":
    sys.exit(main())
