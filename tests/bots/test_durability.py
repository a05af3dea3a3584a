"""A real `mnemo run` process, killed or stopped while messages wait for a slow model, then
started again: every message stored on arrival, answered and delivered exactly once.

The fake Bot API here forgets updates below the polled offset, as the real one does, so a
message that Mnemo confirmed but lost could not come back on the next start.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, echo_responder
from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.delivery_store import DatabaseDeliveryStore
from core.storage.store import DeliveryTotals
from tests.conftest import start_mnemo, write_config

CHATS = (201, 202, 203)


class ConfirmingTelegram(FakeTelegramServer):
    """The Bot API's getUpdates: an offset confirms every update below it, gone for good."""

    def answer(self, method: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        offset = int(params.get("offset") or 0) if method == "getUpdates" else 0
        if offset:
            with self._changed:
                self.updates = [u for u in self.updates if u["update_id"] >= offset]
        return super().answer(method, params)


class SlowModel:
    """Echoes after `delay_s` (changeable between the runs)."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        reply = echo_responder(request)
        reply.delay_s = self.delay_s
        return reply


@pytest.fixture
def tg() -> Iterator[ConfirmingTelegram]:
    with ConfirmingTelegram() as server:
        yield server


def config_for(tmp_path: Path, llm: FakeOpenAIServer, tg: FakeTelegramServer) -> Path:
    extra = (
        "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
        f'[telegram]\ntoken = "1:TEST"\napi_base_url = "{tg.base_url}"\n'
    )
    return write_config(tmp_path / "config.toml", llm.base_url, tmp_path / "data", extra)


def push_all(tg: FakeTelegramServer, per_chat: int) -> dict[int, list[str]]:
    """`per_chat` messages in each chat, interleaved; the texts by chat."""
    texts: dict[int, list[str]] = {chat: [] for chat in CHATS}
    for n in range(per_chat):
        for chat in CHATS:
            text = f"chat {chat} message {n}"
            texts[chat].append(text)
            private = {"id": chat, "type": "private", "first_name": f"U{chat}"}
            tg.push_message(private, user(chat, f"U{chat}"), text)
    return texts


def replies(tg: FakeTelegramServer, chat: int) -> list[str]:
    return [str(p["text"]) for p in tg.sent() if int(str(p["chat_id"])) == chat]


def totals(tmp_path: Path) -> DeliveryTotals:
    conn = connect(tmp_path / "data" / "mnemo.db")
    try:
        return DatabaseDeliveryStore(SqliteDatabase(conn)).delivery_totals("telegram")
    finally:
        conn.close()


def stop(process: subprocess.Popen[str], how: signal.Signals) -> tuple[float, str]:
    """Send `how`; (seconds until the process ended, its stderr)."""
    started = time.monotonic()
    process.send_signal(how)
    _, stderr = process.communicate(timeout=60)
    return time.monotonic() - started, stderr


def serve_until_answered(
    tmp_path: Path, config: Path, tg: FakeTelegramServer, expected: dict[int, list[str]]
) -> str:
    """Start `mnemo run` again and stop it once every chat has all its replies."""
    process = start_mnemo(["run"], config, tmp_path)
    try:
        tg.wait_for(lambda s: all(len(replies(s, c)) >= len(expected[c]) for c in CHATS), 90)
        time.sleep(0.5)  # room for a duplicate to show, were there one
    finally:
        _, stderr = stop(process, signal.SIGTERM)
    assert process.returncode == 0, stderr
    return stderr


def test_kill_9_with_messages_waiting_then_a_restart_answers_each_once(
    tmp_path: Path, tg: ConfirmingTelegram
) -> None:
    model = SlowModel(delay_s=1.0)
    with FakeOpenAIServer(responder=model) as llm:
        config = config_for(tmp_path, llm, tg)
        process = start_mnemo(["run"], config, tmp_path)
        try:
            tg.wait_for(lambda s: bool(s.sent("getUpdates")), timeout=120)
            texts = push_all(tg, per_chat=5)
            tg.wait_for(lambda s: not s.updates, timeout=30)  # all confirmed to "Telegram"
            tg.wait_for(lambda s: len(s.sent()) >= 1, timeout=30)  # turns are under way
            # Killed half-way through the next model calls, not during a send: a reply cut
            # off inside `sendMessage` cannot be known as delivered and goes out again.
            time.sleep(0.5)
        finally:
            process.kill()
            process.communicate(timeout=30)
        killed = totals(tmp_path)
        assert killed.received == 15  # every message stored, though few were answered
        assert killed.answered < 15 and killed.pending > 0
        model.delay_s = 0.05
        serve_until_answered(tmp_path, config, tg, texts)
    for chat in CHATS:
        assert replies(tg, chat) == [f"echo: {text}" for text in texts[chat]]  # once, in order
    after = totals(tmp_path)
    assert (after.received, after.answered, after.pending, after.delivered) == (15, 15, 0, 15)


def test_sigterm_stops_within_10_s_and_keeps_the_waiting_messages(
    tmp_path: Path, tg: ConfirmingTelegram
) -> None:
    model = SlowModel(delay_s=2.0)
    with FakeOpenAIServer(responder=model) as llm:
        config = config_for(tmp_path, llm, tg)
        process = start_mnemo(["run"], config, tmp_path)
        try:
            tg.wait_for(lambda s: bool(s.sent("getUpdates")), timeout=120)
            texts = push_all(tg, per_chat=10)
            tg.wait_for(lambda s: not s.updates, timeout=30)
            time.sleep(0.5)  # each chat's first turn is with the model
        finally:
            took, stderr = stop(process, signal.SIGTERM)
        assert process.returncode == 0, stderr
        assert took < 10, f"shutdown took {took:.1f} s"
        stopped = totals(tmp_path)
        assert stopped.received == 30 and stopped.pending >= 20
        assert stopped.answered == stopped.delivered  # what was answered went out
        model.delay_s = 0.05
        serve_until_answered(tmp_path, config, tg, texts)
    for chat in CHATS:
        assert replies(tg, chat) == [f"echo: {text}" for text in texts[chat]]
    after = totals(tmp_path)
    assert (after.received, after.answered, after.pending, after.delivered) == (30, 30, 0, 30)
