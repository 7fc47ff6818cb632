"""A team's pool night: workers on "machines" that share nothing but the Prefect server, the results
database and a bucket.

Real parts, each in its own process: `prefect server start` on PostgreSQL, the results database on the
same PostgreSQL, moto's S3 server holding the matrix and every output, the JudgeBench data served by
`git daemon` (cloned over the network, not from a shared path), two `prefect worker start` processes
each in its own working directory and HOME (no path in common), the deployments registered from the
installed package (`python -m judgebench_flows.deployments.deploy --installed`: no checkout on the
workers), and the bundled OpenAI-compatible endpoint answering the labelled verdict with a latency.

The night itself is a run of the nightly deployment, on the first worker. Then one worker is killed
mid-night (it and every process it started, as a machine going away): the night still completes, the killed cell
run is marked Crashed by the server's automations and run again on the other worker, and no answered
call is paid twice beyond those in flight when the machine died. A night with a `max_cost` that holds
only some cells' worst cases: the cell runs on both machines reserve from the one budget in the
results database, the cells past it are refused, and the night never spends more than its budget.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from judgebench_flows.core.pricing import format_usd
from judgebench_flows.judges.builtin import ARENA_HARD_FOLLOW_UP
from judgebench_flows.judging.matrix import cell_name
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from judgebench_flows.testing.oracle import shown_pair
from tests._s3 import SECRET_KEY, S3Server, free_port
from tests.conftest import CANARY_KEY, GPT4O_FILE, VERDICTS, make_repo, oracle_responder, requires_shared
from tests.test_server_restart import PrefectServer

pytestmark = [pytest.mark.slow, pytest.mark.postgres, requires_shared]

PG_ADMIN_URL = os.environ.get("JUDGEBENCH_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
POOL = "judgebench-pool"  # the documented setup's (docs/operations-deployments.md)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "operations-deployments.md"
BUCKET = "team-judgebench"
MODELS = ["judge-a", "judge-b", "judge-c", "judge-d"]
PAIRS = 6  # 12 calls a cell
NIGHT_SECONDS = 900


@pytest.fixture()
def databases() -> Iterator[dict[str, str]]:
    """Two new PostgreSQL databases: the Prefect server's and the results database."""
    psycopg = pytest.importorskip("psycopg")
    names = {what: f"jb_team_{what}_{uuid.uuid4().hex[:10]}" for what in ("prefect", "results")}
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        pytest.skip(f"no PostgreSQL at {PG_ADMIN_URL} ({str(exc).strip().splitlines()[0]})")
    with admin:
        for name in names.values():
            admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0].split("://", 1)[1]
    try:
        yield {
            "prefect": f"postgresql+asyncpg://{base}/{names['prefect']}",
            "results": f"postgresql+psycopg://{base}/{names['results']}",
        }
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            for name in names.values():
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PostgresPrefectServer(PrefectServer):
    """`prefect server start` on a PostgreSQL database (a team's server)."""

    def __init__(self, home: Path, database_url: str) -> None:
        super().__init__(home)
        self.database_url = database_url

    def start(self) -> PostgresPrefectServer:
        os.environ["PREFECT_API_DATABASE_CONNECTION_URL"] = self.database_url
        try:
            super().start()
        finally:
            os.environ.pop("PREFECT_API_DATABASE_CONNECTION_URL", None)
        return self


