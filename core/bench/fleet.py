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

import os
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from core.bench.chaos import (
    MESSAGE,
    Bot,
    Launcher,
    MnemoProcess,
    WebhookSetup,
    echo_model,
    launch_mnemo,
    push,
    stored_conversations,
    tally,
    terminate,
    wait_delivered,
)
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import FakeTelegramServer
from core.bench.fakes.round_robin_proxy import RoundRobinProxy
from core.bench.startup import write_config
from core.model.embedded import free_port

WEBHOOK_PATH = "/telegram"
WORKER_INTERVAL_MINS = 0.05  # every 3 s
START_TIMEOUT_S = 180.0


def chats_out_of_order(
    pushed: set[str], storage_url: str, telegram: FakeTelegramServer
) -> dict[str, list[str]]:
    """Chats whose stored messages or delivered replies do not follow the order the messages
    were sent in (each message's text carries its number): {"stored": [...], "delivered": [...]}."""
    stored: dict[str, list[int]] = defaultdict(list)
    for messages in stored_conversations(storage_url, pushed).values():
        for message in messages:
            found = MESSAGE.search(message.content or "")
            if found is not None and message.role == "user":
                stored[found.group(1)].append(int(found.group(2)))
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


def machine_ticks() -> tuple[int, int]:
    """(busy, total) CPU ticks of the whole machine so far (/proc/stat)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]  # idle + iowait
    return sum(values) - idle, sum(values)


def delivery_doubles(delivered: list[dict[str, Any]], kill_mark: int) -> dict[str, int]:
    """Replies delivered twice, split by whether a kill (at index `kill_mark` of the
    deliveries; 0: none) explains them: first sent before it and again after it."""
    seen_before: Counter[str] = Counter()
    seen_after: Counter[str] = Counter()
    for index, sent in enumerate(delivered):
        found = MESSAGE.search(str(sent.get("text", "")))
        if found is not None:
            key = f"{found.group(1)}-{found.group(2)}"
            (seen_before if index < kill_mark else seen_after)[key] += 1
    across = sum(1 for key in seen_after if seen_before[key])
    otherwise = sum(n - 1 for n in seen_before.values() if n > 1) + sum(
        n - 1 for n in seen_after.values() if n > 1
    )
    return {"across_the_kill": across, "otherwise": otherwise}


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a live process has used so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Worker:
    """A `mnemo reflector` process on the same database, reflecting every few seconds."""

    def __init__(
        self, work: Path, model_url: str, storage_url: str, name: str, launch: Launcher
    ) -> None:
        extra = (
            f'url = "{storage_url}"\n[reflector]\nenabled = true\n'
            f"interval_mins = {WORKER_INTERVAL_MINS}\n"
        )
        self.config = write_config(work / f"{name}.toml", model_url, work / "data", extra)
        self.log = work / f"{name}.log"
        self.work = work
        self.launcher = launch
        self.process: MnemoProcess | None = None

    def launch(self) -> None:
        self.process = self.launcher(self.config, "reflector", self.log, self.work)

    def stop(self) -> None:
        if self.process is not None:
            terminate(self.process, timeout_s=30)


class Meter:
    """Wall time, the bot processes' CPU, this process's (the fakes and the proxy) and the
    whole machine's busy share, from construction to `stop()`."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.bots_cpu = sum(cpu_seconds(pid) for pid in pids)
        self.fakes_cpu = time.process_time()
        self.machine = machine_ticks()
        self.began = time.perf_counter()

    def stop(self, *, killed: bool) -> dict[str, float]:
        """The figures so far (the bots' CPU is unknown, 0, once one of them was killed)."""
        seconds = time.perf_counter() - self.began
        fakes_cpu = time.process_time() - self.fakes_cpu
        machine = machine_ticks()
        busy = (machine[0] - self.machine[0]) / max(1, machine[1] - self.machine[1])
        bots_cpu = 0.0 if killed else sum(cpu_seconds(pid) for pid in self.pids) - self.bots_cpu
        return {"seconds": seconds, "fakes_cpu": fakes_cpu, "busy": busy, "bots_cpu": bots_cpu}


