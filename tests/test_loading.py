"""Loading JudgeBench pairs: bad rows are skipped and named, fatal problems stop the run, and sampling and
shuffling are seeded so the same options always judge the same pairs in the same order."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from judgebench_flows.core.errors import UserError
from judgebench_flows.core.records import Pair
from judgebench_flows.data.loading import load_pairs, sample_pairs, shuffle_responses
from tests.conftest import GPT4O_FILE, NO_DATA_REASON, SHARED, requires_shared


def row(pair_id: str = "p1", **overrides: object) -> dict:
    base = {
        "pair_id": pair_id,
        "original_id": 7,
        "source": "mmlu-pro-law",
        "question": "Q?",
        "response_model": "gpt-4o-2024-05-13",
        "response_A": f"A of {pair_id}",
        "response_B": f"B of {pair_id}",
        "label": "A>B",
    }
    base.update(overrides)
    return base


def write_lines(tmp_path: Path, lines: list[str | dict]) -> Path:
    path = tmp_path / "pairs.jsonl"
    path.write_text(
        "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines), encoding="utf-8"
    )
    return path


def pairs_of(n: int) -> list[Pair]:
    return [Pair.model_validate(row(f"pair-{i:03d}", label="A>B" if i % 3 else "B>A")) for i in range(n)]


@pytest.fixture(scope="module")
def real_pairs() -> list[Pair]:
    if not (SHARED / "data" / GPT4O_FILE).is_file():
        pytest.skip(NO_DATA_REASON)
    return load_pairs(SHARED / "data" / GPT4O_FILE).pairs


@pytest.mark.parametrize(
    ("bad_line", "reason"),
    [
        ('{"pair_id": "x", "source": ', "not valid JSON"),
        ("not json at all", "not valid JSON"),
        ('["a", "list"]', "expected a JSON object, got list"),
        ('"just a string"', "expected a JSON object, got str"),
        ("42", "expected a JSON object, got int"),
        ("null", "expected a JSON object, got NoneType"),
        (json.dumps({k: v for k, v in row("x").items() if k != "label"}), "label: missing"),
        (json.dumps({k: v for k, v in row("x").items() if k != "response_B"}), "response_B: missing"),
        (json.dumps({k: v for k, v in row("x").items() if k != "pair_id"}), "pair_id: missing"),
        (json.dumps(row("x", label="A=B")), "label: "),
        (json.dumps(row("x", label="a>b")), "label: "),
        (json.dumps(row("x", label=None)), "label: "),
        (json.dumps(row("x", question=None)), "question: "),
        (json.dumps(row("x", response_A=["not", "text"])), "response_A: "),
        (json.dumps(row("", label="A>B")), "pair_id: "),
        (json.dumps(row("x", source="")), "source: "),
    ],
)
def test_bad_row_is_skipped_with_line_and_reason(tmp_path: Path, bad_line: str, reason: str) -> None:
    path = write_lines(tmp_path, [row("p1"), "", bad_line, row("p2")])
    loaded = load_pairs(path)
    assert [p.pair_id for p in loaded.pairs] == ["p1", "p2"]
    assert len(loaded.skipped) == 1
    assert loaded.skipped[0].line == 3
    assert reason in loaded.skipped[0].reason
    assert "\n" not in loaded.skipped[0].reason


def test_wrong_label_reason_names_the_allowed_labels(tmp_path: Path) -> None:
    loaded = load_pairs(write_lines(tmp_path, [row("p1"), row("p2", label="A=B")]))
    assert "'A>B'" in loaded.skipped[0].reason and "'B>A'" in loaded.skipped[0].reason


def test_several_bad_rows_each_get_their_line(tmp_path: Path) -> None:
    lines = [row("p1"), "{oops", "", "   ", row("p2", label="tie"), "[]", row("p3")]
    loaded = load_pairs(write_lines(tmp_path, lines))
    assert [p.pair_id for p in loaded.pairs] == ["p1", "p3"]
    assert [s.line for s in loaded.skipped] == [2, 5, 6]


def test_blank_lines_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n\n" + json.dumps(row("p1")) + "\n   \n\t\n" + json.dumps(row("p2")) + "\n\n")
    loaded = load_pairs(path)
    assert [p.pair_id for p in loaded.pairs] == ["p1", "p2"]
    assert loaded.skipped == []


def test_no_trailing_newline_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_bytes((json.dumps(row("p1")) + "\r\n" + json.dumps(row("p2"))).encode())
    assert [p.pair_id for p in load_pairs(path).pairs] == ["p1", "p2"]


def test_byte_order_mark_does_not_cost_the_first_row(tmp_path: Path) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + (json.dumps(row("p1")) + "\n" + json.dumps(row("p2")) + "\n").encode())
    loaded = load_pairs(path)
    assert [p.pair_id for p in loaded.pairs] == ["p1", "p2"]
    assert loaded.skipped == []


def test_unicode_survives(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [row("p1", question="Qu'est-ce que π ≈ 3.14? 答え")])
    assert load_pairs(path).pairs[0].question == "Qu'est-ce que π ≈ 3.14? 答え"


def test_duplicate_pair_id_names_both_lines(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [row("p1"), row("dup"), "", row("p2"), row("dup")])
    with pytest.raises(UserError) as err:
        load_pairs(path)
    message = str(err.value)
    assert "duplicate pair_id 'dup'" in message
    assert "line 5" in message and "line 2" in message


@pytest.mark.parametrize("content", ["", "\n\n   \n"])
def test_empty_file_is_a_user_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "pairs.jsonl"
    path.write_text(content)
    with pytest.raises(UserError, match="no valid pairs"):
        load_pairs(path)


def test_all_bad_file_is_a_user_error_naming_the_first_problem(tmp_path: Path) -> None:
    path = write_lines(tmp_path, ["", "{bad", row("x", label="maybe")])
    with pytest.raises(UserError) as err:
        load_pairs(path)
    message = str(err.value)
    assert "no valid pairs" in message and "2 rows skipped" in message and "line 2" in message


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="data file not found"):
        load_pairs(tmp_path / "nope.jsonl")


def test_extra_fields_are_kept(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [row("p1", difficulty="hard", meta={"k": [1, 2]})])
    pair = load_pairs(path).pairs[0]
    dumped = pair.model_dump()
    assert dumped["difficulty"] == "hard" and dumped["meta"] == {"k": [1, 2]}
    assert pair.original_id == 7 and pair.response_model == "gpt-4o-2024-05-13"
    assert pair.category == "mmlu-pro"


def test_a_swapped_field_in_the_file_is_ignored(tmp_path: Path) -> None:
    """`swapped` records what --shuffle-responses did; a file cannot claim it."""
    assert load_pairs(write_lines(tmp_path, [row("p1", swapped=True)])).pairs[0].swapped is False


@requires_shared
def test_real_file(real_pairs: list[Pair]) -> None:
    assert len(real_pairs) == 350
    assert Counter(p.label for p in real_pairs) == {"A>B": 193, "B>A": 157}
    assert len({p.pair_id for p in real_pairs}) == 350


# --- sampling ------------------------------------------------------------------------------------------


def test_sample_is_seeded_and_keeps_file_order() -> None:
    pairs = pairs_of(100)
    first = sample_pairs(pairs, 20, seed=7)
    assert len(first) == 20
    assert [p.pair_id for p in first] == [p.pair_id for p in sample_pairs(pairs, 20, seed=7)]
    assert [p.pair_id for p in first] == sorted(p.pair_id for p in first)  # file order
    assert {p.pair_id for p in first} != {p.pair_id for p in sample_pairs(pairs, 20, seed=8)}


def test_sample_not_smaller_than_the_file_is_everything() -> None:
    pairs = pairs_of(10)
    assert sample_pairs(pairs, None, seed=1) == pairs
    assert sample_pairs(pairs, 10, seed=1) == pairs
    assert sample_pairs(pairs, 50, seed=1) == pairs


@requires_shared
def test_sample_on_the_real_file(real_pairs: list[Pair]) -> None:
    a = sample_pairs(real_pairs, 50, seed=42)
    b = sample_pairs(real_pairs, 50, seed=42)
    c = sample_pairs(real_pairs, 50, seed=43)
    assert [p.pair_id for p in a] == [p.pair_id for p in b]
    assert [p.pair_id for p in a] != [p.pair_id for p in c]
    index = {p.pair_id: i for i, p in enumerate(real_pairs)}
    positions = [index[p.pair_id] for p in a]
    assert positions == sorted(positions)


# --- shuffling -----------------------------------------------------------------------------------------


def test_shuffle_swaps_responses_and_flips_the_label() -> None:
    pairs = pairs_of(40)
    shuffled = shuffle_responses(pairs, seed=3)
    assert [p.pair_id for p in shuffled] == [p.pair_id for p in pairs]
    swapped = 0
    for before, after in zip(pairs, shuffled, strict=False):
        if after.swapped:
            swapped += 1
            assert (after.response_A, after.response_B) == (before.response_B, before.response_A)
            assert after.label == ("B>A" if before.label == "A>B" else "A>B")
        else:
            assert after == before
        # Either way the label still points at the same response text.
        better = after.response_A if after.label == "A>B" else after.response_B
        assert better == (before.response_A if before.label == "A>B" else before.response_B)
        assert (after.question, after.source, after.original_id) == (before.question, before.source, before.original_id)
    assert 0 < swapped < 40


def test_shuffle_is_reproducible_and_differs_by_seed() -> None:
    pairs = pairs_of(60)
    flags = lambda seed: [p.swapped for p in shuffle_responses(pairs, seed)]  # noqa: E731
    assert flags(1) == flags(1)
    assert flags(1) != flags(2)


def test_shuffle_depends_only_on_seed_and_pair_id() -> None:
    pairs = pairs_of(60)
    full = {p.pair_id: p.swapped for p in shuffle_responses(pairs, seed=5)}
    subset = [pairs[i] for i in (50, 3, 17, 40)]  # a subset, in another order
    assert {p.pair_id: p.swapped for p in shuffle_responses(subset, seed=5)} == {
        p.pair_id: full[p.pair_id] for p in subset
    }


def test_shuffle_keeps_extra_fields(tmp_path: Path) -> None:
    pairs = load_pairs(write_lines(tmp_path, [row(f"p{i}", difficulty=i) for i in range(30)])).pairs
    for pair in shuffle_responses(pairs, seed=0):
        assert pair.model_dump()["difficulty"] == int(pair.pair_id[1:])


@requires_shared
def test_shuffle_on_the_real_file(real_pairs: list[Pair]) -> None:
    shuffled = shuffle_responses(real_pairs, seed=42)
    swapped = sum(p.swapped for p in shuffled)
    assert 140 <= swapped <= 210
    assert [p.swapped for p in shuffle_responses(real_pairs, seed=42)] == [p.swapped for p in shuffled]
    # The labels move with the swaps: every swapped A>B became B>A and vice versa.
    before = Counter(p.label for p in real_pairs)
    after = Counter(p.label for p in shuffled)
    moved_to_b = sum(1 for a, b in zip(real_pairs, shuffled, strict=False) if b.swapped and a.label == "A>B")
    moved_to_a = sum(1 for a, b in zip(real_pairs, shuffled, strict=False) if b.swapped and a.label == "B>A")
    assert after["B>A"] == before["B>A"] + moved_to_b - moved_to_a
    # A sampled subset gets exactly the swaps the full file got.
    subset = sample_pairs(real_pairs, 60, seed=42)
    by_id = {p.pair_id: p.swapped for p in shuffled}
    assert all(p.swapped == by_id[p.pair_id] for p in shuffle_responses(subset, seed=42))
