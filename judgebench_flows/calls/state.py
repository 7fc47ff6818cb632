"""`CallState`: what the calls of one run share, in one object the run creates and hands to its callers.

A run's calls learn as they go: the request adjustments its 400s taught (`request_rules.Learned`), the
requests an endpoint rejected for what they are (`budget`), one limit per endpoint that every caller of
it holds together (`limits`), one Vertex access token per credentials file (`google_api.VertexToken`).
Whoever starts a run creates one (`judging.run_context.RunContext` holds it): the shards of a run share
it, the nightly matrix's cells share their night's, and a new run starts clean. Locks make it safe
from the threads Dask runs shards in; what belongs to an event loop (a semaphore) is made in, and
kept per, the loop that uses it.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from judgebench_flows.calls.budget import Failure
from judgebench_flows.calls.limits import CallLimits, EndpointUse, LimitKey
from judgebench_flows.calls.request_rules import Learned, RequestReport, RequestRule

if TYPE_CHECKING:
    from judgebench_flows.calls.azure_api import EntraToken
    from judgebench_flows.calls.google_api import VertexToken


@dataclass(eq=False)
class CallState:
    """What one run's calls share (see the module docstring); a caller made without one gets its own."""

    learned: dict[tuple[str, str, RequestRule], Learned] = field(default_factory=dict)
    rejections: dict[tuple[str, str], dict[str, Failure]] = field(default_factory=dict)
    limits: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[LimitKey, CallLimits]] = field(
        default_factory=weakref.WeakKeyDictionary
    )
    vertex_tokens: dict[str, VertexToken] = field(default_factory=dict)
    entra: EntraToken | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def learned_for(self, base_url: str, model: str, base: RequestRule) -> Learned:
        """The run's `Learned` for an endpoint, model and configured rule (created on first use)."""
        key = (base_url.rstrip("/"), model, base)
        with self._lock:
            learned = self.learned.get(key)
            if learned is None:
                learned = self.learned[key] = Learned(base)
            return learned

    def request_report(self, base_url: str, model: str, base: RequestRule) -> RequestReport:
        """For results.json's `run` section and the report: the rule applied and what the run adjusted."""
        return self.learned_for(base_url, model, base).report()

    def rejections_for(self, base_url: str, model: str) -> dict[str, Failure]:
        """The requests the run saw rejected for what they are, for one endpoint and model (`budget`): a
        nightly configuration run once more in the same night does not send them again."""
        with self._lock:
            return self.rejections.setdefault((base_url.rstrip("/"), model), {})

    def shared_limits(
        self,
        endpoint: str,
        concurrency: int,
        request_timeout: float,
        rpm: float | None = None,
        adaptive: bool = False,
        global_rate_limit: str | None = None,
    ) -> CallLimits:
        """The limits of `endpoint` in the running event loop, shared by every caller of the run that asks
        with the same values: runs side by side in one night (the matrix's cells) hold one `concurrency`
        and one `rpm` per endpoint together, not one each."""
        key: LimitKey = (endpoint, concurrency, request_timeout, rpm, adaptive, global_rate_limit)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop (a script's caller): its own limits
            return CallLimits(concurrency, request_timeout, rpm, adaptive, global_rate_limit)
        with self._lock:
            per_loop = self.limits.setdefault(loop, {})
            limits = per_loop.get(key)
            if limits is None:
                limits = per_loop[key] = CallLimits(concurrency, request_timeout, rpm, adaptive, global_rate_limit)
            return limits

    def endpoint_usage(self) -> dict[str, EndpointUse]:
        """What each endpoint's limits saw in this run (summed over the limits of one endpoint)."""
        usage: dict[str, EndpointUse] = {}
        with self._lock:
            limits = [(key, each) for per_loop in self.limits.values() for key, each in per_loop.items()]
        for key, each in limits:
            seen = each.usage.seen()
            known = usage.setdefault(key[0], {"calls": 0, "busy_s": 0.0, "max_in_flight": 0, "concurrency": key[1]})
            known["calls"] += seen["calls"]
            known["busy_s"] = round(known["busy_s"] + seen["busy_s"], 3)
            known["max_in_flight"] = max(known["max_in_flight"], seen["max_in_flight"])
        return usage

    def endpoint_periods(self) -> dict[str, list[tuple[float, float]]]:
        """Each endpoint's busy periods in wall-clock time (`EndpointUsage.busy_periods`), over its limits."""
        periods: dict[str, list[tuple[float, float]]] = {}
        with self._lock:
            limits = [(key, each) for per_loop in self.limits.values() for key, each in per_loop.items()]
        for key, each in limits:
            periods.setdefault(key[0], []).extend(each.usage.busy_periods())
        return periods

    def entra_token(self) -> EntraToken:
        """The run's Microsoft Entra ID token for Azure OpenAI, shared by every call, shard and event loop."""
        from judgebench_flows.calls.azure_api import EntraToken

        with self._lock:
            if self.entra is None:
                self.entra = EntraToken()
            return self.entra

    def vertex_token(self) -> VertexToken:
        """The run's Vertex access token for its Application Default Credentials (one per credentials
        file), shared by every call, shard and event loop of the run."""
        from judgebench_flows.calls.google_api import VertexToken

        key = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS") or ""
        with self._lock:
            token = self.vertex_tokens.get(key)
            if token is None:
                token = self.vertex_tokens[key] = VertexToken()
            return token
