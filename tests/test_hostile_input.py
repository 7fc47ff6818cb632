"""Hostile input, third pass (issue 52): a matrix that explodes, names that talk to the terminal, names that
fail after paying.

Each hostile input is fed where a user or an attacker would put it: a matrix file to the matrix check and to
a night, options and files to `judgebench run`, a cloned repository's outputs/ to `judgebench leaderboard`.
The contract for bad input holds for every one: ONE line on stderr naming the file (and line) or the option,
exit 2, within a bounded time and memory (the subprocess runs under an address-space limit), and no request
reaches the stand-in endpoint the settings point at. Untrusted names that are printed (a fork's judge names,
a stored run's model) come out with their control characters escaped, on a pipe and on a terminal.
"""

from __future__ import annotations

import json
import os
import pty
import resource
import select
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from judgebench_flows.core.errors import UserError
from judgebench_flows.testing.fake_openai import FakeOpenAIServer
from tests.conftest import CANARY_KEY, GPT4O_FILE, make_repo

ROOT = Path(__file__).resolve().parents[1]
MEMORY_LIMIT = 1024 * 2**20  # the matrix check and a refused run need under 512 MiB of address space
ESCAPES = "\x1b]52;c;aGFja2Vk\x07\x1b[2J"  # a clipboard write (OSC 52, BEL-terminated) and a clear screen
RAW = ("\x1b]52", "\x1b[2J", "\x07", "\x00")


def _bounded() -> None:
    """In the child before exec: its address space is limited, so a bomb that expands fails the test
    (a MemoryError is not exit 2 with one line) instead of the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def _run(args: list[str], cwd: Path, timeout: float = 90, **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**os.environ, "OPENAI_API_KEY": CANARY_KEY, "PREFECT_API_URL": "http://127.0.0.1:9/api", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=_bounded,
    )
    return done, time.monotonic() - started


def _one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a command refused as bad input (exit 2), without a raw control byte."""
    lines = done.stderr.splitlines()
    assert done.returncode == 2 and len(lines) == 1, (done.returncode, done.stderr[-3000:])
    assert not any(raw in done.stderr for raw in RAW), done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


# --- the matrix: its YAML read with limits --------------------------------------------------------


def _bomb(levels: int = 9, indent: str = "    ") -> str:
    """`a: &a [x, x, ...]`, `b: &b [*a, *a, ...]`, ...: 9 ** levels values from a few hundred bytes."""
    names = "abcdefghijklmnop"[:levels]
    lines = [f"{indent}a: &a [{', '.join(['x'] * 9)}]"]
    lines += [f"{indent}{n}: &{n} [{', '.join([f'*{p}'] * 9)}]" for p, n in zip(names, names[1:], strict=False)]
    return "\n".join(lines) + "\n"


def _matrix_text(base_url: str, **extra: str) -> str:
    """A valid matrix on the stand-in endpoint, with `extra` lines appended (keys with their YAML)."""
    text = f"judge_types: [arena_hard]\nmodels: [judge-a]\ndata_files: ['{GPT4O_FILE}']\nbase_url: {base_url}\n"
    return text + "".join(f"{key}:{value}\n" for key, value in extra.items())


