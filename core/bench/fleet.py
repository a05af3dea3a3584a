"""Many `mnemo run` processes on one database behind a load balancer, in webhook mode.

`webhook_fleet_run` starts `processes` real bot processes that share one data directory
(one SQLite file), each serving the webhook path on its own port behind a round-robin
loopback proxy, and the fake Bot API, which POSTs every update to the proxy as Telegram
would (one at a time per chat, retrying any answer but a 2xx). It pushes `chats` ×
`messages` messages and counts, per message, how often it was stored, answered and
delivered (`core.bench.chaos.tally`), whether each chat's messages were stored and its
replies delivered in the order they were sent, and how many webhook requests each
process answered. Figures, never assertions: the tests assert on them.
"""

from __future__ import annotations

import socket
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.bench.chaos import (
    CHANNEL,
    MESSAGE,
    Bot,
    WebhookSetup,
    echo_model,
    push,
    tally,
    wait_delivered,
)
from core.db import connect
from core.sqlite_store import SqliteSessionStore
from core.testing.fake_openai import FakeOpenAIServer
from core.testing.fake_telegram import FakeTelegramServer
from core.testing.round_robin_proxy import RoundRobinProxy

WEBHOOK_PATH = "/telegram"
START_TIMEOUT_S = 180.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on (now)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def chats_out_of_order(
    pushed: set[str], database: Path, telegram: FakeTelegramServer
) -> dict[str, list[str]]:
    """Chats whose stored messages or delivered replies do not follow the order the messages
    were sent in (each message's text carries its number): {"stored": [...], "delivered": [...]}."""
    stored: dict[str, list[int]] = defaultdict(list)
    conn = connect(database)
    try:
        store = SqliteSessionStore(conn)
        for chat_id in sorted({key.split("-")[0] for key in pushed}):
            chat = store.find_chat(CHANNEL, chat_id)
            if chat is None:
                continue
            for message in store.messages_between(chat.id, 0, 1_000_000):
                found = MESSAGE.search(message.content or "")
                if found is not None and message.role == "user":
                    stored[found.group(1)].append(int(found.group(2)))
    finally:
        conn.close()
    delivered: dict[str, list[int]] = defaultdict(list)
    for sent in list(telegram.delivered):
        found = MESSAGE.search(str(sent.get("text", "")))
        if found is not None:
            delivered[found.group(1)].append(int(found.group(2)))
    return {
        "stored": sorted(chat for chat, numbers in stored.items() if numbers != sorted(numbers)),
        "delivered": sorted(
            chat for chat, numbers in delivered.items() if numbers != sorted(numbers)
        ),
    }


def webhook_fleet_run(
    processes: int, chats: int, messages: int, delay_s: float, timeout_s: float
) -> dict[str, Any]:
    """Start the fleet, push everything at once, wait for every reply (or the timeout),
    SIGTERM every process; the tally, the order check and the share each process served."""
    with (
        FakeOpenAIServer(echo_model(delay_s)) as model,
        FakeTelegramServer() as telegram,
        tempfile.TemporaryDirectory(prefix="mnemo-bench-fleet-") as tmp,
    ):
        ports = [free_port() for _ in range(processes)]
        with RoundRobinProxy([f"http://127.0.0.1:{port}" for port in ports]) as proxy:
            url = f"{proxy.origin}{WEBHOOK_PATH}"
            bots = [
                Bot(
                    Path(tmp),
                    model.base_url,
                    telegram,
                    name=f"bot{index}",
                    webhook=WebhookSetup(url, port),
                )  # fmt: skip
                for index, port in enumerate(ports)
            ]
            bots[0].start()  # alone: an empty model cache is filled once, not raced for
            for bot in bots[1:]:
                bot.launch()
            telegram.wait_for(lambda tg: len(tg.sent("setWebhook")) >= processes, START_TIMEOUT_S)
            began = time.perf_counter()
            pushed = push(telegram, chats, messages)
            wait_delivered(telegram, len(pushed), timeout_s)
            seconds = time.perf_counter() - began
            stops = [bot.stop() for bot in bots]
            result = tally(pushed, bots[0].database, telegram)
            disorder = chats_out_of_order(pushed, bots[0].database, telegram)
            served = [proxy.answered[f"http://127.0.0.1:{port}"] for port in ports]
            posts = list(telegram.webhook_posts)
    return {
        **asdict(result),
        "whole": result.whole,
        "out_of_order": disorder,
        "webhook_posts": len(posts),
        "webhook_posts_refused": sum(1 for post in posts if not 200 <= post.status < 300),
        "served_per_process": served,
        "seconds": round(seconds, 2),
        "sigterm_stop_s": [round(stop, 2) for stop in stops],
    }
