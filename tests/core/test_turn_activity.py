"""`core.turn.activity`: turns counted as they run, and the wait for a lull that background
work (the MCP servers' start) uses."""

from __future__ import annotations

import asyncio
import time

from core.turn.activity import TurnActivity


async def test_quiet_waits_out_a_running_turn_then_the_lull() -> None:
    activity = TurnActivity()
    activity.begin()
    waiting = asyncio.create_task(activity.quiet(0.2, at_most_s=30))
    await asyncio.sleep(0.4)
    assert not waiting.done()  # a turn runs: never quiet, however long
    ended = time.monotonic()
    activity.end()
    assert await waiting is True
    assert time.monotonic() - ended >= 0.2  # the lull is counted from the turn's end


async def test_quiet_counts_the_lull_from_the_call_not_from_an_older_one() -> None:
    activity = TurnActivity()
    await asyncio.sleep(0.3)  # quiet since it was made, before anyone asked
    asked = time.monotonic()
    assert await activity.quiet(0.2, at_most_s=30) is True
    assert time.monotonic() - asked >= 0.2  # a message right after start would be seen


async def test_a_bot_never_quiet_is_waited_for_at_most_so_long() -> None:
    activity = TurnActivity()
    activity.begin()
    activity.begin()
    activity.end()  # one of two turns ended: still busy
    assert activity.quiet_for() == 0.0
    assert await activity.quiet(0.1, at_most_s=0.3) is False
    activity.end()
    assert activity.running == 0 and activity.quiet_for() >= 0.0
