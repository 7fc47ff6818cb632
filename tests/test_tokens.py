"""The one refreshed-token policy of Entra ID (Azure OpenAI) and Vertex AI (calls/tokens.py): one round
trip for every call waiting, one new token for every call refused the same old one, taken again before its
end, never shown. Each provider's token against its own stand-in: tests/test_azure_provider.py and
tests/test_google_provider.py."""

from __future__ import annotations

import asyncio
import time

from judgebench_flows.calls.azure_api import EntraToken
from judgebench_flows.calls.google_api import VertexToken
from judgebench_flows.calls.tokens import RefreshedToken
from judgebench_flows.core.secrets import redact


class Issued(RefreshedToken):
    """Tokens from a counter, each taking a round trip of 0.2 s and living `lifetime` seconds."""

    def __init__(self, lifetime: float = 3600.0):
        super().__init__()
        self.lifetime, self.taken = lifetime, 0

    def _take(self) -> tuple[str, float]:
        time.sleep(0.2)
        self.taken += 1
        return f"issued-token-{self.taken}-5f3e9a1b", self.lifetime


async def _at_once(*calls):
    return await asyncio.gather(*calls)


def test_both_providers_tokens_are_the_one_policy() -> None:
    assert issubclass(EntraToken, RefreshedToken) and issubclass(VertexToken, RefreshedToken)
    assert EntraToken.bearer is VertexToken.bearer is RefreshedToken.bearer


def test_calls_waiting_for_a_token_share_one_round_trip() -> None:
    token = Issued()
    seen = asyncio.run(_at_once(*(token.bearer() for _ in range(20))))
    assert set(seen) == {"issued-token-1-5f3e9a1b"} and token.taken == token.refreshes == 1
    assert "issued-token-1" not in redact(f"sent {seen[0]}")  # registered for redaction as it came


def test_a_refused_token_is_replaced_once_for_every_call_refused_it() -> None:
    token = Issued()
    first = asyncio.run(token.bearer())
    again = asyncio.run(_at_once(*(token.bearer(stale=first) for _ in range(5))))
    assert set(again) == {"issued-token-2-5f3e9a1b"} and token.taken == 2
    token.expire(first)  # a late 401 for the old token: the new one stays
    assert asyncio.run(token.bearer()) == again[0] and token.taken == 2
    token.expire(again[0])  # the SDK's way (Azure): the next bearer() takes a new one
    assert asyncio.run(token.bearer()) == "issued-token-3-5f3e9a1b" and token.current == "issued-token-3-5f3e9a1b"


def test_a_token_is_taken_again_with_a_quarter_of_a_short_life_left() -> None:
    token = Issued(lifetime=2.0)  # used for 1.5 s after it came
    first = asyncio.run(token.bearer())
    time.sleep(0.5)
    assert asyncio.run(token.bearer()) == first
    time.sleep(1.1)
    assert asyncio.run(token.bearer()) != first and token.taken == 2
