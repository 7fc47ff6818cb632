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

from judgebench_flows.testing.fake_openai import CHAT_PATH, FakeOpenAIServer, FaultSettings, _Handler, serve

API_VERSIONS = frozenset({"2024-06-01", "2024-10-21", "2025-01-01-preview"})
DEPLOYMENTS_PREFIX = "/openai/deployments/"


class AccessToken(NamedTuple):
    """azure.core.credentials.AccessToken's shape."""

    token: str
    expires_on: int


def azure_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


class FakeAzureServer(FakeOpenAIServer):
    def __init__(self, *args: Any, deployments: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.deployments = dict(deployments or {})
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

    def _handle_post(self, handler: _Handler) -> None:
        path, _, query = handler.path.partition("?")
        parts = path.removeprefix(DEPLOYMENTS_PREFIX).split("/", 1)
        if not path.startswith(DEPLOYMENTS_PREFIX) or len(parts) != 2 or parts[1] != "chat/completions":
            handler.read_body()
            self._note("wrong-path")
            handler.send_json(404, azure_error("404", "Resource not found"))
            return
        version = dict(p.partition("=")[::2] for p in query.split("&") if p).get("api-version")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.testing.fake_azure",
        description="Serve a fake Azure OpenAI resource on loopback (deployment paths, api-version and api-key "
        "checked as Azure checks them), for `judgebench run --provider azure` with AZURE_OPENAI_ENDPOINT.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--answer", default="My final verdict is [[A>B]]")
    parser.add_argument("--api-key", default=None)
    parser.add_argument(
        "--deployment", action="append", default=[], help="NAME=MODEL, a deployment and the model it serves"
    )
    args = parser.parse_args(argv)
    deployments = dict(d.partition("=")[::2] for d in args.deployment) or {"judge": "gpt-4o-2024-08-06"}
    server = FakeAzureServer(args.answer, deployments=deployments, api_key=args.api_key, host=args.host, port=args.port)
    return serve(server, lambda started: started.endpoint)


if __name__ == "__main__":
    sys.exit(main())