def _hostile_matrices(base_url: str) -> dict[str, tuple[str, str]]:
    """name -> (the matrix file's text, what its one error line says)."""
    valid = _matrix_text(base_url)
    deep = "options:\n  external_judge_config:\n    deep: " + "[" * 400 + "]" * 400 + "\n"
    return {
        "alias bomb under options": (
            valid + "options:\n  external_judge_config:\n" + _bomb(),
            "line 12: the document expands to more than 100,000 values",
        ),
        "alias bomb at the top": ("x-anchors:\n" + _bomb(indent="  ") + valid, "line 7: the document expands"),
        "recursive alias": (valid + "options:\n  external_judge_config: &loop {self: *loop}\n", "inside its own"),
        "deep nesting": (valid + deep, "line 7: nested deeper than 40 levels"),
        "huge scalar": (valid + "repo_url: " + "x" * 2_000_000 + "\n", "larger than 1,000,000 bytes"),
        "duplicate key": (valid + "models: [judge-b]\n", "line 5: key 'models' given twice (first on line 2)"),
        "comma-split data file": (
            valid.replace(f"['{GPT4O_FILE}']", "[dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl]"),
            "line 3: 'dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl' in a [ ] list is read as",
        ),
        "ESC in a model name": (
            valid.replace("[judge-a]", '["judge\\e[2J-a"]'),
            "line 2: models.0.model: must not hold control characters (\\x1b at character 6)",
        ),
        "NUL in a model name": (valid.replace("[judge-a]", '["m\\0x"]'), "must not hold control characters (\\x00"),
        "BEL in a label": (
            valid.replace("[judge-a]", '[{model: judge-a, label: "a\\ab"}]'),
            "models.0.label: must not hold control characters (\\x07",
        ),
        "a model name that is a document": (
            valid.replace("[judge-a]", "[" + "m" * 5000 + "]"),
            "models.0.model: is 5,000 characters long; at most 4,096",
        ),
        "control character in a data file": (
            valid.replace(f"['{GPT4O_FILE}']", '["a\\x1bb.jsonl"]'),
            "data_files: must not hold control characters",
        ),
        "wrong type: models a number": (valid.replace("[judge-a]", "7"), "models: Input should be a valid list"),
        "wrong type: options a list": (valid + "options: [1, 2]\n", "options: Input should be a valid dictionary"),
        "a list, not a mapping": ("- arena_hard\n- " + "x" * 100 + "\n", "expected a mapping of settings, got list"),
        "not UTF-8": ("\udcff", "not UTF-8 text"),
    }


@pytest.fixture(scope="module")
def stand_in():
    """The endpoint every hostile setting points at: it must never be asked anything."""
    with FakeOpenAIServer("My final verdict is [[A>B]]") as server:
        yield server


@pytest.mark.parametrize("case", list(_hostile_matrices("http://x")))
def test_the_matrix_check_refuses_hostile_files_in_one_line(case, stand_in, tmp_path) -> None:
    """`python -m judgebench_flows.deployments.matrix FILE`: one line naming the file (and the line), exit 2,
    in bounded time and memory, and nothing sent to the endpoint the matrix names. Before issue 52, the bomb,
    the duplicate key and the comma-split file passed the check (exit 0), and the night then grew to gigabytes."""
    text, expected = _hostile_matrices(stand_in.base_url)[case]
    path = tmp_path / "m.yaml"
    path.write_bytes(text.encode("utf-8", errors="surrogateescape"))
    done, seconds = _run(["-m", "judgebench_flows.deployments.matrix", str(path)], tmp_path)
    line = _one_line(done)
    assert line.startswith("error: ") and str(path) in line and expected in line, line
    assert seconds < 30, seconds
    assert stand_in.requests == 0


def test_the_shipped_matrix_and_ordinary_yaml_still_load(tmp_path) -> None:
    """The limits refuse no file a person writes: anchors and merge keys within bounds, quoted commas,
    `[a, b]` with a space, numbers without one."""
    from judgebench_flows.core.safe_yaml import load
    from judgebench_flows.judging.matrix import load_matrix

    assert len(load_matrix(ROOT / "deployments" / "nightly.yaml").entries()) >= 2
    text = "base: &base {k: 1, j: [1,2]}\nmerged: {<<: *base, k: 2}\nnames: [a, 'b,c', \"d,e\"]\n"
    assert load(text, "t.yaml") == {
        "base": {"k": 1, "j": [1, 2]},
        "merged": {"k": 2, "j": [1, 2]},
        "names": ["a", "b,c", "d,e"],
    }
    assert load(text, "t.yaml") == yaml.safe_load(text)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("models:\n  gpt-x: &p {input_per_mtok: 1, output_per_mtok: 2}\n" + _bomb(indent="  "), "expands to more"),
        ("models:\n  gpt-x: {input_per_mtok: 1, output_per_mtok: 2}\n  gpt-x: {input_per_mtok: 3}\n", "twice"),
    ],
)
def test_a_price_file_is_read_with_the_same_limits(text, expected, tmp_path) -> None:
    from judgebench_flows.core.pricing import load_price_file

    path = tmp_path / "prices.yaml"
    path.write_text(text)
    with pytest.raises(UserError, match=f"^--prices {path}, line \\d+: .*{expected}"):
        load_price_file(str(path))


