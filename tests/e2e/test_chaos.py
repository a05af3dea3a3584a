"""Nothing lost, nothing doubled: the `mnemo bench chaos` runs, small, as tests. Each starts
real `mnemo run` processes against the fake Bot API (updates below the polled offset are
gone for good) and the fake model, forked from the warm `mnemo`
(`tests.conftest.launch_mnemo`): the start is not what these runs check."""

from __future__ import annotations

from core.bench.chaos import kill_run, load_run
from tests.conftest import launch_mnemo


def test_kill_9_with_messages_queued_then_restart_loses_and_doubles_nothing() -> None:
    result = kill_run(chats=2, messages=6, delay_s=0.5, timeout_s=120, launch=launch_mnemo)
    assert result["delivered_before_stop"] < result["pushed"]  # killed with work queued
    assert (result["stored"], result["answered"], result["delivered"]) == (12, 12, 12)
    assert result["doubled_stored"] == result["doubled_answered"] == 0
    assert result["doubled_delivered"] == 0
    assert result["sigterm_stop_s"] < 10


def test_every_reply_is_delivered_when_sends_fail_under_load() -> None:
    result = load_run(chats=10, messages=5, fail_every=6, timeout_s=180, launch=launch_mnemo)
    assert result["failures_injected"] == 8
    assert result["send_calls"] >= result["pushed"] + result["failures_injected"]
    assert result["whole"], result


def test_sigterm_with_messages_queued_stops_within_10_s_and_keeps_them() -> None:
    result = kill_run(
        chats=2, messages=6, delay_s=2.0, timeout_s=120, how="term", launch=launch_mnemo
    )
    assert result["delivered_before_stop"] < result["pushed"]
    assert result["first_stop_s"] < 10
    assert result["whole"], result
