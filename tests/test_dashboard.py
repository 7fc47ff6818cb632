"""The team's morning page (issue 61): `judgebench dashboard` and each night's page, checked as a person
and a browser read them.

Synthetic nights (tests/_dashboard_data.py) show every state a cell can be in at once; real nights of the
stand-in judge with noise, one of them made worse on the last night, check that what the nightly flow
stores reads the same and that the night writes, links and logs its page. Headless Chromium opens the
pages: screenshots at 1280 px and a phone's 390 px, the regressed cell found by its label, sorting and
filtering from the address, no request from the page (its network log, against a control page that does
make one), and a year of nights of a 48-cell matrix ready in under 2 s.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from judgebench_flows.data import db
from judgebench_flows.views.dashboard import DashboardFilter, alert_of, dashboard_html, write_dashboard
from tests._dashboard_data import DRIFTED, FAILED, FAILED_REASON, REGRESSED, seed_nights
from tests.test_db import postgresql_url, sqlite_url  # noqa: F401  (fixtures)
from tests.test_report import find_chromium

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
PHONE, DESKTOP = 390, 1280


def chromium(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )


def dom(url: str, *args: str) -> str:
    done = chromium(*args, "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def screenshot(url: str, path: Path, width: int, height: int) -> Path:
    done = chromium(f"--screenshot={path}", f"--window-size={width},{height}", url)
    assert done.returncode == 0 and path.exists(), done.stderr[-2000:]
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 30_000  # a blank page is a few KB
    return path


def page_requests(url: str, log: Path) -> list[str]:
    """The URLs the page asked the network for, from Chromium's network log: requests the page starts
    carry its origin (a file's: "null"); the browser's own (updates, sign-in) say "not an origin"."""
    chromium(f"--log-net-log={log}", "--dump-dom", url)
    netlog = json.loads(log.read_text())
    types = {number: name for name, number in netlog["constants"]["logEventTypes"].items()}
    started = [
        event.get("params") or {} for event in netlog["events"] if types.get(event["type"]) == "URL_REQUEST_START_JOB"
    ]
    return [params["url"] for params in started if "url" in params and params.get("initiator") != "not an origin"]


@pytest.fixture(scope="module")
def nights_db(tmp_path_factory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('nights')}/history.db"
    seed_nights(url, nights=14, cells=8)
    return url


@pytest.fixture(scope="module")
def page(nights_db, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("page") / "dashboard.html"
    write_dashboard(path, db.open_database(nights_db), DashboardFilter(nights=30))
    return path


def grid_rows(html: str) -> list[str]:
    return re.findall(r'<tr data-config="cfg-\d+"[^>]*>.*?</tr>', html, re.S)


def test_each_cell_says_what_its_alert_said_in_words_not_only_colour(page: Path) -> None:
    html = page.read_text()
    rows = grid_rows(html)
    assert len(rows) == 8
    regressed = [r for r in rows if 'data-alert="regressed"' in r]
    assert len(regressed) == 1 and "vanilla" in regressed[0], regressed  # the seeded one: config 1
    tonight = re.search(r'<td class="tonight a-regressed"[^>]*aria-label="([^"]*)"[^>]*>(.*?)</td>', regressed[0])
    assert tonight is not None
    assert tonight.group(1).startswith("tonight: 12-07: regressed") and "change -15.0 pts" in tonight.group(1)
    assert "▼" in tonight.group(2) and ">regressed</span>" in tonight.group(2)  # symbol and word beside the colour
    failed = next(r for r in rows if 'data-alert="failed"' in r)
    assert "✗" in failed and "failed</span>" in failed
    # every state has its symbol and word in the legend
    for word in ("regressed", "improved", "within noise", "no baseline", "failed", "not run"):
        assert f"{word}</span>" in html or f" {word}</li>" in html or f"{word}</span> <span" in html, word
    # the night's cost, wall time, the smallest drop its checks could see, and the failed cell's reason
    assert "$6.00" in html and "7m 20s" in html and "each check detects a drop of 3.4 to 10.2 points" in html
    assert f"{FAILED_REASON}</li>" in html
    # the configuration whose endpoint said another build: marked on its trend's time axis
    assert html.count('<g class="change">') == 1 and "system_fingerprint fp_a -&gt; fp_b" in html


def test_tonights_flipped_pairs_link_to_both_verdicts(page: Path) -> None:
    html = page.read_text()
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    links = re.findall(r'href="#([^"]+)"', html)
    assert links and not [link for link in links if link not in ids], "every link on the page has its anchor"
    flips = re.findall(r'<tr class="flip (worse|better)">.*?href="#(v-[^"]+)">before</a> · <a href="#(v-[^"]+)">', html)
    assert {kind for kind, _, _ in flips} == {"worse", "better"}
    kind, before, after = flips[0]
    assert before != after and before.split("-")[-1] == after.split("-")[-1]  # one pair, two runs
    for anchor in (before, after):
        verdict = re.search(rf'<div class="verdict" id="{anchor}">(.*?)\n</div>', html, re.S)
        assert verdict is not None and verdict.group(1).count("said ") == 2, verdict  # both orders shown
        assert verdict.group(1).count("&lt;script&gt;") == 2  # a judge's answer is text, never markup
    assert "<script>x</script>" not in html


def test_the_page_loads_nothing_and_runs_only_its_own_script(page: Path) -> None:
    html = page.read_text()
    assert not re.search(r"https?://", html), re.search(r".{60}https?://.{60}", html)
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', html).group(1)
    directives = dict(part.strip().split(" ", 1) for part in csp.split(";"))
    assert directives["default-src"] == "'none'" and "unsafe" not in directives["script-src"]
    scripts = re.findall(r"<script>(.*?)</script>", html, re.S)
    assert len(scripts) == 1
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in csp


def test_alerts_read_from_stored_runs(nights_db: str) -> None:
    from judgebench_flows.data.queries import dashboard_runs

    runs = dashboard_runs(db.open_database(nights_db))
    last = {r.flow_run_id: r for r in runs if r.root_flow_run_id == "night-0013"}
    assert alert_of(last[f"cell-13-{REGRESSED}"]) == "regressed"
    assert alert_of(last[f"cell-13-{FAILED}"]) == "failed"
    assert alert_of(last[f"cell-13-{DRIFTED}"]) in ("noise", "improved")
    first = [r for r in runs if r.root_flow_run_id == "night-0000"]
    assert {alert_of(r) for r in first} == {"baseline"}  # nothing to compare the first night with
    improved = [r for r in runs if alert_of(r) == "improved"]
    assert improved and all(1 - r.p_drop < r.alpha for r in improved)


@pytest.mark.parametrize("backend", ["sqlite_url", "postgresql_url"])
def test_both_databases_read_alike_and_a_pool_nights_budget_is_shown(backend: str, request) -> None:
    """The figures results.json holds are read by the database itself (SQLite's JSON1, PostgreSQL's
    jsonb): both give the same page; a pool night's budget comes from `night_spend`."""
    import sqlalchemy as sa

    url = request.getfixturevalue(backend)
    seed_nights(url, nights=6, cells=4, pairs=12)
    engine = db.open_database(url)
    with engine.begin() as connection:  # the last night ran on the pool with a budget of $5
        connection.execute(
            sa.insert(db.table_of(db.NightSpendRow)),
            [
                {"night": "night-0005", "cell": "", "held": 5.0, "spent": 0.0},
                {"night": "night-0005", "cell": "a", "held": 0.25, "spent": 1.5},
            ],
        )
    html = dashboard_html(engine, DashboardFilter(nights=10))
    assert "$5.00 (max_cost); spent $1.50; still held $0.2500" in html
    cells = re.findall(r'<td class="tonight a-(\w+)"', html)
    assert sorted(cells) == ["failed", "noise", "noise", "regressed"], cells
    assert re.findall(r"(\d+) right → wrong, (\d+) wrong → right", html)  # flips from both backends' verdicts
    assert "change -15.0 pts" in html and "noise ±1.0" in html


def test_names_from_the_database_are_text(tmp_path: Path) -> None:
    """A model, judge or data file name is whatever its matrix said: never markup on the page."""
    url = f"sqlite:///{tmp_path}/hostile.db"
    seed_nights(url, nights=2, cells=2, pairs=4)
    engine = db.open_database(url)
    hostile = '<img src=x onerror="alert(1)">'
    with engine.begin() as connection:
        table = db.table_of(db.RunRow)
        connection.execute(table.update().values(model=hostile, served_as=hostile, message=hostile))
    html = dashboard_html(engine, DashboardFilter())
    assert "<img" not in html and "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;" in html


def run_dashboard(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "judgebench_flows.cli.main", "dashboard", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--nights", "0"], "error: dashboard: argument --nights: 0: give a whole number of nights, at least 1\n"),
        (
            ["--nights", "many"],
            "error: dashboard: argument --nights: many: give a whole number of nights, at least 1\n",
        ),
        (["--model", " "], "error: dashboard: argument --model: give a name, not an empty string\n"),
        (["--colour", "red"], "error: judgebench: unrecognized arguments: --colour red\n"),
    ],
)
def test_a_bad_option_is_one_line_and_exit_2(tmp_path: Path, given: list[str], said: str) -> None:
    done = run_dashboard(*given, cwd=tmp_path)
    assert (done.returncode, done.stderr, done.stdout) == (2, said, "")


