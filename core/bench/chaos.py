"""`mnemo bench chaos`: nothing lost, nothing doubled, when things break for real.

Two runs of a real `mnemo run` process against a fake Telegram Bot API (which confirms and
forgets every update below the polled offset, as Telegram does) and a fake model on
loopback:

- **kill**: `--kill-chats` × `--kill-messages` messages pushed at once to a slow model
  (`--delay` s a reply); once a few replies went out and every update was confirmed to
  Telegram, the process gets SIGKILL half a model reply later (mid-turn; a kill in the
  instant between Telegram accepting a reply and its being recorded as delivered sends that
  reply again after the restart: the Bot API has no idempotent send); a new one starts on
  the same database and answers what is left; then SIGTERM, timed (target: within 10 s).
- **term**: the same with SIGTERM instead of SIGKILL, timed (the target is 10 s, Docker's
  default before it kills).
- **load**: `--load-chats` × `--load-messages` messages pushed at once to a fast model,
  with sends failing now and then (a 502 every `--fail-every` sends, and some 429s with
  `retry_after`).

For each: messages pushed, stored, answered and delivered, and how many were doubled
(stored twice, answered twice or delivered twice). Each message's text is unique, and the
fake model's reply quotes it, so every reply is matched to its message. Figures, never
assertions.
"""

from __future__ import annotations

import contextlib
import re
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import click

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from core.bench.startup import MNEMO, bench_env, write_config
from core.bench.support import echo_result
from core.config import StorageConfig
from core.storage.engine import open_storage
from core.storage.store import StoredMessage
from core.storage.stores import session_store

CHANNEL = "telegram"
FIRST_CHAT_ID = 5000
MESSAGE = re.compile(r"chaos (\d+)-(\d+)\b")
START_TIMEOUT_S = 120
STOP_TARGET_S = 10.0


class MnemoProcess(Protocol):
    """What the runs use of a started `mnemo` process (a `subprocess.Popen` has it all)."""

    pid: int

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


# Starts `mnemo --config CONFIG COMMAND` in a work dir, stderr to a log: `launch_mnemo`, or
# what the tests give instead (the same command forked from a process that imported it).
Launcher = Callable[[Path, str, Path, Path], MnemoProcess]


def message_text(chat: int, number: int) -> str:
    return f"chaos {chat}-{number}: please answer this one"


def echo_model(delay_s: float) -> Any:
    """The fake model: after `delay_s`, a reply that quotes the newest user message."""

    def respond(request: dict[str, Any]) -> FakeReply:
        users = [m for m in request["messages"] if m.get("role") == "user"]
        found = MESSAGE.search(str(users[-1].get("content") or "")) if users else None
        quoted = found.group(0) if found else "?"
        return FakeReply(content=f"Answer to {quoted}.", delay_s=delay_s)

    return respond


@dataclass(frozen=True)
class Tally:
    pushed: int
    stored: int
    answered: int
    delivered: int
    doubled_stored: int
    doubled_answered: int
    doubled_delivered: int

    @property
    def whole(self) -> bool:
        counts = (self.stored, self.answered, self.delivered)
        doubled = self.doubled_stored + self.doubled_answered + self.doubled_delivered
        return all(count == self.pushed for count in counts) and doubled == 0


def stored_conversations(storage_url: str, pushed: set[str]) -> dict[str, list[StoredMessage]]:
    """Each pushed chat's stored messages (SQLite or PostgreSQL, as `storage_url` says)."""
    storage = open_storage(StorageConfig(url=storage_url), migrate=False)
    try:
        store = session_store(storage)
        found: dict[str, list[StoredMessage]] = {}
        for chat_id in sorted({key.split("-")[0] for key in pushed}):
            chat = store.find_chat(CHANNEL, chat_id)
            if chat is not None:
                found[chat_id] = store.messages_between(chat.id, 0, 1_000_000)
        return found
    finally:
        storage.close()


def tally(pushed: set[str], storage_url: str, telegram: FakeTelegramServer) -> Tally:
    """Count, per pushed message key (`chat-number`), its stored user messages, stored
    replies and delivered replies."""
    stored: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    for messages in stored_conversations(storage_url, pushed).values():
        for message in messages:
            found = MESSAGE.search(message.content or "")
            if found is None:
                continue
            key = f"{found.group(1)}-{found.group(2)}"
            if message.role == "user":
                stored[key] += 1
            elif message.role == "assistant":
                answered[key] += 1
    delivered: Counter[str] = Counter()
    for sent in list(telegram.delivered):
        found = MESSAGE.search(str(sent.get("text", "")))
        if found is not None:
            delivered[f"{found.group(1)}-{found.group(2)}"] += 1

    def count(counter: Counter[str]) -> tuple[int, int]:
        keys = [key for key in pushed if counter[key]]
        return len(keys), sum(counter[key] - 1 for key in keys)

    (n_stored, d_stored), (n_answered, d_answered) = count(stored), count(answered)
    n_delivered, d_delivered = count(delivered)
    return Tally(len(pushed), n_stored, n_answered, n_delivered, d_stored, d_answered, d_delivered)