def test_an_external_judge_config_is_read_with_the_same_limits(tmp_path) -> None:
    from judgebench_flows.judges.external.config import external_config_from_options

    path = tmp_path / "judge.yaml"
    path.write_text("external_judge_path: j.py\nexternal_judge_config:\n" + _bomb(indent="  "))
    with pytest.raises(UserError, match=f"^{path}, line 8: the document expands"):
        external_config_from_options(str(path), {})
    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match=r"not a regular file \(a FIFO\)"):
        external_config_from_options(str(fifo), {})  # would block forever on open before


@pytest.mark.slow  # a night on the session's Prefect server, in a memory-bounded process
def test_a_night_started_with_a_bomb_fails_at_once_in_bounded_memory(
    prefect_server, tmp_path, stand_in, pairs_file
) -> None:
    """The night reads its matrix as the check does: the bomb is its one failure message, naming the file
    and line, within seconds and 2 GiB of address space, before any call (before: the night judged a local
    file, paying its calls, and grew to 2.5-5.4 GB, then hung past SIGTERM)."""
    path = tmp_path / "m.yaml"
    options = f"options:\n  data_path: {pairs_file}\n  external_judge_config:\n"
    path.write_text(_matrix_text(stand_in.base_url) + options + _bomb())
    script = (
        "import sys; from tests._helpers import run_night; state = run_night(sys.argv[1]); "
        "print(state.type.value); print(state.message)"
    )

    def bounded() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * MEMORY_LIMIT, 2 * MEMORY_LIMIT))

    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script, str(path)],
        cwd=ROOT,
        env={**os.environ, "PREFECT_API_URL": prefect_server},
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=bounded,
    )
    assert time.monotonic() - started < 120
    assert done.returncode == 0, done.stderr[-3000:]
    state, message = done.stdout.splitlines()[-2:]
    assert state == "FAILED" and f"{path}, line 13: the document expands" in message, done.stdout[-2000:]
    assert stand_in.requests == 0