@pytest.fixture()
def git_daemon(tmp_path) -> Iterator[tuple[str, str]]:
    """(git:// URL, commit) of a JudgeBench copy served over the network by `git daemon`."""
    base = tmp_path / "served"
    sha = make_repo(base / "JudgeBench")
    port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--export-all", f"--base-path={base}", "--listen=127.0.0.1", f"--port={port}", str(base)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 30
        while subprocess.run(
            ["git", "ls-remote", f"git://127.0.0.1:{port}/JudgeBench"], capture_output=True
        ).returncode:
            assert time.monotonic() < deadline, "git daemon did not start"
            time.sleep(0.3)
        yield f"git://127.0.0.1:{port}/JudgeBench", sha
    finally:
        os.killpg(daemon.pid, signal.SIGTERM)
        daemon.wait(10)


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _session(pid: int) -> int | None:
    fields = _stat(pid)
    return int(fields[3]) if fields else None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _descendants(root: int) -> set[int]:
    """Every live process below `root` in the process tree, followed by parent pid (not by group or
    session, which a child may leave)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and _alive(child):
                found.add(child)
                todo.append(child)
    return found


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


class Machine:
    """A worker on a machine of its own: its own working directory, HOME and PREFECT_HOME."""

    def __init__(self, root: Path, name: str, env: dict[str, str], *worker_args: str) -> None:
        self.root = root / name
        self.work, self.home = self.root / "work", self.root / "home"
        self.work.mkdir(parents=True)
        self.home.mkdir(parents=True)
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "JUDGEBENCH_"))}
        self.env = {
            **clean,
            **env,
            "HOME": str(self.home),
            "PREFECT_HOME": str(self.home / ".prefect"),
            "PREFECT_WORKER_QUERY_SECONDS": "2",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        }
        self.args = worker_args
        self.log = self.root / "worker.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Machine:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "prefect", "worker", "start", "--pool", POOL, *self.args],
            cwd=self.work,
            env=self.env,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group; its flow runs start sessions of their own (see kill)
        )
        return self

    def flow_run_processes(self) -> set[int]:
        """The processes the worker started in sessions of their own (Prefect's process worker starts
        each flow run so): out of reach of a kill of the worker's process group."""
        if self.process is None or self.process.poll() is not None:
            return set()
        session = os.getsid(self.process.pid)
        return {pid for pid in _descendants(self.process.pid) if _session(pid) not in (session, None)}

    def kill(self) -> str:
        """SIGKILL the worker and every process it started, whatever their session, as a machine going
        away. All are frozen first (SIGSTOP) so that none starts another between being found and being
        killed. Returns `ps` lines of what was killed."""
        if self.process is None or self.process.poll() is not None:
            return ""
        os.killpg(self.process.pid, signal.SIGSTOP)
        doomed: set[int] = set()
        while found := _descendants(self.process.pid) - doomed:
            for pid in found:
                _signal(pid, signal.SIGSTOP)
            doomed |= found
        listing = subprocess.run(
            ["ps", "-o", "pid,pgid,sid,cmd", "-p", ",".join(map(str, {self.process.pid, *doomed}))],
            capture_output=True,
            text=True,
        ).stdout
        os.killpg(self.process.pid, signal.SIGKILL)
        for pid in doomed:
            _signal(pid, signal.SIGKILL)
        self.process.wait(30)
        deadline = time.monotonic() + 30
        while alive := {pid for pid in doomed if _alive(pid)}:
            assert time.monotonic() < deadline, f"still running after SIGKILL: {alive}"
            time.sleep(0.2)
        return listing

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _prefect(server_url: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        env={**os.environ, **(env or {}), "PREFECT_API_URL": server_url},
        capture_output=True,
        text=True,
        timeout=600,
    )


def _flow_runs(server_url: str):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: server_url}), get_client(sync_client=True) as client:
        return client.read_flow_runs()


