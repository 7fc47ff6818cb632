"""`python -m judgebench_flows.cli.prefect_server`: the address of the Prefect server runs report to, from
the command line (README, docs/prefect-server.md). The lookup and the start live in
`judgebench_flows.runtime.prefect_server`, below the command and `evaluate()` alike; this is its shell door."""

from __future__ import annotations

import argparse
import sys

from judgebench_flows.core.text import for_terminal
from judgebench_flows.runtime.prefect_server import PrefectServerError, use_prefect_server


def main(argv: list[str] | None = None) -> int:
    """Print the API URL runs report to (starting this PREFECT_HOME's background server if none answers),
    for `export PREFECT_API_URL=$(...)` before Prefect's own commands (`prefect deploy`, a worker) in the
    same shell."""
    parser = argparse.ArgumentParser(
        prog="python -m judgebench_flows.cli.prefect_server",
        description="Print the Prefect API URL that `judgebench run` reports to: PREFECT_API_URL if set, else "
        "this PREFECT_HOME's background server (started now if none answers, as a run would).",
    )
    parser.parse_args(argv)
    try:
        print(use_prefect_server().api_url)
    except PrefectServerError as exc:
        print(for_terminal(f"error: {exc}"), file=sys.stderr)
        return 5
    return 0


if __name__ == "__main__":
    sys.exit(main())