@dataclass(frozen=True)
class WebhookSetup:
    """A bot process in webhook mode: Telegram posts to `url`, the process listens on `port`."""

    url: str
    port: int
    secret: str = "chaos-webhook-secret"

    def config(self) -> str:
        return (
            f'mode = "webhook"\nwebhook_url = "{self.url}"\nlisten_port = {self.port}\n'
            f'webhook_secret = "{self.secret}"\n'
        )


class Bot:
    """A `mnemo run` process on Telegram (the fake Bot API) and the fake model; several of
    them (each its own `name`) may share one `work` directory and its database."""

    def __init__(
        self,
        work: Path,
        model_url: str,
        telegram: FakeTelegramServer,
        *,
        name: str = "chaos",
        webhook: WebhookSetup | None = None,
        storage_url: str = "",
        max_messages_per_second: float = 30.0,
        launch: Launcher | None = None,
    ) -> None:
        extra = (
            (f'url = "{storage_url}"\n' if storage_url else "")
            + "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
            f'[telegram]\ntoken = "1:CHAOS"\napi_base_url = "{telegram.base_url}"\n'
            f"max_messages_per_second = {max_messages_per_second}\n"
            f"{webhook.config() if webhook else ''}"
        )
        self.config = write_config(work / f"{name}.toml", model_url, work / "data", extra)
        self.storage_url = storage_url or f"sqlite:///{work / 'data' / 'mnemo.db'}"
        self.log = work / f"{name}.log"
        self.work = work
        self.telegram = telegram
        self.ready_call = "setWebhook" if webhook else "getUpdates"
        self.launcher: Launcher = launch or launch_mnemo
        self.process: MnemoProcess | None = None

    def start(self) -> None:
        """Launch, and wait until the process polls (or has registered its webhook)."""
        before = len(self.telegram.sent(self.ready_call))
        self.launch()
        self.telegram.wait_for(lambda tg: len(tg.sent(self.ready_call)) > before, START_TIMEOUT_S)

    def launch(self) -> None:
        self.process = self.launcher(self.config, "run", self.log, self.work)

    def kill(self) -> float:
        assert self.process is not None
        began = time.perf_counter()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        return time.perf_counter() - began

    def stop(self) -> float:
        """SIGTERM; the seconds until the process ended."""
        assert self.process is not None
        return terminate(self.process, timeout_s=60)


