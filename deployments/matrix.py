"""`python -m judgebench_flows.deployments.matrix MATRIX`: check a nightly matrix file from the command line
as the night will read it (`judging.matrix`), before any call, and show what a night of it runs."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from datetime import datetime, timezone

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.text import for_terminal, printable
from judgebench_flows.judging.matrix import NightlyMatrix, load_matrix


def describe(matrix: NightlyMatrix, now: datetime) -> list[str]:
    """What a night of this matrix runs: each endpoint with its one limit and its cells, and the deadline."""
    entries = matrix.entries()
    lines = [f"{len(entries)} configurations, up to {matrix.cells_in_flight} synchronous ones at once"]
    if matrix.cells == "pool":
        lines = [f"{len(entries)} configurations, each its own run of the ad-hoc deployment on the work pool"]
    for endpoint in dict.fromkeys(e.endpoint for e in entries):
        cells = [e for e in entries if e.endpoint == endpoint]
        settings = cells[0].config.endpoint
        rpm = f", rpm {settings.rpm:g}" if settings.rpm else ""
        shown = printable(endpoint)  # names and URLs come from the file: never a terminal's escape sequence
        lines.append(f"{shown}: concurrency {settings.concurrency}{rpm} shared by {_cells(len(cells))}")
        models = Counter(f"{e.config.model}{' (batch)' if e.config.endpoint.batch else ''}" for e in cells)
        lines += [f"  {printable(model)}: {_cells(count)}" for model, count in models.items()]
    deadline = matrix.deadline(now)
    if deadline is not None:
        lines.append(f"deadline: {deadline.isoformat()} for a night starting {now.isoformat(timespec='minutes')}")
    return lines


def _cells(count: int) -> str:
    return f"{count} cell{'s' if count != 1 else ''}"


def main(argv: list[str] | None = None) -> int:
    """Print the matrix's endpoints, their limits and cells, and the deadline; bad input: one line, exit 2."""
    parser = argparse.ArgumentParser(description="Check a nightly matrix and show what a night of it runs.")
    parser.add_argument("matrix", help="the matrix file (e.g. deployments/nightly.yaml)")
    parser.add_argument("--start", help="the night's start (ISO 8601 with offset; default: now) for its deadline")
    args = parser.parse_args(argv)
    try:
        now = datetime.fromisoformat(args.start) if args.start else datetime.now(timezone.utc)
        if now.tzinfo is None:
            raise UserError("--start: give its UTC offset (+01:00, Z)")
        print("\n".join(describe(load_matrix(args.matrix), now)))
    except ValueError as exc:
        print(for_terminal(f"error: --start: {exc}"), file=sys.stderr)
        return 2
    except UserError as exc:
        print(for_terminal(f"error: {exc}"), file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
