"""The HTML report: escapes hostile judge output, draws its charts, and renders in a real browser."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import pytest

from judgebench_flows.core.records import CATEGORIES, JudgmentRecord
from judgebench_flows.scoring.report import PROMPT_PREVIEW_CHARS, render_report, write_report

SOURCES = ("mmlu-pro-law", "mmlu-pro-math", "livebench-reasoning", "livebench-math", "livecodebench")
HOSTILE = 'Both are fine & <script>alert(1)</script> so [[A>B]] <img src=x onerror="alert(2)">'


def make_judgments(n_pairs: int = 20, prompt_chars: int = 600) -> list[JudgmentRecord]:
    """Two orders per pair, with a mix of correct, wrong, invalid and failed judgments."""
    records = []
    for i in range(n_pairs):
        source = SOURCES[i % len(SOURCES)]
        category = next(c for c in CATEGORIES if source.startswith(c))
        label = "A>B" if i % 2 == 0 else "B>A"
        for order in (0, 1):
            status, decision, response, error = "ok", "", f"Reasoning for pair {i} order {order}.", None
            if i == 3 and order == 1:
                status, response = "invalid", HOSTILE
            elif i == 7 and order == 0:
                status, response, error = "failed", "", "TimeoutError: no answer after 3 retries"
            else:
                for_pair = label if (i + order) % 4 else ("B>A" if label == "A>B" else "A>B")
                decision = for_pair if order == 0 else ("B>A" if for_pair == "A>B" else "A>B")
                response += f" Final verdict: [[{decision}]]"
            for_pair_decision = decision if order == 0 else {"A>B": "B>A", "B>A": "A>B"}.get(decision, decision)
            records.append(
                JudgmentRecord(
                    pair_id=f"pair-{i:04d}",
                    order=order,
                    source=source,
                    category=category,
                    label=label,
                    status=status,
                    decision=decision,
                    decision_for_pair=for_pair_decision,
                    judge_model="gpt-4o-mini",
                    prompt=("Q & A " * prompt_chars)[:prompt_chars],
                    response=response,
                    error=error,
                    latency_s=1.25 + i / 10,
                    calls=1,
                    prompt_tokens=900,
                    completion_tokens=120,
                )
            )
    return records


def acc(accuracy: float, n: int, low: float | None = None, high: float | None = None) -> dict:
    out = {"accuracy": accuracy, "correct_count": round(accuracy * n), "valid_samples": n, "total_samples": n}
    if low is not None:
        out |= {"ci_low": low, "ci_high": high}
    return out


def make_results(**overrides) -> dict:
    results = {
        "model": "gpt-4o-mini",
        "judge_type": "arena_hard",
        "dataset": {
            "repo_url": "https://github.com/ScalerLab/JudgeBench",
            "commit": "0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6",
            "data_file": "data/dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
            "n_pairs": 20,
            "skipped_rows": 0,
        },
        "overall_accuracy": acc(0.6571, 350, 0.6057, 0.7057),
        "category_accuracy": {
            "mmlu-pro": acc(0.6623, 154, 0.5844, 0.7338),
            "livebench-reasoning": acc(0.5918, 98, 0.4898, 0.6837),
            "livebench-math": acc(0.7321, 56, 0.6071, 0.8393),
            "livecodebench": acc(0.6667, 42, 0.5238, 0.8095),
        },
        "source_accuracy": {"mmlu-pro-law": acc(0.55, 40, 0.4, 0.7), "livecodebench": acc(0.6667, 42, 0.5238, 0.8095)},
        "consistency": {"consistency": 0.9009, "consistent_pairs": 300, "pairs_with_both_verdicts": 333},
        "invalid": {"invalid_judgments": 3, "failed_judgments": 1, "pairs_with_invalid": 4},
        "usage": {"calls": 700, "cached_calls": 12, "prompt_tokens": 612345, "completion_tokens": 84000},
        "regression": {
            "baseline_run_id": "run-2",
            "delta": -0.05,
            "ci_low": -0.08,
            "ci_high": -0.02,
            "regressed": True,
            "message": "Accuracy dropped 5.0 points against run-2 & the interval excludes zero.",
        },
        "run": {
            "run_id": "run-3",
            "started": "2025-03-03T10:00:00+00:00",
            "finished": "2025-03-03T10:42:17+00:00",
            "flow_run_id": "3f2c-flow",
            "mode": "both-orders",
        },
    }
    results.update(overrides)
    return results


HISTORY = [
    {"run_id": "run-1", "started": "2025-03-01T10:00:00+00:00", "accuracy": 0.70, "ci_low": 0.65, "ci_high": 0.75},
    {"run_id": "run-2", "started": "2025-03-02T10:00:00+00:00", "accuracy": 0.7071, "ci_low": 0.66, "ci_high": 0.75},
    {
        "run_id": "run-3",
        "started": "2025-03-03T10:00:00+00:00",
        "accuracy": 0.6571,
        "ci_low": 0.6057,
        "ci_high": 0.7057,
    },
]


def svg(html: str, element_id: str) -> str:
    match = re.search(rf'<svg id="{element_id}".*?</svg>', html, re.S)
    assert match, f"no svg #{element_id}"
    return match.group(0)


def test_hostile_output_is_escaped_and_kept_in_full() -> None:
    html = render_report(make_results(), make_judgments(), HISTORY)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "onerror=&#34;alert(2)&#34;" in html  # attribute text inert, quotes escaped
    assert "Both are fine &amp; " in html
    assert "& the interval" not in html and "&amp; the interval excludes zero" in html


def test_no_external_resources_or_javascript_links() -> None:
    results = make_results()
    results["dataset"]["repo_url"] = "javascript:alert(3)"
    html = render_report(results, make_judgments(), HISTORY)
    assert not re.search(r'\b(src|href)\s*=\s*"(?!#)', html), "report must not load or link anything by URL"
    assert "javascript:alert(3)" in html  # shown as text, not made a link
    safe = render_report(make_results(), make_judgments(), HISTORY)
    assert 'href="https://github.com/ScalerLab/JudgeBench"' in safe


def test_category_chart_has_overall_plus_one_bar_per_category() -> None:
    html = render_report(make_results(), make_judgments(), HISTORY)
    chart = svg(html, "category-chart")
    assert chart.count('<rect class="bar overall"') == 1
    assert chart.count('<rect class="bar"') == len(CATEGORIES)
    for name in CATEGORIES:
        assert f'data-slice="{name}"' in chart
    assert chart.count('<g class="whisker">') == len(CATEGORIES) + 1
    assert "65.7%" in chart and "n=350" in chart and "[60.6%–70.6%]" in chart
    # Bar widths are proportional: 73.2% of the 380-unit axis for livebench-math.
    assert 'width="278.2"' in chart


def test_history_chart_has_one_point_per_run_and_a_band() -> None:
    html = render_report(make_results(), make_judgments(), HISTORY)
    trend = svg(html, "trend-chart")
    assert trend.count("<circle") == 3  # run-3 is this run and already in history: not drawn twice
    assert trend.count('class="point current"') == 1
    assert '<polygon class="band"' in trend and '<polyline class="trendline"' in trend
    assert "70.7%" in trend and "2025-03-01" in trend


def test_trend_adds_this_run_and_copes_with_no_history() -> None:
    html = render_report(make_results(), make_judgments(), HISTORY[:2])
    assert svg(html, "trend-chart").count("<circle") == 3
    single = svg(render_report(make_results(), make_judgments(), ()), "trend-chart")
    assert single.count("<circle") == 1 and "<polygon" not in single and "single-whisker" in single
    assert "Only one run so far" in render_report(make_results(), make_judgments())


def test_runs_of_one_day_are_told_apart_under_the_trend() -> None:
    """Two runs the same day were both labelled `2026-11-27` (a new user's first run and its re-run):
    where dates repeat, the labels give month, day and time (to the second, when minutes repeat too);
    across days they stay dates."""
    same_day = [
        {**HISTORY[0], "started": "2025-03-03T10:00:20+00:00"},
        {**HISTORY[2], "started": "2025-03-03T10:00:40+00:00"},
    ]
    labels = re.findall(
        r'class="tick"[^>]*text-anchor="middle">([^<]*)</text>',
        svg(render_report(make_results(), make_judgments(), same_day), "trend-chart"),
    )
    assert labels == ["03-03 10:00:20", "03-03 10:00:40"], labels
    same_day[0]["started"] = "2025-03-03T08:05:00+00:00"
    labels = re.findall(
        r'class="tick"[^>]*text-anchor="middle">([^<]*)</text>',
        svg(render_report(make_results(), make_judgments(), same_day), "trend-chart"),
    )
    assert labels == ["03-03 08:05", "03-03 10:00"], labels
    labels = re.findall(
        r'class="tick"[^>]*text-anchor="middle">([^<]*)</text>',
        svg(render_report(make_results(), make_judgments(), HISTORY), "trend-chart"),
    )
    assert labels == ["2025-03-01", "2025-03-02", "2025-03-03"], labels


def test_older_results_without_optional_parts_still_render() -> None:
    results = make_results()
    for key in ("regression", "consistency", "usage", "source_accuracy", "invalid"):
        del results[key]
    for slice_ in [results["overall_accuracy"], *results["category_accuracy"].values()]:
        del slice_["ci_low"], slice_["ci_high"]
    html = render_report(results, [j.model_dump() for j in make_judgments()])
    assert 'id="regression"' not in html and 'id="source-chart"' not in html
    assert '<g class="whisker">' not in svg(html, "category-chart")
    assert "not recorded for this run" in html
    assert "1 / 1" in html  # invalid / failed counted from the judgments themselves


def test_the_report_shows_what_was_sent_what_the_endpoint_said_and_a_changed_fingerprint() -> None:
    """Drift made visible in the report: the endpoint's `model`, `system_fingerprint` and `/models`
    entry as counted, what the run sent, and the change against the previous run (issue 41)."""
    provenance = {
        "sent": {
            "package_version": "0.9.1",
            "provider": "openai",
            "endpoint": "http://gpu-host:8000/v1",
            "model": "qwen",
            "template_hash": "0123456789abcdef",
            "sampling": {"temperature": 0.0, "max_tokens": 4096},
        },
        "served": {
            "answers": 40,
            "models": {"qwen-ckpt-1127": 38, "qwen-ckpt-1126": 2},
            "system_fingerprints": {"fp_b": 38, "fp_a": 2},
            "model_entry": {"id": "qwen", "root": "/ckpt/1127", "max_model_len": 32768, "created": 1764200000},
        },
    }
    drift = {
        "baseline_run_id": "run-2",
        "changed": True,
        "served": [{"field": "system_fingerprint", "before": "fp_a", "after": "fp_a (2), fp_b (38)"}],
        "sent": [],
        "message": "the endpoint changed: system_fingerprint fp_a -> fp_a (2), fp_b (38) (against run run-2)",
    }
    html = render_report(make_results(provenance=provenance, drift=drift), [])
    section = html[html.index('id="provenance"') : html.index('id="judgments"')]
    text = " ".join(re.sub(r"<[^>]+>", " ", section).split())
    assert "Endpoint CHANGED against the previous run: the endpoint changed: system_fingerprint fp_a -&gt;" in text
    assert "Answered as qwen-ckpt-1127 (38), qwen-ckpt-1126 (2)" in text
    assert "system_fingerprint fp_b (38), fp_a (2)" in text
    assert "/models entry id qwen, root /ckpt/1127, max_model_len 32768, created 1764200000" in text
    for shown in ("Provider openai", "Endpoint http://gpu-host:8000/v1", "Model asked for qwen"):
        assert shown in text
    assert "Sampling temperature 0.0, max_tokens 4096" in text and "Template hash 0123456789abcdef" in text
    assert "Package version 0.9.1" in text and "Answers heard 40" in text
    # a run answered from a cache heard nothing; a run from before provenance shows no section
    provenance["served"] = {"answers": 0}
    heard_nothing = render_report(make_results(provenance=provenance), [])
    assert "nothing: no answer was received from the endpoint in this run" in heard_nothing
    assert 'id="drift"' not in heard_nothing
    assert 'id="provenance"' not in render_report(make_results(), [])


def test_regression_banner_wording_follows_verdict() -> None:
    html = render_report(make_results(), [])
    banner = html[html.index('id="regression"') : html.index("</div>", html.index('id="regression"'))]
    # the check's message gives the change in points: the banner says it once, never also in "pp"
    assert "Regression against run run-2</strong>" in banner and "Accuracy dropped 5.0 points" in banner
    assert " pp" not in banner and banner.count("5.0") == 1
    silent = make_results(regression={**make_results()["regression"], "message": ""})
    assert "Regression against run run-2: -5.0 points (95% CI -8.0 to -2.0 points)" in render_report(silent, [])
    calm = make_results(
        regression={
            "baseline_run_id": "run-2",
            "delta": -0.01,
            "ci_low": -0.04,
            "ci_high": 0.02,
            "regressed": False,
            "message": "",
        }
    )
    html = render_report(calm, [])
    assert "No regression against run run-2" in html and 'class="banner good"' in html


def test_judgments_table_lists_problems_first_and_truncates_only_prompts() -> None:
    judgments = make_judgments(prompt_chars=PROMPT_PREVIEW_CHARS + 500)
    long_response = "x" * (PROMPT_PREVIEW_CHARS * 2)
    judgments[0] = judgments[0].model_copy(update={"response": long_response})
    html = render_report(make_results(), judgments)
    assert html.count('<details class="j"') == len(judgments)
    statuses = re.findall(r'<span class="st (\w+)">', html)
    assert statuses[:2] == ["failed", "invalid"] and set(statuses[2:]) == {"ok"}
    assert long_response in html
    assert f"first {PROMPT_PREVIEW_CHARS:,} of {PROMPT_PREVIEW_CHARS + 500:,} characters" in html
    assert "TimeoutError: no answer after 3 retries" in html


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def run_chromium(binary: str, *args: str) -> subprocess.CompletedProcess[str]:
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        return subprocess.run(
            [
                binary,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={profile}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip("chromium not installed: apt-get install chromium")
    page = write_report(tmp_path / "out" / "report.html", make_results(), make_judgments(), HISTORY)
    url = page.resolve().as_uri()

    dom = run_chromium(binary, "--dump-dom", url)
    assert dom.returncode == 0, dom.stderr[-2000:]
    text = dom.stdout
    assert "65.7%" in text and "90.1%" in text and "73.2%" in text
    for name in CATEGORIES:
        assert name in text
    assert "Regression against run run-2" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not re.search(r"<script\b", text, re.I), "the browser DOM must hold no script element"
    assert text.count("<circle") == 3

    shot = tmp_path / "report.png"
    result = run_chromium(binary, f"--screenshot={shot}", "--window-size=1280,2000", url)
    assert result.returncode == 0, result.stderr[-2000:]
    assert shot.exists()
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a blank 1280x2000 page compresses to a few KB


def test_the_report_a_run_writes_charts_its_own_position_bias(tmp_path: Path) -> None:
    """The report written at the end of a run draws this run's order consistency and first-position rate
    beside the earlier runs' (it once drew only theirs until `judgebench report` rendered it again)."""
    from judgebench_flows.data import db
    from judgebench_flows.scoring.run_results import RunResults
    from tasks.publish import write_outputs

    db_url = f"sqlite:///{tmp_path}/history.db"
    engine = db.open_database(db_url)
    results = make_results(consistency={"consistency": 0.5, "first_position_rate": 0.75, "consistent_pairs": 10})
    results["run"] |= {"config_key": "config-1"}
    same = {"config_key": "config-1", "judge_type": "arena_hard", "model": "gpt-4o-mini"}
    db.save_run(
        engine,
        run_id="run-2",
        status="completed",
        **same,
        started=datetime(2025, 3, 2, 10, tzinfo=timezone.utc),
        overall_accuracy=0.7,
        order_consistency=1.0,
        first_position_rate=0.5,
    )
    db.start_run(engine, "run-3", **same, started=datetime(2025, 3, 3, 10, tzinfo=timezone.utc))
    paths = write_outputs(
        "run-3",
        RunResults.model_validate(results),
        make_judgments(),
        [],
        result_path=str(tmp_path / "results.json"),
        output_dir=str(tmp_path),
        db_url=db_url,
        judge_name="arena_hard",
        data_file="dataset=judgebench,response_model=gpt-4o-2024-05-13.jsonl",
        write_report=True,
    )
    bias = svg(Path(paths["report"]).read_text(), "bias-chart")
    assert bias.count('class="point current"') == 2, bias  # this run: consistency and first-position rate
    assert "order consistency 50.0%" in bias and "first-position rate 75.0%" in bias
    assert bias.count('class="point"') == 2  # run-2's


def test_request_rule_is_said_in_words() -> None:
    """The report said "Request rule standard.", which meant nothing to a newcomer: the report says what the rule does."""
    rules = {"rule": "standard", "fold_system": False, "keep_only": None, "drop": [], "rename": {}, "adjustments": []}
    run = {**make_results()["run"], "requests": rules}
    html = render_report(make_results(run=run), [])
    line = re.search(r'<p id="request-rule">(.*?)</p>', html, re.S).group(1)
    assert "ordinary chat requests" in line and "sampling parameters unchanged" in line
    assert "<code>standard</code>" in line and "--request-style" in line
    o1 = {**rules, "rule": "o1", "fold_system": True, "keep_only": ["reasoning_effort"]}
    line = re.search(
        r'<p id="request-rule">(.*?)</p>', render_report(make_results(run={**run, "requests": o1}), []), re.S
    )
    assert "as JudgeBench sends o1 models" in line.group(1) and "folded into the first user turn" in line.group(1)
