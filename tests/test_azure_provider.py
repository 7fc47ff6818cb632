"""`--provider azure`: the openai SDK's AsyncAzureOpenAI against a local server that checks what Azure
OpenAI checks (the deployment's path, `api-version`, the `api-key` header or a live Microsoft Entra ID
token); an expired token is taken again before it is sent, a refused one once more; a whole run from the
CLI with the key in AZURE_OPENAI_API_KEY and none of it in any output."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from judgebench_flows.calls.azure_api import AzureTransport, EntraToken
from judgebench_flows.calls.errors import CallError
from judgebench_flows.core import providers
from judgebench_flows.core.config import build_config
from judgebench_flows.core.errors import UserError
from judgebench_flows.judging.preflight import check_credentials
from judgebench_flows.testing.fake_azure import FakeAzureServer
from tests._helpers import run_command
from tests.conftest import CANARY_KEY

DEPLOYMENT = "judge-prod"
SERVED = "gpt-4o-2024-08-06"
MESSAGES = [{"role": "system", "content": "Judge."}, {"role": "user", "content": "Which is better?"}]


def answered(transport: AzureTransport, times: int = 1, pause: float = 0.0) -> list[str]:
    async def go() -> list[str]:
        texts = []
        try:
            for i in range(times):
                if i and pause:
                    await asyncio.sleep(pause)
                texts.append(transport.answer(await transport.post(MESSAGES, {"temperature": 0.0})).text)
        finally:
            await transport.aclose()
        return texts

    return asyncio.run(go())


def test_the_request_goes_to_the_deployments_path_with_api_version_and_api_key() -> None:
    bodies: list[dict] = []

    def respond(body: dict) -> str:
        bodies.append(body)
        return "[[A>B]]"

    with FakeAzureServer(respond, deployments={DEPLOYMENT: SERVED}, api_key=CANARY_KEY) as server:
        transport = AzureTransport(server.endpoint, DEPLOYMENT, CANARY_KEY, 10.0, 1, api_version="2024-10-21")
        assert answered(transport) == ["[[A>B]]"]
        assert server.seen["api-key"] == 1 and server.status_counts[200] == 1
    assert bodies[0]["model"] == SERVED and bodies[0]["messages"] == MESSAGES  # the deployment's model answered


@pytest.mark.parametrize(
    ("deployment", "version", "key", "status"),
    [
        ("no-such-deployment", "2024-10-21", CANARY_KEY, 404),
        (DEPLOYMENT, "1999-01-01", CANARY_KEY, 400),
        (DEPLOYMENT, "2024-10-21", "wrong-key", 401),
    ],
)
def test_what_azure_refuses_the_server_refuses(deployment: str, version: str, key: str, status: int) -> None:
    """The server's checks bite: a deployment the resource lacks, an unknown API version, a wrong key."""
    with FakeAzureServer("[[A>B]]", deployments={DEPLOYMENT: SERVED}, api_key=CANARY_KEY) as server:
        transport = AzureTransport(server.endpoint, deployment, key, 10.0, 1, api_version=version)
        with pytest.raises(CallError) as failed:
            answered(transport)
    assert failed.value.status == status
    assert "wrong-key" not in str(failed.value) and CANARY_KEY not in str(failed.value)


def test_an_entra_token_is_taken_again_before_it_expires() -> None:
    """Tokens living 4 s, taken again 1 s before they expire: the third call, at least 3.2 s after the first,
    is sent with a new token, never with the expired one (the server counts an expired bearer as `expired`).
    On a busy machine the calls take longer and a second call may already need a new token: so two or three
    tokens, each taken by the run, never an expired one sent."""
    with FakeAzureServer("[[A>B]]", deployments={DEPLOYMENT: SERVED}) as server:
        credential = server.credential(lifetime=4.0)
        token = EntraToken(credential)
        transport = AzureTransport(server.endpoint, DEPLOYMENT, "EMPTY", 10.0, 1, "2024-10-21", token=token)
        assert answered(transport, times=3, pause=1.6) == ["[[A>B]]"] * 3
        assert server.seen["expired"] == 0 and server.seen["bearer"] == 3 and server.seen["api-key"] == 0
        assert credential.calls in (2, 3) and token.refreshes == credential.calls