def webhook_fleet_run(
    processes: int,
    chats: int,
    messages: int,
    delay_s: float,
    timeout_s: float,
    *,
    storage_url: str = "",
    workers: int = 0,
    kill_one_after: int | None = None,
    max_messages_per_second: float = 30.0,
    reflector_check: Callable[[str], tuple[int, list[str]]] = lambda storage_url: (0, []),
    launch: Launcher = launch_mnemo,
) -> dict[str, Any]:
    """Start the fleet (and `workers` reflector workers; `launch` starts each), push all at
    once, wait for every reply (or the timeout), SIGTERM every process; the tally, the order
    check, each process's share, turns per second and CPU per turn. `kill_one_after`: see
    `_kill_last`. `reflector_check` (from the reflector package): runs, overlapping chats."""
    with (
        FakeOpenAIServer(echo_model(delay_s)) as model,
        FakeTelegramServer() as telegram,
        tempfile.TemporaryDirectory(prefix="mnemo-bench-fleet-") as tmp,
    ):
        ports = [free_port() for _ in range(processes)]
        with RoundRobinProxy([f"http://127.0.0.1:{port}" for port in ports]) as proxy:
            webhooks = [WebhookSetup(f"{proxy.origin}{WEBHOOK_PATH}", port) for port in ports]
            bots = [
                Bot(Path(tmp), model.base_url, telegram, name=f"bot{index}", webhook=webhook,
                    storage_url=storage_url, max_messages_per_second=max_messages_per_second,
                    launch=launch)
                for index, webhook in enumerate(webhooks)
            ]  # fmt: skip
            storage_url = bots[0].storage_url
            reflectors = [Worker(Path(tmp), model.base_url, storage_url, f"reflector{index}",
                                 launch) for index in range(workers)]  # fmt: skip
            _start(bots, reflectors, telegram)
            meter = Meter([bot.process.pid for bot in bots if bot.process is not None])
            pushed = push(telegram, chats, messages)
            kill_mark = _kill_last(bots, telegram, kill_one_after, timeout_s)
            wait_delivered(telegram, len(pushed), timeout_s)
            measured = meter.stop(killed=kill_mark is not None)
            stops = _stop(bots, reflectors)
            figures = {
                **_tally_figures(pushed, storage_url, telegram),
                **_reflector_figures(reflector_check(storage_url) if workers else (0, [])),
                **_webhook_figures(telegram, proxy, ports),
                **_delivery_figures(list(telegram.delivered), kill_mark),
            }
    return {**figures, **_speed_figures(measured, figures["answered"], kill_mark, stops)}


def _start(bots: list[Bot], reflectors: list[Worker], telegram: FakeTelegramServer) -> None:
    """The first bot alone (an empty model cache is filled once, not raced for), then the
    others, until each has set the webhook; then the reflector workers."""
    bots[0].start()
    for bot in bots[1:]:
        bot.launch()
    telegram.wait_for(lambda tg: len(tg.sent("setWebhook")) >= len(bots), START_TIMEOUT_S)
    for worker in reflectors:
        worker.launch()


def _kill_last(
    bots: list[Bot], telegram: FakeTelegramServer, after: int | None, timeout_s: float
) -> int | None:
    """With `after`, SIGKILL the last bot once that many replies went out; the number of
    replies sent by then (everything the dead process sent is before it)."""
    if after is None:
        return None
    telegram.wait_for(lambda tg: len(tg.delivered) >= after, timeout_s)
    bots[-1].kill()
    return len(telegram.delivered)


def _stop(bots: list[Bot], reflectors: list[Worker]) -> list[float]:
    """SIGTERM every bot still alive and every worker; how long each bot took to stop."""
    alive = [bot for bot in bots if bot.process is not None and bot.process.poll() is None]
    stops = [bot.stop() for bot in alive]
    for worker in reflectors:
        worker.stop()
    return stops


def _tally_figures(
    pushed: set[str], storage_url: str, telegram: FakeTelegramServer
) -> dict[str, Any]:
    result = tally(pushed, storage_url, telegram)
    disorder = chats_out_of_order(pushed, storage_url, telegram)
    return {**asdict(result), "whole": result.whole, "out_of_order": disorder}


def _reflector_figures(check: tuple[int, list[str]]) -> dict[str, Any]:
    runs, reflected_at_once = check
    return {"reflected_by_two_at_once": reflected_at_once, "reflector_runs": runs}


def _webhook_figures(
    telegram: FakeTelegramServer, proxy: RoundRobinProxy, ports: list[int]
) -> dict[str, Any]:
    posts = list(telegram.webhook_posts)
    served = [proxy.answered[f"http://127.0.0.1:{port}"] for port in ports]
    return {
        "webhook_posts": len(posts),
        "webhook_posts_refused": sum(1 for post in posts if not 200 <= post.status < 300),
        "served_per_process": served,
    }


def _delivery_figures(delivered: list[dict[str, Any]], kill_mark: int | None) -> dict[str, Any]:
    doubles = delivery_doubles(delivered, kill_mark or 0)
    return {
        "killed_one": kill_mark is not None,
        # replies sent before the kill and again after it (the dead process's send window:
        # Telegram accepted them, the process died before recording it): at-least-once
        "redelivered_after_kill": doubles["across_the_kill"],
        # doubles that the kill does not explain (must be none)
        "doubled_otherwise": doubles["otherwise"],
    }


def _speed_figures(
    measured: dict[str, float], turns: int, kill_mark: int | None, stops: list[float]
) -> dict[str, Any]:
    killed = kill_mark is not None
    seconds = measured["seconds"]
    cpu_ms = round(1000 * measured["bots_cpu"] / max(1, turns), 1)
    return {
        "seconds": round(seconds, 2),
        "turns_per_s": round(turns / seconds, 2) if seconds else 0.0,
        "cpu_ms_per_turn": None if killed else cpu_ms,
        # the fake Bot API, model and proxy (this process): on the same cores as the bots
        "fakes_cpu_ms_per_turn": round(1000 * measured["fakes_cpu"] / max(1, turns), 1),
        "machine_busy_share": round(measured["busy"], 2),  # all cores, everything on the machine
        "sigterm_stop_s": [round(stop, 2) for stop in stops],
    }
