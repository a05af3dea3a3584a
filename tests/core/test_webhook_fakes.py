"""The fake Bot API's webhook side and the round-robin proxy, over real HTTP."""

from __future__ import annotations

import httpx

from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from core.bench.fakes.round_robin_proxy import RoundRobinProxy
from core.bench.fleet import free_port


def call(tg: FakeTelegramServer, method: str, **params: object) -> httpx.Response:
    return httpx.post(f"{tg.base_url}1:TOKEN/{method}", json=params, timeout=5)


def test_get_updates_is_refused_while_a_webhook_is_set_and_info_reports_it() -> None:
    with FakeTelegramServer() as tg:
        dead_end = f"http://127.0.0.1:{free_port()}/hook"  # nothing listens: stays pending
        assert call(tg, "setWebhook", url=dead_end, secret_token="s").json()["result"] is True
        tg.push_message({"id": 5, "type": "private"}, user(5, "Eve"), "queued")
        refused = call(tg, "getUpdates")
        tg.wait_for(lambda server: len(server.webhook_posts) >= 2, timeout=5)  # tried again
        info = call(tg, "getWebhookInfo").json()["result"]
        call(tg, "deleteWebhook")
        polled = call(tg, "getUpdates").json()["result"]
    assert refused.status_code == 409 and "webhook is active" in refused.json()["description"]
    assert info["url"] == dead_end and info["pending_update_count"] == 1
    assert [update["message"]["text"] for update in polled] == ["queued"]  # kept, not dropped
    assert {post.status for post in tg.webhook_posts} == {0}  # no answer, so it stayed


def test_the_proxy_takes_backends_in_turn_and_answers_502_for_one_that_is_gone() -> None:
    with FakeTelegramServer() as first, FakeTelegramServer() as second:
        gone = f"http://127.0.0.1:{free_port()}"
        with RoundRobinProxy([first.origin, second.origin, gone]) as proxy:
            statuses = [
                httpx.post(f"{proxy.origin}/bot1:T/getMe", timeout=5).status_code for _ in range(6)
            ]
    assert statuses == [200, 200, 502, 200, 200, 502]
    assert (len(first.sent("getMe")), len(second.sent("getMe"))) == (2, 2)
    assert proxy.answered == {first.origin: 2, second.origin: 2}