@pytest.fixture()
def team(tmp_path, databases, git_daemon, gpt4o_pairs):
    """The team's setup up and running: server, bucket, matrix, deployments, automations, two workers."""
    url, sha = git_daemon
    home = tmp_path / "server-home"
    home.mkdir()
    server = PostgresPrefectServer(home, databases["prefect"]).start()
    s3 = S3Server(log=tmp_path / "moto.log").__enter__()
    s3.make_bucket(BUCKET)
    endpoint = FakeOpenAIServer(
        oracle_responder(gpt4o_pairs, VERDICTS["arena_hard"]), api_key=CANARY_KEY, models=set(MODELS), latency=0.3
    ).__enter__()
    matrix = {
        "judge_types": ["arena_hard"],
        "models": MODELS,
        "data_files": [GPT4O_FILE],
        "repo_url": url,
        "ref": sha,
        "base_url": endpoint.base_url,
        "db_url": databases["results"],
        "output_root": f"s3://{BUCKET}/nightly",
        "max_samples": PAIRS,
        "concurrency": 2,
        "cells": "pool",
        "options": {"bootstrap_resamples": 200},
    }
    s3.filesystem().pipe_file(f"{BUCKET}/nightly.yaml", yaml.safe_dump(matrix).encode())
    env = {**s3.env, "PREFECT_API_URL": server.url, "OPENAI_API_KEY": CANARY_KEY}
    machines: list[Machine] = []
    try:
        for step in _documented_steps():  # as docs/operations-deployments.md gives them
            done = _prefect(server.url, *step, env=env)
            assert done.returncode == 0, done.stdout + done.stderr
        machines = [
            Machine(tmp_path, "machine-a", env, "--limit", "3").start(),  # the night and cells
            Machine(tmp_path, "machine-b", env, "--work-queue", "adhoc", "--limit", "2").start(),
        ]
        yield {
            "server": server,
            "s3": s3,
            "endpoint": endpoint,
            "machines": machines,
            "env": env,
            "tmp": tmp_path,
            "matrix": matrix,
            "results_db": databases["results"],
        }
    finally:
        for machine in machines:
            machine.stop()
        endpoint.__exit__(None, None, None)
        s3.__exit__(None, None, None)
        server.kill()


def _documented(command: str) -> list[str]:
    """The command of the team setup's block in docs/operations-deployments.md that starts with
    `command`, split as the shell does (its comment dropped, its continued lines joined)."""
    text = DOCS.read_text()
    block = text[text.index("tests/test_pool_team.py runs this block's") :].split("```bash\n", 1)[1].split("```", 1)[0]
    lines = [" ".join(line.split()) for line in block.replace("\\\n", " ").splitlines()]
    found = [line for line in lines if line.startswith(command)]
    assert len(found) == 1, f"{DOCS.name}: the team setup has no single `{command}`: {found}"
    return shlex.split(found[0], comments=True)


def _documented_steps() -> list[list[str]]:
    """The documented one-time steps (deployments from the installed package, the automations) as this
    file runs them: `python -m` and `judgebench` as this interpreter, the alert webhook on a closed port."""
    deploy = _documented("python -m judgebench_flows.deployments.deploy --installed")
    assert deploy[deploy.index("--work-pool") + 1] == POOL and f"s3://{BUCKET}/nightly.yaml" in deploy, deploy
    automations = _documented("judgebench automations install")
    automations[automations.index("--webhook-url") + 1] = "http://127.0.0.1:9/alerts"
    return [deploy[1:], ["-m", "judgebench_flows.cli.main", *automations[1:]]]


def _run_night(team) -> str:
    """Start a run of the nightly deployment on the matrix in the bucket; its flow run id."""
    done = _prefect(
        team["server"].url,
        "-m",
        "prefect",
        "deployment",
        "run",
        "nightly-benchmarks/nightly",
        env=team["env"],
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found = re.search(r"UUID: ([0-9a-f-]{36})", done.stdout)
    assert found, done.stdout
    return found.group(1)


def _wait_final(team, run_id: str, seconds: float = NIGHT_SECONDS):
    from uuid import UUID

    deadline = time.monotonic() + seconds
    while True:
        run = next(r for r in _flow_runs(team["server"].url) if r.id == UUID(run_id))
        if run.state is not None and run.state.is_final():
            return run
        assert time.monotonic() < deadline, "\n".join(m.output()[-4000:] for m in team["machines"])
        time.sleep(2)


def _night_summary(team, night_id: str) -> str:
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId, ArtifactFilterKey
    from prefect.settings import PREFECT_API_URL, temporary_settings

    from judgebench_flows.flows.nightly import NIGHTLY_ARTIFACT_KEY

    with temporary_settings(updates={PREFECT_API_URL: team["server"].url}), get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(
                key=ArtifactFilterKey(any_=[NIGHTLY_ARTIFACT_KEY]),
                flow_run_id=ArtifactFilterFlowRunId(any_=[UUID(night_id)]),
            )
        )
    return artifacts[-1].data


