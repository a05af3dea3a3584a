"""Three `mnemo run` processes in webhook mode on one database, behind a round-robin proxy,
with the fake Bot API delivering as Telegram does: nothing lost, doubled or reordered."""

from __future__ import annotations

from core.bench.fleet import webhook_fleet_run


def test_three_webhook_processes_behind_a_load_balancer_answer_every_message_once_in_order() -> (
    None
):
    result = webhook_fleet_run(processes=3, chats=20, messages=5, delay_s=0.05, timeout_s=180)
    assert (result["stored"], result["answered"], result["delivered"]) == (100, 100, 100), result
    assert result["doubled_stored"] == result["doubled_answered"] == 0, result
    assert result["doubled_delivered"] == 0, result
    assert result["out_of_order"] == {"stored": [], "delivered": []}, result
    assert all(served > 0 for served in result["served_per_process"]), result  # each took posts
    assert sum(result["served_per_process"]) >= 100
    assert max(result["sigterm_stop_s"]) < 10