# --- the run's settings ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs_file(tmp_path_factory) -> Path:
    """A small local file of pairs, so a run needs no clone."""
    path = tmp_path_factory.mktemp("pairs") / "pairs.jsonl"
    rows = [
        {"pair_id": f"p{i}", "source": "mmlu-pro-math", "question": "q", "response_A": "a", "response_B": "b"}
        | {"label": "A>B" if i % 2 else "B>A"}
        for i in range(4)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


RUN_CASES = [
    "ESC in --model",
    "BEL in --model",
    "newline in --model",
    "C1 CSI in --model",
    "ESC in --data-file",
    "--priced-model a path",
    "--data-path a FIFO",
    "--data-path /dev/zero",
    "--prices an alias bomb",
    "--prices a duplicate key",
    "--prices /dev/zero",
    "wrong type",
]


def _hostile_options(tmp_path: Path, pairs: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (options after `run --base-url STAND-IN`, what the one error line says)."""
    fifo = tmp_path / "pairs.fifo"
    os.mkfifo(fifo)
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("models:\n" + _bomb(indent="  "))
    duplicate = tmp_path / "dup.yaml"
    duplicate.write_text("models:\n  m: {input_per_mtok: 1, output_per_mtok: 1}\n  m: {input_per_mtok: 9}\n")
    data = ["--data-path", str(pairs)]
    return {
        "ESC in --model": (["--model", f"judge{ESCAPES}", *data], "--model: must not hold control characters"),
        "BEL in --model": (["--model", "judge\x07", *data], "--model: must not hold control characters (\\x07"),
        "newline in --model": (["--model", "a\nb", *data], "--model: must not hold control characters (\\x0a"),
        "C1 CSI in --model": (["--model", "a\x9b2J", *data], "--model: must not hold control characters (\\x9b"),
        "ESC in --data-file": (["--model", "m", "--data-file", "a\x1b.jsonl"], "--data-file: must not hold"),
        "--priced-model a path": (["--model", "m", "--priced-model", "../../x", *data], "--priced-model: must be"),
        "--data-path a FIFO": (["--model", "m", "--data-path", str(fifo)], "not a regular file (a FIFO)"),
        "--data-path /dev/zero": (["--model", "m", "--data-path", "/dev/zero"], "not a regular file (a character"),
        "--prices an alias bomb": (
            ["--model", "m", "--prices", str(bomb), *data],
            f"--prices {bomb}, line 7: the document expands",
        ),
        "--prices a duplicate key": (["--model", "m", "--prices", str(duplicate), *data], "key 'm' given twice"),
        "--prices /dev/zero": (["--model", "m", "--prices", "/dev/zero", *data], "not a regular file"),
        "wrong type": (["--model", "m", "--max-samples", "many", *data], "--max-samples"),
    }


@pytest.mark.parametrize("case", RUN_CASES)
def test_a_run_refuses_hostile_settings_before_any_call(case, stand_in, pairs_file, tmp_path) -> None:
    """`judgebench run` with hostile options: one line naming the option or file, exit 2, bounded time and
    memory, the stand-in never asked. Before issue 52, ESC in --model reached the start line and `history`,
    a FIFO or /dev/zero was "file not found", and --priced-model ../../x was accepted."""
    options, expected = _hostile_options(tmp_path, pairs_file)[case]
    done, seconds = _run(
        ["-m", "judgebench_flows.cli.main", "run", "--base-url", stand_in.base_url, *options], tmp_path, timeout=60
    )
    line = _one_line(done)
    assert line.startswith("error: ") and expected in line, line
    assert seconds < 30, seconds
    assert stand_in.requests == 0


def test_evaluate_refuses_a_nul_in_the_model_name_before_any_call(stand_in, pairs_file) -> None:
    """`evaluate(model="a\\x00b")`: a UserError naming --model, not a ValueError after four paid calls."""
    from judgebench_flows import evaluate

    with pytest.raises(UserError, match=r"^--model: must not hold control characters \(\\x00 at character 2\)"):
        evaluate(model="a\x00b", base_url=stand_in.base_url, data_path=str(pairs_file))
    assert stand_in.requests == 0


def test_a_nights_long_model_name_gets_a_short_cell_folder_with_a_hash(stand_in) -> None:
    """A 300-character model: its cell folder fits a file name (the single run's outputs are shortened the
    same way), two such models never share one, and the cell's paths are checked names (before: "File name
    too long" after 6 paid calls)."""
    from judgebench_flows.judging.matrix import parse_matrix

    long_a, long_b = "m" * 299 + "a", "m" * 299 + "b"
    matrix = {"judge_types": ["arena_hard"], "models": [long_a, long_b], "data_files": [GPT4O_FILE]}
    entries = parse_matrix({**matrix, "base_url": stand_in.base_url}, "m.yaml").entries()
    names = [entry.name for entry in entries]
    assert len(set(names)) == 2 and all(len(name.encode()) <= 200 for name in names), names
    assert all(name.startswith("arena_hard__mmm") for name in names)
    for entry in entries:
        assert all(len(part.encode()) <= 255 for part in Path(entry.config.output_dir).parts)
        assert entry.config.model in (long_a, long_b)  # the endpoint is still asked for the model as named
    assert stand_in.requests == 0


def test_a_matrix_key_given_twice_is_refused_with_its_line(tmp_path) -> None:
    from judgebench_flows.judging.matrix import load_matrix

    path = tmp_path / "m.yaml"
    path.write_text(_matrix_text("http://127.0.0.1:9/v1", concurrency=" 4", max_samples=" 3") + "concurrency: 8\n")
    with pytest.raises(UserError, match=f"^{path}, line 7: key 'concurrency' given twice \\(first on line 5\\)$"):
        load_matrix(path)


# --- untrusted text on a terminal ------------------------------------------------------------------


def test_printable_escapes_every_control_character() -> None:
    from judgebench_flows.core.text import page_text, printable, wrapped

    assert (
        printable(f"judge{ESCAPES}\x00\x9b\u202e\nx\t")
        == "judge\\x1b]52;c;aGFja2Vk\\x07\\x1b[2J\\x00\\x9b\\u202e\\nx\\t"
    )
    assert printable("gpt-4o-mini / Qwen2.5 · ünïcode") == "gpt-4o-mini / Qwen2.5 · ünïcode"
    assert "\x1b" not in wrapped(f"run {ESCAPES} started")
    assert page_text("answer\x1b[2J\x07\nnext line") == "answer\\x1b[2J\\x07\nnext line"  # lines kept in a page


def _evil_repo(tmp_path: Path) -> tuple[str, str]:
    """A fork of JudgeBench whose published judge is named with terminal escapes (its file name and rows)."""
    stem = GPT4O_FILE.removesuffix(".jsonl")
    sources = ("mmlu-pro-math", "livebench-reasoning", "livebench-math", "livecodebench")
    pairs = [
        {"pair_id": f"p{i}", "original_id": i, "source": sources[i % 4], "question": "q", "response_A": "a"}
        | {"response_B": "b", "response_model": "gpt-4o-2024-05-13", "label": "A>B" if i % 2 else "B>A"}
        for i in range(12)
    ]
    judge, model = f"evil{ESCAPES}", "m\x1b[31m"
    rows = []
    for pair in pairs:
        flipped = {"A>B": "B>A", "B>A": "A>B"}[pair["label"]]
        judgments = [
            {"judgment": {"judge_model": model, "prompt": "p", "response": f"x{ESCAPES}"}, "decision": decision}
            for decision in (pair["label"], flipped)
        ]
        rows.append({**pair, "judge_name": judge, "judgments": judgments})
    files = {
        f"data/{GPT4O_FILE}": "".join(json.dumps(p) + "\n" for p in pairs),
        f"outputs/{stem},judge_name={judge},judge_model={model}.jsonl": "".join(json.dumps(r) + "\n" for r in rows),
    }
    path = tmp_path / "fork"
    return f"file://{path}", make_repo(path, files, copy_shared=False)


def _leaderboard_args(url: str, sha: str, tmp_path: Path, *extra: str) -> list[str]:
    return [
        *("-m", "judgebench_flows.cli.main", "leaderboard", "--repo-url", url, "--ref", sha),
        *("--cache-dir", str(tmp_path / "cache"), "--db-url", f"sqlite:///{tmp_path / 'none.db'}"),
        *("--result-path", str(tmp_path / "lb.json"), "--output-dir", str(tmp_path / "html"), *extra),
    ]


def test_leaderboard_shows_a_forks_judge_names_escaped_on_a_pipe(tmp_path) -> None:
    """Table, CSV and the HTML page: the judge's name is shown (escaped), never acted on."""
    url, sha = _evil_repo(tmp_path)
    for extra in ((), ("--format", "csv")):
        done, _ = _run(_leaderboard_args(url, sha, tmp_path, *extra), tmp_path, timeout=120, COLUMNS="200")
        assert done.returncode == 0, done.stderr[-3000:]
        assert "evil\\x1b]52;c;aGFja2Vk\\x07\\x1b[2J" in done.stdout and "m\\x1b[31m" in done.stdout
        assert not any(raw in done.stdout + done.stderr for raw in ("\x1b", "\x07")), repr(done.stdout[-2000:])
    page = (tmp_path / "html" / "leaderboard.html").read_text()
    assert "evil\\x1b]52;c;" in page and "\x1b" not in page and "\x07" not in page


def _on_a_terminal(args: list[str], cwd: Path, timeout: float = 120) -> tuple[int, str]:
    """`python ARGS` with a pseudo-terminal as its stdout and stderr, as a person's shell runs it."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: exec, never return into pytest
        os.chdir(cwd)
        os.environ.update({"COLUMNS": "200", "LINES": "50", "TERM": "xterm-256color"})
        os.execv(sys.executable, [sys.executable, *args])
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child closed the terminal: it ended
            break
        if not chunk:
            break
        chunks.append(chunk)
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", errors="replace")


def test_leaderboard_shows_a_forks_judge_names_escaped_on_a_terminal(tmp_path) -> None:
    """On a terminal Rich adds colours of its own (ESC[...m); the fork's clipboard write and clear screen
    are never among what reaches the terminal."""
    url, sha = _evil_repo(tmp_path)
    code, screen = _on_a_terminal(_leaderboard_args(url, sha, tmp_path), tmp_path)
    assert code == 0, screen[-3000:]
    assert "\x1b]52" not in screen and "\x1b[2J" not in screen and "\x07" not in screen, repr(screen[-2000:])
    assert "evil\\x1b]52;c;aGFja2Vk\\x07\\x1b[2J" in screen


def test_a_refused_model_name_reaches_no_terminal_raw(stand_in, pairs_file, tmp_path) -> None:
    code, screen = _on_a_terminal(
        ["-m", "judgebench_flows.cli.main", "run", "--model", f"j{ESCAPES}", "--base-url", stand_in.base_url]
        + ["--data-path", str(pairs_file)],
        tmp_path,
        timeout=60,
    )
    assert code == 2 and "--model: must not hold control characters" in screen, screen
    assert "\x1b]52" not in screen and "\x1b[2J" not in screen and "\x07" not in screen, repr(screen)
    assert stand_in.requests == 0


def test_history_shows_a_stored_models_control_characters_escaped(tmp_path) -> None:
    """A run recorded before names were checked (or written by another tool): `history` escapes its model."""
    from judgebench_flows.data import db

    url = f"sqlite:///{tmp_path / 'results.db'}"
    engine = db.open_database(url)
    started = datetime(2026, 11, 20, 2, 0, tzinfo=timezone.utc)
    db.save_run(
        engine,
        run_id="e" * 32,
        config_key="cfg",
        judge_type=f"arena{ESCAPES}",
        model=f"model{ESCAPES}",
        data_file=GPT4O_FILE,
        status="completed",
        started=started,
        finished=started + timedelta(minutes=5),
        n_pairs=4,
        results_json=json.dumps({"run": {"mode": "both-orders"}}),
    )
    engine.dispose()
    for columns, extra in (("200", ()), ("80", ()), ("200", ("--format", "csv"))):
        done, _ = _run(
            ["-m", "judgebench_flows.cli.main", "history", "--db-url", url, *extra], tmp_path, COLUMNS=columns
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert "\\x1b" in done.stdout, done.stdout  # shown, escaped (a narrow table may fold it)
        assert "\x1b" not in done.stdout and "\x07" not in done.stdout, repr(done.stdout)
    code, screen = _on_a_terminal(["-m", "judgebench_flows.cli.main", "history", "--db-url", url], tmp_path)
    assert code == 0 and "\x1b]52" not in screen and "\x1b[2J" not in screen and "\x07" not in screen, repr(screen)


def test_the_report_page_holds_no_raw_control_bytes_from_answers() -> None:
    """HTML escaping leaves ESC and BEL as they are; the page shows them escaped, line breaks kept."""
    from judgebench_flows.scoring.report import render_report
    from judgebench_flows.scoring.run_results import RunResults
    from tests.test_report import make_judgments, make_results

    judgments = [
        record.model_copy(update={"response": f"{record.response}{ESCAPES}\nsecond line"})
        for record in make_judgments()
    ]
    page = render_report(RunResults.model_validate(make_results()), judgments)
    assert "\x1b" not in page and "\x07" not in page
    assert "\\x1b]52;c;aGFja2Vk\\x07\\x1b[2J" in page


# --- a run end to end: its start line and its folder -----------------------------------------------


def test_a_data_path_runs_start_line_names_no_commit_and_its_folder_no_parts(run_cli, fake_server, tmp_path) -> None:
    """A local file is judged as it is: the start line names the file, not the pinned JudgeBench commit
    (results.json records none); the finished run's folder holds its outputs and no empty `.parts/`."""
    from judgebench_flows.data.dataset import DEFAULT_REF

    rows = [
        {"pair_id": f"p{i}", "source": "mmlu-pro-math", "question": "q", "response_A": "a", "response_B": "b"}
        | {"label": "A>B"}
        for i in range(4)
    ]
    data = tmp_path / "pairs.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    done = run_cli(
        *("run", "--model", "stand-in", "--base-url", fake_server.base_url, "--data-path", str(data)),
        *("--no-progress", "--bootstrap-resamples", "10", "--max-failed-fraction", "1"),
        env={"COLUMNS": "400"},  # the start line unwrapped
    )
    assert done.returncode in (0, 1), done.stderr[-3000:]
    start = next(line for line in done.stderr.splitlines() if line.startswith("judgebench arena_hard / stand-in"))
    assert str(data) in start and DEFAULT_REF[:7] not in start and "@" not in start, start
    results = json.loads((tmp_path / "results" / "latest" / "results.json").read_text())
    assert results["dataset"]["commit"] is None
    folder = (tmp_path / "results" / "latest").resolve()
    assert not (folder / ".parts").exists(), sorted(p.name for p in folder.iterdir())
    assert fake_server.requests > 0  # the valid run did call