def _assert_no_common_path(team) -> None:
    a, b = team["machines"]
    assert not (set(a.root.rglob("*")) & set(b.root.rglob("*")))
    assert not a.root.is_relative_to(b.root) and not b.root.is_relative_to(a.root)


def _assert_night_outputs(team) -> dict[str, bytes]:
    objects = team["s3"].objects(BUCKET)
    for model in MODELS:
        name = cell_name("arena_hard", model, GPT4O_FILE)
        run_folder = objects[f"nightly/{name}/latest"].decode().strip()
        results = json.loads(objects[f"nightly/{name}/{run_folder}/results.json"])
        assert results["overall_accuracy"]["accuracy"] == 1.0 and results["overall_accuracy"]["total_samples"] == PAIRS
        assert f"nightly/{name}/{run_folder}/report.html" in objects
    assert "nightly/leaderboard.json" in objects
    for value in objects.values():
        assert SECRET_KEY.encode() not in value and CANARY_KEY.encode() not in value
    return objects


def test_a_pool_night_on_two_machines_sharing_only_server_database_and_bucket(team) -> None:
    night_id = _run_night(team)
    night = _wait_final(team, night_id)
    assert night.state.is_completed(), "\n".join(m.output()[-4000:] for m in team["machines"])
    _assert_night_outputs(team)
    snapshot = team["endpoint"].snapshot()
    assert snapshot["distinct_answered"] == snapshot["answered"] == len(MODELS) * 2 * PAIRS, snapshot
    assert snapshot["max_in_flight"] <= 2, snapshot  # the endpoint's limit across machines
    cells = [r for r in _flow_runs(team["server"].url) if r.parameters.get("cell")]
    assert len(cells) == len(MODELS)
    for cell in cells:  # the whole configuration travels, never a key nor a path of the night's machine
        parameters = json.dumps(cell.parameters)
        assert CANARY_KEY not in parameters and SECRET_KEY not in parameters
        assert str(team["tmp"]) not in parameters
    assert all("submitting flow run" in machine.output() for machine in team["machines"]), "a machine ran no cell"
    summary = _night_summary(team, night_id)  # the per-endpoint figures, summed over the cell runs
    endpoint_row = next(line for line in summary.splitlines() if line.startswith("| openai http://127.0.0.1"))
    cells_column = [cell.strip() for cell in endpoint_row.split("|")[1:-1]]
    assert cells_column[1:3] == ["2", str(len(MODELS) * 2 * PAIRS)], endpoint_row  # concurrency, calls
    assert 1 <= int(cells_column[-1]) <= 2, endpoint_row  # most in flight
    _assert_no_common_path(team)


