"""AWS's credentials, region and Bedrock endpoint, for `--provider bedrock`, found as every AWS SDK finds them.

botocore's session walks AWS's standard chain: the environment (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), the profile (`AWS_PROFILE`: shared credentials and config
files, `credential_process`, IAM Identity Center (SSO), an assumed role), web identity (EKS's IRSA),
the container's (ECS, EKS Pod Identity) and the instance's role. Temporary credentials are refreshed by
botocore before they expire. The region is `AWS_REGION`, else `AWS_DEFAULT_REGION`, else the profile's;
the endpoint `--base-url`, else `AWS_ENDPOINT_URL_BEDROCK_RUNTIME` or `AWS_ENDPOINT_URL` (as the SDKs
read them), else the region's (`core/providers/bedrock.py`). Nothing here keeps or prints a secret; botocore is imported by Bedrock runs only.
"""

from __future__ import annotations

import hashlib
import os
import threading
from typing import TYPE_CHECKING, Any

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.secrets import redact

if TYPE_CHECKING:
    import botocore.session

ENDPOINT_ENVS = ("AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ENDPOINT_URL")
CHAIN = "AWS's credential chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, SSO, instance or pod role)"


_sessions: dict[str, botocore.session.Session] = {}
_lock = threading.Lock()  # botocore's sessions are not thread-safe: made, and their clients created, under it


def session() -> Any:
    """The botocore session of this process's AWS environment (`AWS_PROFILE`, the files it names, keys),
    one per such environment: a new session loads the service's model again (about 0.5 s), a client
    from a loaded one takes milliseconds (each shard on Dask builds its wire)."""
    import botocore.session

    aws_env = sorted((name, value) for name, value in os.environ.items() if name.startswith("AWS_"))
    key = hashlib.sha256(repr(aws_env).encode()).hexdigest()  # no secret kept in the key
    with _lock:
        if key not in _sessions:
            _sessions[key] = botocore.session.Session()
        return _sessions[key]


def client(aws: Any, service: str, **options: Any) -> Any:
    """`aws.create_client(service, **options)`, one at a time (the session's loader is shared)."""
    with _lock:
        return aws.create_client(service, **options)


def region(aws: Any) -> str:
    """The region calls are signed for (and the default endpoint's): missing, one UserError."""
    found = os.environ.get("AWS_REGION") or aws.get_config_variable("region")
    if not found:
        raise UserError(
            "--provider bedrock: no AWS region; set AWS_REGION (or AWS_DEFAULT_REGION, or region in your AWS profile)"
        )
    return str(found)


def credentials(aws: Any) -> Any:
    """The chain's credentials (botocore refreshes temporary ones); none or unreadable: one UserError."""
    import botocore.exceptions

    try:
        found = aws.get_credentials()
        if found is not None:
            found.get_frozen_credentials()  # an expired SSO login or a failing credential_process says so now
    except botocore.exceptions.BotoCoreError as exc:
        raise UserError(f"--provider bedrock: AWS credentials could not be read: {redact(str(exc))}") from None
    if found is None:
        raise UserError(f"--provider bedrock: no AWS credentials found in {CHAIN}")
    return found


def region_endpoint(aws_region: str) -> str:
    """Bedrock Runtime's endpoint in a region (the run's when neither --base-url nor the environment names one)."""
    return f"https://bedrock-runtime.{aws_region}.amazonaws.com"


__all__ = ["CHAIN", "ENDPOINT_ENVS", "client", "credentials", "region", "region_endpoint", "session"]
