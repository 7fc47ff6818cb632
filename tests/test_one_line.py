"""One-line messages are never cut in the middle of a word: shortened at a word with an ellipsis and where
the whole text is, or kept whole."""

from __future__ import annotations

import pytest

from judgebench_flows.core.text import one_line, shorten, wrapped
from judgebench_flows.scoring.metrics import reason_of

LITELLM = (
    "litellm.UnsupportedParamsError: O-series models don't support temperature=0.0. Only temperature=1 is "
    "supported. To drop unsupported openai params from the call, set `litellm.drop_params = True`"
)


def test_a_short_text_is_kept_whole_on_one_line() -> None:
    assert shorten("a\n  b\tc", 10) == "a b c" == one_line("a\n  b\tc")
    assert shorten(LITELLM, len(LITELLM)) == LITELLM


@pytest.mark.parametrize("limit", [40, 60, 119, 120, 121, 150])
def test_a_long_text_is_cut_after_a_whole_word_and_says_where_the_rest_is(limit: int) -> None:
    short = shorten(LITELLM, limit, "results.json")
    head, tail = short.split("...", 1)
    assert len(head) <= limit and LITELLM.startswith(head)
    assert LITELLM[len(head)] in " .,;:" or LITELLM[len(head) - 1] in ".,;:"  # the cut falls between words
    assert tail == " (whole text in results.json)"


def test_one_word_longer_than_the_limit_is_cut_where_it_must_be() -> None:
    assert shorten("x" * 50, 10) == "x" * 10 + "..."


def test_a_reason_in_results_keeps_the_servers_words_whole() -> None:
    reason = f"HTTP 400: {LITELLM} (sent once: not sent again)"
    assert reason_of(reason) == f"HTTP 400: {LITELLM}"
    long = "HTTP 400: " + "word " * 1000
    assert reason_of(long).endswith("word... (whole text in the judgments' error)")


def test_a_long_notice_is_wrapped_to_the_terminal_at_whole_words() -> None:
    notice = "starting Prefect's server for /home/someone/.prefect on 127.0.0.1:4200 (once: a first boot " * 2
    lines = wrapped(notice, 80).splitlines()
    assert len(lines) > 1 and all(len(line) <= 80 for line in lines)
    assert " ".join(lines) == one_line(notice)  # nothing cut, no word split