def test_a_missing_database_or_an_unwritable_output_is_one_line(tmp_path: Path, nights_db: str) -> None:
    done = run_dashboard("--db-url", f"sqlite:///{tmp_path}/none.db", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "none.db" in done.stderr, done.stderr
    done = run_dashboard("--db-url", nights_db, "--output", str(tmp_path), cwd=tmp_path)
    assert (done.returncode, done.stderr) == (2, f"error: --output: '{tmp_path}' is a directory, not a file\n")


def test_the_command_writes_the_page_with_its_filters(tmp_path: Path, nights_db: str) -> None:
    done = run_dashboard("--db-url", nights_db, "--nights", "5", "--model", "judge-0", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    path = tmp_path / "results" / "dashboard.html"
    assert done.stdout == f"{Path('results/dashboard.html')}\n" and path.exists()
    html = path.read_text()
    rows = grid_rows(html)
    assert len(rows) == 4 and all("judge-0" in r for r in rows)  # configurations 0-3 judge with judge-0
    assert len(re.findall(r'<th scope="col" class="night', html)) == 5
    assert "4 configurations over 5 nights (model judge-0)" in html
    done = run_dashboard("--db-url", nights_db, "--benchmark", "JudgeBench", "--judge-type", "vanilla", cwd=tmp_path)
    assert done.returncode == 0 and len(grid_rows(path.read_text())) == 2  # every run so far is JudgeBench's
    done = run_dashboard("--db-url", nights_db, "--benchmark", "llmbar", cwd=tmp_path)
    assert done.returncode == 0 and "0 configurations over 0 nights (benchmark llmbar)" in path.read_text()


def test_in_chromium_at_both_widths_sorted_and_filtered_from_the_address(page: Path, tmp_path: Path) -> None:
    url = page.resolve().as_uri()
    for width, height in ((DESKTOP, 1800), (PHONE, 2400)):
        screenshot(url, tmp_path / f"dashboard-{width}.png", width, height)
    shown = dom(url)
    regressed = re.findall(r'<td class="tonight a-regressed"[^>]*aria-label="(tonight: [^"]*regressed[^"]*)"', shown)
    assert len(regressed) == 1  # found by its label, as a screen reader reads it
    assert re.search(r'<html lang="en" data-ready-ms="\d+"', shown)  # the script ran under the page's CSP
    by_drop = grid_rows(dom(url + "?sort=drop"))
    assert 'data-alert="regressed"' in by_drop[0]  # the biggest drop first
    looked = grid_rows(dom(url + "?alert=look"))
    visible = [r for r in looked if " hidden" not in r.split(">", 1)[0]]
    assert sorted(re.search(r'data-alert="(\w+)"', r).group(1) for r in visible) == ["failed", "regressed"]
    assert "2 of 8 shown" in dom(url + "?alert=look")
    by_name = grid_rows(dom(url + "?q=skywork"))
    assert len([r for r in by_name if " hidden" not in r.split(">", 1)[0]]) == 2


def test_no_request_leaves_the_page(page: Path, tmp_path: Path) -> None:
    control = tmp_path / "control.html"
    control.write_text('<img src="http://127.0.0.1:9/x.png">')
    assert page_requests(control.as_uri(), tmp_path / "control.json") == ["http://127.0.0.1:9/x.png"]  # it sees one
    assert page_requests(page.resolve().as_uri(), tmp_path / "netlog.json") == []


def test_a_year_of_nights_of_48_cells_opens_in_under_2_s(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/year.db"
    seed_nights(url, nights=365, cells=48, pairs=20)
    path = tmp_path / "year.html"
    path.write_text(dashboard_html(db.open_database(url), DashboardFilter(nights=365)))
    assert path.stat().st_size < 4_000_000
    times = []
    for _ in range(3):  # the best of three: a busy machine's slow start is not the page's
        shown = dom(path.as_uri())
        times.append(int(re.search(r'data-ready-ms="(\d+)"', shown).group(1)))
        if times[-1] < 2000:
            break
    assert min(times) < 2000, times
    assert (
        shown.count('<tr data-config="cfg-') == 48 and "The grid shows the newest 60 of the page's 365 nights" in shown
    )


def _night_logs(flow_run_id: object) -> list[str]:
    """The night's log lines, in order, without the one Prefect's engine adds after the flow returns."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId
    from prefect.client.schemas.sorting import LogSort
    from prefect.logging.handlers import APILogWorker

    APILogWorker.drain_all(timeout=30)  # logs are sent in the background
    with get_client(sync_client=True) as client:
        logs = client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id])), sort=LogSort.TIMESTAMP_ASC
        )
    return [log.message for log in logs if not log.message.startswith("Finished in state")]


@pytest.mark.slow
def test_real_nights_write_link_and_log_their_page(
    prefect_server, judgebench_repo, gpt4o_pairs, tmp_path, monkeypatch, release_prefect_workers
):
    """Three nights of two judges on the stand-in with noise (re-drawn verdicts, as at temperature > 0);
    on the third judge-b answers every pair wrong and the endpoint says another fingerprint. Each night
    writes its page beside its outputs, links it from its summary and ends its log with it; the last
    night's page shows judge-b regressed, its flipped pairs, and the build change on both trends."""
    import yaml

    from judgebench_flows.testing.fake_openai import FakeOpenAIServer
    from judgebench_flows.testing.oracle import oracle_responder
    from tests._helpers import night_summary, run_night
    from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS

    url, sha = judgebench_repo
    db_url = f"sqlite:///{tmp_path}/history.db"
    monkeypatch.setenv("NIGHT_KEY", CANARY_KEY)
    steady = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"], accuracy=0.8, seed=1, noise=0.1, noise_seed=3)
    wrong = oracle_responder(gpt4o_pairs, VERDICTS["vanilla"], wrong=True)
    worse = {"judge-b": False}

    def respond(body: dict) -> str:
        return wrong(body) if worse.get(body["model"]) else steady(body)

    matrix = tmp_path / "matrix.yaml"
    output_root = tmp_path / "nightly"
    matrix.write_text(
        yaml.safe_dump(
            {
                "judge_types": ["vanilla"],
                "data_files": [GPT4O_FILE],
                "repo_url": url,
                "ref": sha,
                "db_url": db_url,
                "output_root": str(output_root),
                "max_samples": 12,
                "concurrency": 4,
                "models": [
                    {"model": m, "base_url": "BASE", "api_key_env": "NIGHT_KEY"} for m in ("judge-a", "judge-b")
                ],
                "options": {"cache_dir": str(tmp_path / "cache"), "bootstrap_resamples": 200},
            }
        )
    )
    states = []
    with FakeOpenAIServer(
        respond, api_key=CANARY_KEY, models={"judge-a", "judge-b"}, system_fingerprint="fp_one"
    ) as server:
        matrix.write_text(matrix.read_text().replace("BASE", server.base_url))
        for night in range(3):
            if night == 2:
                worse["judge-b"] = True
                server.configure(system_fingerprint="fp_two")
            states.append(run_night(matrix))
    assert [s.is_completed() for s in states] == [True, True, False], states
    assert "vanilla · judge-b · gpt-4o (regressed" in states[-1].message

    latest = output_root / "dashboard.html"
    [own] = list((output_root / "dashboards").glob("*.html"))  # one date: each night replaced that day's page
    assert own.read_text() == latest.read_text()
    summary = night_summary(states[-1])
    assert f"Every configuration's nights on one page: `{own}`" in summary, summary
    lines = _night_logs(states[-1].state_details.flow_run_id)
    assert lines[-1] == f"the night's page: {own}", lines[-3:]

    html = latest.read_text()
    rows = grid_rows(html)
    assert len(rows) == 2 and len(re.findall(r'<th scope="col" class="night', html)) == 3
    [regressed] = [r for r in rows if 'data-alert="regressed"' in r]
    assert "judge-b" in regressed and "judge-a" not in regressed
    assert re.search(r'aria-label="tonight: [^"]*: regressed · 0\.00%', regressed), regressed
    section = html[html.index('<details class="config" id="cfg-1"') :]  # judge-b's, by name the second
    assert "<strong>vanilla · judge-b · gpt-4o</strong>" in section[:400]
    flips = re.search(r"(\d+) right → wrong, (\d+) wrong → right", section)
    assert flips is not None and int(flips.group(1)) > 0 and int(flips.group(2)) == 0
    assert html.count('<g class="change">') == 2 and "fp_one -&gt; fp_two" in html  # both judges' trends
    wall = round(float(re.search(r"Night: ([\d.]+) s wall time", summary).group(1)))
    assert f'<div class="big">{wall // 60}m {wall % 60:02d}s</div>' in html  # the night's own, from its flow
    assert CANARY_KEY not in html and not re.search(r"https?://", html)

    uri = latest.as_uri()
    for width, height in ((DESKTOP, 1600), (PHONE, 2200)):
        screenshot(uri, tmp_path / f"night-{width}.png", width, height)
    shown = dom(uri)
    assert len(re.findall(r'<td class="tonight a-regressed"[^>]*aria-label="tonight: [^"]*regressed', shown)) == 1