def test_a_worker_killed_mid_night_the_night_still_completes_paying_nothing_twice(team) -> None:
    night_id = _run_night(team)
    endpoint, (_, doomed) = team["endpoint"], team["machines"]
    deadline = time.monotonic() + NIGHT_SECONDS
    # Until a cell judges on that machine: a kill while its cell runs are still Pending (their processes
    # downloading the flow) leaves them Pending, a case the crash automations do not cover (they need a
    # heartbeat); CI once met it when the other machine's answers alone met the old condition.
    while not doomed.flow_run_processes() or not re.search(r" - judging \d+ pairs", doomed.output()):
        assert time.monotonic() < deadline, doomed.output()[-3000:]
        time.sleep(0.5)
    killed = doomed.kill()  # the worker and every process it started: a killpg alone would leave the cell judging
    killed_at = endpoint.snapshot()["answered"]
    sessions = {line.split()[2] for line in killed.splitlines()[1:]}  # pid pgid sid cmd
    assert len(sessions) >= 2, killed  # the worker's and a flow run's of its own, out of the worker group's reach
    print(killed)
    night = _wait_final(team, night_id)
    assert night.state.is_completed(), "\n".join(m.output()[-4000:] for m in team["machines"])
    _assert_night_outputs(team)
    snapshot = endpoint.snapshot()
    calls = len(MODELS) * 2 * PAIRS
    assert snapshot["distinct_answered"] == calls, snapshot
    # a call is paid twice only if it was in flight on the killed machine (its answer never stored)
    assert snapshot["answered"] - calls <= 2, (snapshot, killed_at)
    print(f"killed after {killed_at} answers; paid {snapshot['answered']} for {calls} calls")


def test_the_prefect_server_killed_and_restarted_mid_night_no_cell_runs_twice(team) -> None:
    """SIGKILL to the Prefect server while cells judge, then the same server started again on its
    PostgreSQL database: the night ends Completed (or, had the server stayed away, with its documented
    ending), every cell has one run, run once, and no answered call is paid again."""
    night_id = _run_night(team)
    endpoint, server = team["endpoint"], team["server"]
    deadline = time.monotonic() + NIGHT_SECONDS
    while endpoint.snapshot()["answered"] < 8:  # cells are judging
        assert time.monotonic() < deadline
        time.sleep(0.5)
    server.kill()
    down_at = time.monotonic()
    time.sleep(10)  # the night and its cells find their server gone
    server.start()
    print(f"server back after {time.monotonic() - down_at:.1f} s")
    night = _wait_final(team, night_id)
    log = "\n".join(m.output()[-4000:] for m in team["machines"])
    assert night.state.is_completed(), f"{night.state!r}\n{log}"
    _assert_night_outputs(team)
    cells = [r for r in _flow_runs(team["server"].url) if r.parameters.get("cell")]
    names = sorted(r.parameters["cell"]["name"] for r in cells)
    assert names == sorted(cell_name("arena_hard", m, GPT4O_FILE) for m in MODELS), names  # one run a cell
    assert all(r.state.is_completed() and r.run_count == 1 for r in cells), [
        (r.name, r.state, r.run_count) for r in cells
    ]
    snapshot = endpoint.snapshot()
    assert snapshot["distinct_answered"] == snapshot["answered"] == len(MODELS) * 2 * PAIRS, snapshot


OUTPUT_PER_MTOK = 10.0  # the price file's output price; prompts are free, so a cell's spend is its answers' length


def _answers_at_their_cap(pairs: list[dict]):
    """Arena-Hard's judge answering at its output cap: a first answer with no verdict label (so the
    judge asks its follow-up) and the labelled verdict after it, each 8 tokens short of `max_tokens`.
    A cell then spends nearly its worst case (both turns of every judgment at their caps)."""
    verdict = VERDICTS["arena_hard"]

    def respond(body: dict) -> dict:
        cap = int(body.get("max_completion_tokens") or body["max_tokens"])
        shown = shown_pair(body, pairs)
        follow_up = body["messages"][-1]["content"] == ARENA_HARD_FOLLOW_UP
        text = verdict(shown[1]) if follow_up and shown else "Let me weigh both answers."
        return {"content": text, "reasoning_tokens": cap - len(text.split()) - 8}

    return respond