def test_a_refused_entra_token_is_replaced_once() -> None:
    """A token the endpoint refuses (revoked, or expired by a skewed clock): one new token, one more try."""
    with FakeAzureServer("[[A>B]]", deployments={DEPLOYMENT: SERVED}) as server:
        credential = server.credential(lifetime=3600.0)
        token = EntraToken(credential)
        token.refresh()
        server._tokens.clear()  # the server no longer honours the token the run holds
        transport = AzureTransport(server.endpoint, DEPLOYMENT, "EMPTY", 10.0, 1, "2024-10-21", token=token)
        assert answered(transport) == ["[[A>B]]"]
        assert server.seen["unknown-token"] == 1 and credential.calls == 2


def test_a_missing_key_without_entra_id_is_one_line_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AZURE_OPENAI_API_KEY", raising=False)
    for name in ("AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET", "IDENTITY_ENDPOINT", "MSI_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example-resource.openai.azure.com")
    monkeypatch.setenv("PATH", "/nonexistent")  # no `az`, `azd` or PowerShell to sign in with
    config = build_config(model=DEPLOYMENT, provider="azure")
    with pytest.raises(UserError) as caught:
        check_credentials(config)
    message = str(caught.value)
    assert "set AZURE_OPENAI_API_KEY" in message and "\n" not in message


def test_the_endpoint_comes_from_azure_openai_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example-resource.openai.azure.com")
    config = build_config(model=DEPLOYMENT, provider="azure")
    assert config.resolved_base_url() == "https://example-resource.openai.azure.com"
    monkeypatch.delenv("AZURE_OPENAI_ENDPOINT")
    with pytest.raises(UserError, match="AZURE_OPENAI_ENDPOINT"):
        build_config(model=DEPLOYMENT, provider="azure").resolved_base_url()


def test_a_deployment_is_priced_as_the_model_it_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    from judgebench_flows.core.pricing import price_for

    monkeypatch.setenv("AZURE_OPENAI_ENDPOINT", "https://example-resource.openai.azure.com")
    config = build_config(model=DEPLOYMENT, provider="azure", priced_model=SERVED)
    assert config.priced_model_name == SERVED
    assert price_for(config.priced_model_name, None, False, config.resolved_base_url()) is not None
    assert price_for(DEPLOYMENT, None, False, config.resolved_base_url()) is None
    assert providers.get("azure").takes_key


def test_a_whole_run_through_azure_from_the_cli(run_cli, judgebench_repo, tmp_path: Path) -> None:
    with FakeAzureServer("My final verdict is [[A>B]]", deployments={DEPLOYMENT: SERVED}, api_key=CANARY_KEY) as server:
        command = run_command(
            judgebench_repo, server, tmp_path, "--provider", "azure", model=DEPLOYMENT, max_samples=10
        )
        command[command.index("--base-url") : command.index("--base-url") + 2] = []
        result = run_cli(
            *command,
            "--priced-model",
            SERVED,
            env={
                "AZURE_OPENAI_ENDPOINT": server.endpoint,
                "AZURE_OPENAI_API_KEY": CANARY_KEY,
                "OPENAI_API_VERSION": "2024-10-21",
                "OPENAI_API_KEY": "",
            },
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert server.seen["api-key"] >= 20 and not server.seen["no-version"] and not server.seen["no-deployment"]
    results = json.loads((tmp_path / "results/judgebench.json").read_text())
    assert results["overall_accuracy"]["accuracy"] is not None
    written = "".join(p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file() and p.suffix != ".db")
    assert CANARY_KEY not in written + result.stdout + result.stderr
