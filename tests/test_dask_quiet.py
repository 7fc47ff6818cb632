"""A Dask run that waits says what for: no shard finished for QUIET_NOTICE_SECONDS, the run's log names the
shards in flight and waiting, and the global limit whose slots others hold; then at twice the wait, not at
every poll. (CI once saw a Dask run end its 300 s in silence.)"""

from __future__ import annotations

import logging
import time

import pytest

from judgebench_flows.calls.global_limits import UNREACHABLE_SECONDS, GlobalLimitError
from judgebench_flows.flows import dask_shards


class Dispatch:
    """What `_QuietWatch` reads of a `_Dispatch`: the phrase saying what the run waits for."""

    def __init__(self) -> None:
        self.asked = 0

    def waiting_on(self) -> str:
        self.asked += 1
        return "2 shards in flight on the Dask workers, 6 waiting"


def test_a_quiet_run_says_what_it_waits_for_then_at_twice_the_wait(monkeypatch, caplog):
    monkeypatch.setattr(dask_shards, "QUIET_NOTICE_SECONDS", 0.2)
    watch, dispatch = dask_shards._QuietWatch(), Dispatch()
    with caplog.at_level(logging.WARNING, logger="judgebench_flows.flows.dask_shards"):
        watch.check(dispatch)
        assert dispatch.asked == 0  # not yet quiet for long
        time.sleep(0.25)
        watch.check(dispatch)
        watch.check(dispatch)  # said once, not at every poll
        assert dispatch.asked == 1
        time.sleep(0.2)  # 0.45 s: the next notice is at 0.4 s
        watch.check(dispatch)
        assert dispatch.asked == 2
        watch.reset()  # a shard finished
        watch.check(dispatch)
        assert dispatch.asked == 2
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and lines[0].startswith("no shard finished for 0 s: 2 shards in flight"), lines


@pytest.mark.parametrize("starved", [True, False])
def test_the_phrase_names_the_limit_only_when_it_found_no_free_slots(starved):
    dispatch = object.__new__(dask_shards._Dispatch)  # its state, without a cluster
    dispatch.submitted, dispatch.pending, dispatch.starved = {}, [object()] * 3, starved
    dispatch.slots = dask_shards.SlotLeases("judgebench-0123456789ab")
    said = dispatch.waiting_on()
    assert said.startswith("0 shards in flight on the Dask workers, 3 waiting")
    assert ("'judgebench-0123456789ab' (other runs hold them)" in said) is starved


def test_waiting_for_slots_ends_when_the_server_has_not_answered_for_the_bound(monkeypatch):
    slots = dask_shards.SlotLeases("judgebench-0123456789ab")
    slots.unreachable_since = time.monotonic() - UNREACHABLE_SECONDS + 5
    slots.raise_if_unreachable()  # still within the bound (the Dask dispatch's wait calls it)
    slots.unreachable_since = time.monotonic() - UNREACHABLE_SECONDS - 1
    with pytest.raises(GlobalLimitError, match="did not answer for 600 s"):
        slots.raise_if_unreachable()
