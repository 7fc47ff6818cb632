"""What a person reads of an ad-hoc run (the `adhoc` deployment, flows/adhoc_flow.py) on its own flow run's
page: how it ended, its judging subflow's results summary, and where its files and subflow are, so nobody
needs to open the subflow to find them."""

from __future__ import annotations

from collections.abc import Mapping

from judgebench_flows.data import storage
from judgebench_flows.scoring.cell_outcome import CellOutcome


def adhoc_markdown(outcome: CellOutcome, run_summary: str | None, outputs: Mapping[str, str], subflow_link: str) -> str:
    """The ad-hoc run's own page: `run_summary` (the judging subflow's results summary; None when it
    published none), then where everything is: `subflow_link` and each of `outputs` (results.json's)."""
    head = [f"**Status: {outcome.status}**" + (f": {outcome.message}" if outcome.message else ""), ""]
    body = (
        [run_summary]
        if run_summary is not None
        else ["No results were published (the run stopped before judging finished)."]
    )
    links = [
        "",
        "## Where things are",
        "",
        f"- judging subflow run: {subflow_link}",
        f"- results: {storage.markdown_link(outcome.result_path)}",
    ]
    links += [f"- {name}: {storage.markdown_link(path)}" for name, path in outputs.items() if name != "results"]
    if outcome.run_id:
        links.append(f"- history: `judgebench history` (run `{outcome.run_id}`), `judgebench report {outcome.run_id}`")
    return "\n".join(head + body + links)


__all__ = ["adhoc_markdown"]
