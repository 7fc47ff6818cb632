"""Google's OpenAI-compatible endpoints: the Gemini API (a key) and Vertex AI (Application Default
Credentials, JudgeBench's `GeminiAPI`)."""

from __future__ import annotations

import functools
import os
from typing import Any

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.providers.base import CHAT, Provider, Settings

GEMINI_API_ROOT = "https://generativelanguage.googleapis.com/v1beta/openai"
ADC = "the Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS or gcloud's)"

GEMINI = Provider(
    name="gemini",
    title="the Gemini API",
    base_url=GEMINI_API_ROOT,
    key_envs=("GEMINI_API_KEY",),
    wires={CHAT: "google_api:GeminiTransport"},
    batch="gemini_batch:GeminiBatches",
    token_budget="google_api:token_budget",
    priced_hosts=("generativelanguage.googleapis.com",),
)


def _adc_project() -> str | None:
    """The project of the Application Default Credentials in force now: read once per credentials file as
    it is (path and modification time), not once per process. A notebook that points
    GOOGLE_APPLICATION_CREDENTIALS at another project's file between two `evaluate()` calls judges on that
    project, not on the first one's."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or ""
    try:
        modified = os.stat(path).st_mtime_ns if path else 0
    except OSError:
        modified = -1  # missing: google-auth says so, in default_credentials's one line
    return _project_of(path, modified)


@functools.lru_cache(maxsize=8)  # bounded: a long-lived process keeps the last few credentials files' projects
def _project_of(path: str, modified: int) -> str | None:
    """The project of the credentials file `path` as of `modified` (the cache's key; google-auth reads the
    file from GOOGLE_APPLICATION_CREDENTIALS, which names `path`)."""
    from judgebench_flows.core.google_adc import default_credentials

    return default_credentials()[1]


class VertexProvider(Provider):
    """Vertex AI: its URL from the project and location, a token from the Application Default
    Credentials per call instead of a key (one per run, shared by its calls: `CallState.vertex_token`)."""

    def default_base_url(self, settings: Settings) -> str | None:
        from judgebench_flows.core import google_adc

        project = settings.vertex_project or os.environ.get("GOOGLE_CLOUD_PROJECT") or _adc_project()
        if not project:
            raise UserError("--provider vertex: no project; pass --vertex-project or set GOOGLE_CLOUD_PROJECT")
        return google_adc.vertex_base_url(project, settings.vertex_location)

    def settings_problem(self, settings: Settings) -> str | None:
        if settings.api_key_env or settings.api_key_secret:
            return (
                "--provider vertex authenticates with Application Default Credentials "
                "(GOOGLE_APPLICATION_CREDENTIALS), not a key: leave out --api-key-env / --api-key-secret"
            )
        if settings.batch:
            return (
                "--batch with --provider vertex: Vertex AI's batch prediction needs a Cloud Storage bucket, "
                "which this tool does not manage; use --provider gemini --batch, or drop --batch"
            )
        return None

    def check_credentials(self, settings: Settings, base_url: str) -> None:
        from judgebench_flows.core.google_adc import default_credentials

        default_credentials()

    def wire_options(self, settings: Settings | None, state: Any) -> dict[str, object]:
        return {"token": state.vertex_token()} if state is not None else {}


VERTEX = VertexProvider(
    name="vertex",
    title="Vertex AI",
    credentials=ADC,
    wires={CHAT: "google_api:VertexTransport"},
    token_budget="google_api:token_budget",
    claims=(r"gemini.*",),  # run_judge.py sends gemini-* to Vertex AI
    priced_hosts=("aiplatform.googleapis.com",),
)