def test_a_pool_nights_budget_holds_across_both_machines(team, gpt4o_pairs) -> None:
    """`max_cost` of 2.5 cells' worst cases, each cell spending nearly its worst case: whichever machine
    runs which cell and whenever they start, two cells reserve and run, the other two are refused before
    any call with the night's budget's one line; what the night_spend table holds and counts as spent
    never passes the budget while the night runs, and the summary gives the night's cost."""
    from judgebench_flows.data.night_budget import NightBudget

    for machine in team["machines"]:  # each machine keeps its own copy of the team's price file
        prices = "".join(f"  {m}: {{input_per_mtok: 0.0, output_per_mtok: {OUTPUT_PER_MTOK}}}\n" for m in MODELS)
        (machine.home / "prices.yaml").write_text(f"models:\n{prices}")
    worst = PAIRS * 2 * 2 * 4096 * OUTPUT_PER_MTOK / 1e6  # judgments x turns x the judge's max_tokens
    budget = round(2.5 * worst, 6)
    options = {**team["matrix"]["options"], "prices": "~/prices.yaml"}
    matrix = {**team["matrix"], "max_cost": budget, "options": options}
    team["s3"].filesystem().pipe_file(f"{BUCKET}/nightly.yaml", yaml.safe_dump(matrix).encode())
    endpoint = team["endpoint"]
    endpoint.set_responder(_answers_at_their_cap(gpt4o_pairs))

    night_id = _run_night(team)
    ledger = NightBudget(team["results_db"], night_id)
    seen: list[tuple[float, float]] = []
    deadline = time.monotonic() + NIGHT_SECONDS
    while True:  # the budget as every cell run sees it, while the night runs
        totals = ledger.totals()
        if totals is not None:
            seen.append((totals.spent, totals.held))
            assert totals.max_cost == budget and totals.spent + totals.held <= budget + 1e-9, seen
        night = next(r for r in _flow_runs(team["server"].url) if str(r.id) == night_id)
        if night.state is not None and night.state.is_final():
            break
        assert time.monotonic() < deadline, "\n".join(m.output()[-4000:] for m in team["machines"])
        time.sleep(1)
    log = "\n".join(m.output()[-4000:] for m in team["machines"])
    assert any(held > 0 for _, held in seen), seen  # a sample caught cells holding their reservations

    cells = [r for r in _flow_runs(team["server"].url) if r.parameters.get("cell")]
    assert len(cells) == len(MODELS), cells
    judged = [r for r in cells if r.state.is_completed()]
    refused = [r for r in cells if r.state.is_failed()]
    assert len(judged) == 2 and len(refused) == 2, [(r.name, r.state) for r in cells]
    for run in refused:  # the night's budget's one line: what is left, spent and held, and the worst case
        assert re.fullmatch(
            r"error: the night's budget: \$[\d.]+ left of max_cost "
            + re.escape(format_usd(budget))
            + r" \(\$[\d.]+ spent, \$[\d.]+ held by cells running\), below this configuration's worst case "
            + re.escape(format_usd(worst)),
            run.state.message,
        ), run.state.message
    assert all("submitting flow run" in machine.output() for machine in team["machines"]), "a machine ran no cell"
    for run in cells:  # the price file's path travels as written, resolved on each machine
        assert str(team["tmp"]) not in json.dumps(run.parameters)

    totals = ledger.totals()
    assert totals is not None and totals.held == 0, totals
    assert 2 * 0.99 * worst < totals.spent <= budget, (totals, worst)  # two cells, nearly their worst cases
    most = max(spent + held for spent, held in seen)
    print(f"budget {budget}: spent {totals.spent:.4f}; most spent and held at once {most:.4f} ({len(seen)} looks)")
    snapshot = endpoint.snapshot()
    assert snapshot["distinct_answered"] == snapshot["answered"] == 2 * PAIRS * 2 * 2, snapshot  # refused: no call
    assert night.state.is_failed() and "2 of 4 configurations need a look" in night.state.message, (
        f"{night.state!r}\n{log}"
    )
    summary = _night_summary(team, night_id)
    assert f"Tonight's cost: {format_usd(totals.spent)}" in summary, summary
    assert summary.count("the night's budget: $") == 2 and summary.count("| completed | 100.00%") == 2, summary
