"""Which failures of a deployment's flow run are worth a second attempt.

A second attempt replays a run (answered calls come back from the call cache, finished configurations
from Prefect's results, so it pays for what is missing only), and it is worth it when the cause may have
passed: the endpoint was down or rate limiting past every call's own retries, the Prefect server or the
network went away. It is not worth it, and only delays the alert, for requests the endpoint rejected for
what they are (a context too long: the caller does not send those again anyway), for a result (a regression), for bad
input (an option, a matrix, a key or model the endpoint refuses) or for a repository or ref that does not
exist: those fail the same way again. An unexpected error (a bug) is not replayed either.

Prefect 3 has `retry_condition_fn` for tasks only, and a flow-level retry would also replay what cannot
recover, so the deployments' entry flows (flows/nightly.py) run a configuration's judging subflow once
more when, and only when, `is_transient` says so. A night whose own process dies (its machine, or the
Prefect server, lost) is Crashed and rescheduled by the automations (deployments/automations.py).
"""

from __future__ import annotations

import httpx
from prefect.exceptions import PrefectHTTPStatusError

from judgebench_flows.calls.retry import RetryPolicy, deterministic_reason
from judgebench_flows.core.errors import BatchRefused, RunFailed, UserError
from judgebench_flows.scoring.run_results import RunResults


def calls_went_unanswered(results: RunResults | None) -> bool:
    """A run that measured too little because its calls got no answer (endpoint down, rate limited past
    its retries), not because the judge's answers were unparseable or the endpoint rejected the requests
    themselves (a context too long: `deterministic_reason`, never sent twice): asking again may work."""
    if results is None:
        return False
    invalid = results.invalid
    rejected = sum(count for reason, count in invalid.reasons.items() if deterministic_reason(reason))
    failed = invalid.failed_judgments - rejected
    return failed > 0 and failed >= invalid.invalid_judgments + rejected


def carried_results(error: BaseException | None) -> RunResults | None:
    """The results a `RunFailed` carries, checked: it holds results.json's content as a dict (core/ sits
    below the model), so this is where that dict becomes `RunResults`, for the retry rule and the run's
    event alike. None for any other error, or content that is not a results.json."""
    return RunResults.checked(error.results) if isinstance(error, RunFailed) else None


def is_transient(error: BaseException | None, published: RunResults | None = None) -> bool:
    """Whether `error` may not happen on a second attempt. `published`: the results the run published as
    read back from its results.json (a night's cell: its error crossed Prefect's pickling, which drops
    what a `RunFailed` carries); without them, those `error` carries."""
    if error is None:
        return False
    if isinstance(error, RunFailed):  # measured too little: transient only if the endpoint did not answer
        return calls_went_unanswered(published if published is not None else carried_results(error))
    if isinstance(error, UserError):  # bad input, a refused key or model, an unknown repository or ref
        return False
    if isinstance(error, PrefectHTTPStatusError):
        return error.response.status_code >= 500 or error.response.status_code in (408, 429)
    if isinstance(error, (httpx.TransportError, ConnectionError, TimeoutError)):
        return True
    return RetryPolicy.retries(error)


class BenchmarkFailed(Exception):
    """A deployment run ends Failed: some configuration regressed or failed."""


def failure_line(error: BaseException) -> str:
    """The one line `judgebench run` prints for `error` (cli/main.py), for a deployment run's state
    message and log: the reason reads the same on the terminal, in `--watch` and in the UI."""
    from judgebench_flows.core.pricing import BudgetReached
    from judgebench_flows.core.secrets import redact

    text = " ".join(redact(str(error)).split()) or type(error).__name__
    if isinstance(error, BudgetReached):
        return f"stopped: {text}"
    if isinstance(error, RunFailed):
        return f"run failed: {text}"
    if isinstance(error, (UserError, BatchRefused)):
        return f"error: {text}"
    return f"{type(error).__name__}: {text}"


__all__ = ["BenchmarkFailed", "calls_went_unanswered", "carried_results", "failure_line", "is_transient"]
