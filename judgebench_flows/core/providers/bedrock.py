"""AWS Bedrock's Converse API (`calls/bedrock_api.py`): each request signed with SigV4 by botocore, with
AWS's standard credential chain instead of a key (`core/aws_credentials.py`), the region from the
environment or the profile, the endpoint from `--base-url`, AWS_ENDPOINT_URL_BEDROCK_RUNTIME or the
region's; each model family's request limits as data (`calls/bedrock_rules.py`)."""

from __future__ import annotations

from judgebench_flows.core import aws_credentials
from judgebench_flows.core.providers.base import CHAT, Provider, Settings


class BedrockProvider(Provider):
    """No key: botocore's session finds the credentials (environment, profile, SSO, a role) and signs."""

    def default_base_url(self, settings: Settings) -> str | None:
        return aws_credentials.region_endpoint(aws_credentials.region(aws_credentials.session()))

    def settings_problem(self, settings: Settings) -> str | None:
        if settings.api_key_env or settings.api_key_secret:
            return (
                "--provider bedrock signs with AWS's credential chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, SSO, a "
                "role), not a key: leave out --api-key-env / --api-key-secret"
            )
        if settings.batch:
            return "--batch with --provider bedrock: Bedrock's batch inference is not driven by this tool yet; drop --batch"
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
)
