"""Google's Application Default Credentials (ADC), for `--provider vertex`: where they are and their project.

google-auth finds them: the service-account file `GOOGLE_APPLICATION_CREDENTIALS` names, else gcloud's
`application-default login`, else a Google Cloud machine's metadata server. Only google-auth reads the file;
nothing here keeps, prints or stores its content. Imported by Vertex runs only (google-auth's import time).
"""

from __future__ import annotations

from typing import Any

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.secrets import redact

SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)


def default_credentials() -> tuple[Any, str | None]:
    """(credentials, their project) with the cloud-platform scope; missing or unreadable: one UserError."""
    import google.auth
    import google.auth.exceptions

    try:
        credentials, project = google.auth.default(scopes=list(SCOPES))
    except google.auth.exceptions.DefaultCredentialsError as exc:
        reason = redact(" ".join(str(exc).split())[:300])
        raise UserError(
            f"--provider vertex: no Application Default Credentials ({reason}); set GOOGLE_APPLICATION_CREDENTIALS "
            "to a service-account file or run `gcloud auth application-default login`"
        ) from None
    return credentials, project or getattr(credentials, "quota_project_id", None)


def vertex_base_url(project: str, location: str) -> str:
    """Vertex AI's OpenAI-compatible endpoint of a project and location (`global`: no regional host)."""
    host = "aiplatform.googleapis.com" if location == "global" else f"{location}-aiplatform.googleapis.com"
    return f"https://{host}/v1/projects/{project}/locations/{location}/endpoints/openapi"
