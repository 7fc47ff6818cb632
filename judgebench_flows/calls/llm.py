"""Calls to an endpoint: the names the rest of the project imports, from the modules that now hold them.

A call goes through `caller.ChatCaller`, which composes `cache` (the persistent call cache and its
write-behind group commit), `retry` (which failures are retried, backoff, error texts), `limits`
(semaphore, requests-per-minute pacer, adaptive and global concurrency) and `transport` (the openai
clients and the reading of an answer). Import from here or from those modules.
"""

from __future__ import annotations

from judgebench_flows.calls.cache import CallCache, request_key
from judgebench_flows.calls.caller import EARLY_STOP_CALLS, MAX_ADJUSTMENTS_PER_CALL, CallStats, ChatCaller
from judgebench_flows.calls.limits import AdaptiveLimit, CallLimits, RatePacer
from judgebench_flows.calls.retry import RetryPolicy
from judgebench_flows.calls.transport import CONNECTIONS_PER_CLIENT, BadAnswerBody, tls_context
from judgebench_flows.core.endpoint import CacheMode

__all__ = [
    "CONNECTIONS_PER_CLIENT",
    "EARLY_STOP_CALLS",
    "MAX_ADJUSTMENTS_PER_CALL",
    "AdaptiveLimit",
    "BadAnswerBody",
    "CacheMode",
    "CallCache",
    "CallLimits",
    "CallStats",
    "ChatCaller",
    "RatePacer",
    "RetryPolicy",
    "request_key",
    "tls_context",
]
