"""The dashboard on a year of nights: how long `judgebench dashboard`'s page takes to build and how long
Chromium takes to open it, and its size.

Seeds `--nights` nights of `--cells` configurations (default 365 x 48: a year of a 48-cell matrix) with
tests/_dashboard_data.py (each run's row, results.json figures and category metrics; the last two nights'
judgments), writes the page `--repeat` times (the median is reported), then opens it in headless
Chromium `--repeat` times and reads the page's own `data-ready-ms` (parsed, laid out and its script run,
from navigation start). Run by hand; this is a measurement, not a test. Figures: docs/performance.md.

    python benchmarks/bench_dashboard.py                  # about a minute on a busy 2-core machine
    python benchmarks/bench_dashboard.py --nights 30 --cells 24
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from judgebench_flows.data import db  # noqa: E402
from judgebench_flows.views.dashboard import DashboardFilter, dashboard_html  # noqa: E402
from tests._dashboard_data import seed_nights  # noqa: E402

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
)


def open_ms(binary: str, page: Path) -> int:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        done = subprocess.run(
            [binary, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        )
    return int(re.search(r'data-ready-ms="(\d+)"', done.stdout).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--cells", type=int, default=48)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dashboard-") as folder:
        url = f"sqlite:///{folder}/history.db"
        started = time.perf_counter()
        seed_nights(url, args.nights, args.cells, pairs=20)
        print(f"seeded {args.nights} nights x {args.cells} cells in {time.perf_counter() - started:.1f} s")
        engine = db.open_database(url)
        page = Path(folder) / "dashboard.html"
        builds, cpu = [], []
        for _ in range(args.repeat):
            started, used = time.perf_counter(), time.process_time()
            page.write_text(dashboard_html(engine, DashboardFilter(nights=args.nights)))
            builds.append(time.perf_counter() - started)
            cpu.append(time.process_time() - used)
        size, wall, own = page.stat().st_size / 1e6, statistics.median(builds), statistics.median(cpu)
        print(f"page: {size:.2f} MB, built in {wall:.2f} s ({own:.2f} s of CPU; median of {args.repeat})")
        binary = shutil.which("chromium") or shutil.which("chromium-browser")
        if binary is None:
            print("chromium not installed: apt-get install chromium")
            return
        opened = [open_ms(binary, page) for _ in range(args.repeat)]
        print(
            f"Chromium: ready in {statistics.median(opened)} ms (median of {opened}); load average {os.getloadavg()[0]:.1f}"
        )


if __name__ == "__main__":
    main()