def launch_mnemo(config: Path, command: str, log: Path, work: Path) -> subprocess.Popen[bytes]:
    """`mnemo --config CONFIG COMMAND` in `work`, its stderr appended to `log`."""
    with log.open("ab") as stderr:  # the child keeps its own copy
        return subprocess.Popen(
            [*MNEMO, "--config", str(config), command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            env=bench_env(None),
            cwd=work,
        )


def terminate(process: MnemoProcess, timeout_s: float) -> float:
    """SIGTERM, SIGKILL after `timeout_s`; the seconds until the process ended."""
    began = time.perf_counter()
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return time.perf_counter() - began


def push(telegram: FakeTelegramServer, chats: int, messages: int) -> set[str]:
    """`messages` private messages in each of `chats` chats, interleaved; their keys."""
    keys: set[str] = set()
    for number in range(messages):
        for offset in range(chats):
            chat_id = FIRST_CHAT_ID + offset
            chat = {"id": chat_id, "type": "private", "first_name": f"User {chat_id}"}
            telegram.push_message(
                chat, user(chat_id, f"User {chat_id}"), message_text(chat_id, number)
            )
            keys.add(f"{chat_id}-{number}")
    return keys


def delivered_count(telegram: FakeTelegramServer) -> int:
    texts = [str(message.get("text")) for message in list(telegram.delivered)]
    return len({found.group(0) for text in texts if (found := MESSAGE.search(text))})


def kill_run(
    chats: int,
    messages: int,
    delay_s: float,
    timeout_s: float,
    how: str = "kill",
    launch: Launcher | None = None,
) -> dict[str, Any]:
    """Push; once a few replies went out and Telegram has confirmed every update, stop the
    process mid-turn (`how`: SIGKILL, or SIGTERM timed), restart, wait for every reply (or
    the timeout), SIGTERM. `launch`: how to start `mnemo` (`launch_mnemo`)."""
    with (
        FakeOpenAIServer(echo_model(delay_s)) as model,
        FakeTelegramServer() as telegram,
        tempfile.TemporaryDirectory(prefix="mnemo-bench-chaos-") as tmp,
    ):
        bot = Bot(Path(tmp), model.base_url, telegram, launch=launch)
        bot.start()
        pushed = push(telegram, chats, messages)
        telegram.wait_for(lambda tg: not tg.updates and delivered_count(tg) >= chats, timeout_s)
        time.sleep(delay_s / 2)  # mid-turn: the model is working on the next replies
        before = delivered_count(telegram)
        first_stop_s = bot.stop() if how == "term" else bot.kill()
        began = time.perf_counter()
        bot.start()
        wait_delivered(telegram, len(pushed), timeout_s)
        recovered_s = time.perf_counter() - began
        stop_s = bot.stop()
        result = tally(pushed, bot.storage_url, telegram)
    return {
        **asdict(result),
        "whole": result.whole,
        "delivered_before_stop": before,
        "first_stop_s": round(first_stop_s, 2),
        "restart_to_all_delivered_s": round(recovered_s, 2),
        "sigterm_stop_s": round(stop_s, 2),
        "model_delay_s": delay_s,
    }


def load_run(
    chats: int, messages: int, fail_every: int, timeout_s: float, launch: Launcher | None = None
) -> dict[str, Any]:
    """Push everything at once; sends fail now and then (502s and 429s). `launch`: how to
    start `mnemo` (`launch_mnemo`)."""
    with (
        FakeOpenAIServer(echo_model(0.0)) as model,
        FakeTelegramServer() as telegram,
        tempfile.TemporaryDirectory(prefix="mnemo-bench-chaos-") as tmp,
    ):
        total = chats * messages
        failures = max(1, total // fail_every)
        for index in range(failures):
            if index % 4 == 3:
                telegram.fail_next(
                    "sendMessage", 429, "Too Many Requests: retry after 1", after=fail_every - 1,
                    retry_after=1,
                )  # fmt: skip
            else:
                telegram.fail_next("sendMessage", 502, "Bad Gateway", after=fail_every - 1)
        bot = Bot(Path(tmp), model.base_url, telegram, launch=launch)
        bot.start()
        began = time.perf_counter()
        pushed = push(telegram, chats, messages)
        wait_delivered(telegram, len(pushed), timeout_s)
        seconds = time.perf_counter() - began
        stop_s = bot.stop()
        result = tally(pushed, bot.storage_url, telegram)
        sends = len(telegram.sent())
    return {
        **asdict(result),
        "whole": result.whole,
        "failures_injected": failures,
        "send_calls": sends,
        "seconds": round(seconds, 2),
        "sigterm_stop_s": round(stop_s, 2),
    }


def wait_delivered(telegram: FakeTelegramServer, expected: int, timeout_s: float) -> None:
    """Until every pushed message has a delivered reply, or `timeout_s` (then the tally
    shows what is missing)."""
    with contextlib.suppress(AssertionError):
        telegram.wait_for(lambda tg: delivered_count(tg) >= expected, timeout_s)


def chaos_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for name in ("kill", "term", "load"):
        run = result[name]
        lines.append(
            f"{name}: pushed {run['pushed']}, stored {run['stored']}, answered"
            f" {run['answered']}, delivered {run['delivered']}; doubled: stored"
            f" {run['doubled_stored']}, answered {run['doubled_answered']}, delivered"
            f" {run['doubled_delivered']} -> {'whole' if run['whole'] else 'NOT WHOLE'}"
        )
        if name != "load":
            lines.append(
                f"  stopped after {run['delivered_before_stop']} replies (that stop took"
                f" {run['first_stop_s']:.1f} s); restart to all delivered"
                f" {run['restart_to_all_delivered_s']:.1f} s"
            )
    load = result["load"]
    lines.append(
        f"  load: {load['failures_injected']} send failures injected, {load['send_calls']}"
        f" sendMessage calls, all in {load['seconds']:.1f} s; stop {load['sigterm_stop_s']:.1f} s"
    )
    return lines


@click.command("chaos")
@click.option("--kill-chats", default=3, show_default=True)
@click.option("--kill-messages", default=10, show_default=True, help="Per chat.")
@click.option("--delay", default=1.0, show_default=True, help="Seconds per model reply (kill).")
@click.option("--load-chats", default=50, show_default=True)
@click.option("--load-messages", default=20, show_default=True, help="Per chat.")
@click.option("--fail-every", default=25, show_default=True, help="A failed send every N.")
@click.option("--timeout", default=600.0, show_default=True, help="Seconds to wait per run.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_chaos(
    kill_chats: int,
    kill_messages: int,
    delay: float,
    load_chats: int,
    load_messages: int,
    fail_every: int,
    timeout: float,
    as_json: bool,
) -> None:
    """Messages stored, answered and delivered after a kill -9, a SIGTERM and under load."""
    result = {
        "kill": kill_run(kill_chats, kill_messages, delay, timeout, "kill"),
        "term": kill_run(kill_chats, kill_messages, delay, timeout, "term"),
        "load": load_run(load_chats, load_messages, fail_every, timeout),
    }
    echo_result(result, as_json, lambda: chaos_lines(result))
