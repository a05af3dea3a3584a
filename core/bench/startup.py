"""`mnemo bench startup`: how fast and how small Mnemo starts, as a user runs it.

Each figure is a real `mnemo` process against the instant fake model, embeddings on:

- `printf 'hello\\n' | mnemo chat`, with the embedding model's export cached (warm) and with
  an empty cache (cold: the export is made first);
- `mnemo doctor`;
- `mnemo run` serving Telegram (a fake Bot API on loopback): the first reply after start
  against the later ones, and the memory held after 200 turns in 20 chats.

Wall time is measured around the process; max RSS is the kernel's (`wait4` for processes
that end, `VmHWM` / `VmRSS` of `/proc` for the running bot). Figures, never assertions.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import FakeTelegramServer, user
from core.bench.support import echo_result

MNEMO = [sys.executable, "-m", "bots.cli"]
RUN_CHATS = 20
RUN_TURNS_PER_CHAT = 10
FIRST_REPLY_TIMEOUT_S = 300


@dataclass(frozen=True)
class Measured:
    wall_s: float
    max_rss_mb: float
    returncode: int
    stderr: str
    first_line: str = ""  # the first line it printed, and when (s after the start)
    first_line_s: float = 0.0


def measure(args: list[str], config: Path, env: dict[str, str], stdin: str = "") -> Measured:
    """Run `mnemo ARGS` to the end: its wall time, its first line of output and when it
    came (`mnemo chat`'s first reply), and the kernel's max RSS of it."""
    with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
        began = time.perf_counter()
        process = subprocess.Popen(
            [*MNEMO, "--config", str(config), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=env,
            cwd=config.parent,
            text=True,
        )
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(stdin)
        process.stdin.close()
        first_line = process.stdout.readline()
        first_line_s = time.perf_counter() - began
        process.stdout.read()
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - began
        errors.seek(0)
        stderr = errors.read()
    rss = usage.ru_maxrss / 1024
    return Measured(wall, rss, process.returncode, stderr, first_line, first_line_s)


def bench_env(cache: Path | None) -> dict[str, str]:
    """The environment of a `mnemo` child: no secrets or config from this shell; the cache
    at `cache` (None: the user's own)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "TELEGRAM_", "DISCORD_")) and k != "MNEMO_CONFIG"
    }
    if cache is not None:
        env["MNEMO_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2])
    return env


def write_config(path: Path, base_url: str, data: Path, extra: str = "") -> Path:
    path.write_text(
        f'[llm]\nbase_url = "{base_url}"\nmax_retries = 0\n[storage]\ndata_dir = "{data}"\n{extra}',
        encoding="utf-8",
    )
    return path


def proc_memory_mb(pid: int) -> dict[str, float]:
    """Current (VmRSS) and peak (VmHWM) resident memory of a running process, in MB."""
    found: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            found[key] = int(value.split()[0]) / 1024
    return found


def run_bot(base_url: str, work: Path, env: dict[str, str]) -> dict[str, Any]:
    """`mnemo run` on Telegram: reply latencies (first and later) and memory after the turns."""
    with FakeTelegramServer() as telegram:
        extra = (
            "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
            f'[telegram]\ntoken = "1:BENCH"\napi_base_url = "{telegram.base_url}"\n'
        )
        config = write_config(work / "run.toml", base_url, work / "run-data", extra)
        began = time.perf_counter()
        process = subprocess.Popen(
            [*MNEMO, "--config", str(config), "run"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=work,
        )
        try:
            telegram.wait_for(lambda tg: bool(tg.sent("getUpdates")), FIRST_REPLY_TIMEOUT_S)
            polling_s = time.perf_counter() - began
            latencies = [_one_reply(telegram, 1000, 0)]
            for turn in range(RUN_TURNS_PER_CHAT):
                for chat in range(RUN_CHATS):
                    if (turn, chat) != (0, 0):
                        latencies.append(_one_reply(telegram, 1000 + chat, turn))
            memory = proc_memory_mb(process.pid)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    later = latencies[1:]
    return {
        "polling_after_s": round(polling_s, 2),
        "first_reply_s": round(latencies[0], 3),
        "later_replies_median_s": round(statistics.median(later), 3),
        "later_replies_max_s": round(max(later), 3),
        "turns": len(latencies),
        "chats": RUN_CHATS,
        "rss_after_turns_mb": round(memory["VmRSS"], 1),
        "peak_rss_mb": round(memory["VmHWM"], 1),
    }


def _one_reply(telegram: FakeTelegramServer, chat_id: int, turn: int) -> float:
    """Push one private message and wait for its reply; the seconds it took."""
    before = len(telegram.sent())
    chat = {"id": chat_id, "type": "private", "first_name": f"User {chat_id}"}
    began = time.perf_counter()
    telegram.push_message(chat, user(chat_id, f"User {chat_id}"), f"message {turn} to the bot")
    telegram.wait_for(lambda tg: len(tg.sent()) > before, FIRST_REPLY_TIMEOUT_S)
    return time.perf_counter() - began


def startup_bench(repeat: int) -> dict[str, Any]:
    with (
        FakeOpenAIServer() as model,
        tempfile.TemporaryDirectory(prefix="mnemo-bench-startup-") as tmp,
    ):
        work = Path(tmp)
        config = write_config(work / "config.toml", model.base_url, work / "data")
        cold_env = bench_env(work / "empty-cache")
        warm_env = bench_env(None)
        cold = measure(["chat"], config, cold_env, "hello\n")
        measure(["chat"], config, warm_env, "hello\n")  # makes sure the user's cache is warm
        warm = [measure(["chat"], config, warm_env, "hello\n") for _ in range(repeat)]
        doctor = [measure(["doctor"], config, warm_env) for _ in range(repeat)]
        bot = run_bot(model.base_url, work, warm_env)
    failed = [m.stderr[-400:] for m in [cold, *warm] if m.returncode != 0]
    if failed:
        raise click.ClickException(f"mnemo chat failed: {failed[0]}")
    return {
        "chat_warm_wall_s": round(statistics.median(m.wall_s for m in warm), 2),
        "chat_warm_max_rss_mb": round(max(m.max_rss_mb for m in warm), 1),
        "chat_cold_wall_s": round(cold.wall_s, 2),
        "chat_cold_max_rss_mb": round(cold.max_rss_mb, 1),
        "doctor_wall_s": round(statistics.median(m.wall_s for m in doctor), 2),
        "doctor_max_rss_mb": round(max(m.max_rss_mb for m in doctor), 1),
        "run": bot,
        "repeat": repeat,
    }


def startup_lines(result: dict[str, Any]) -> list[str]:
    run = result["run"]
    return [
        f"mnemo chat, one line, cache warm: {result['chat_warm_wall_s']:.2f} s wall,"
        f" {result['chat_warm_max_rss_mb']:.0f} MB max RSS (median of {result['repeat']})",
        f"mnemo chat, one line, cache cold: {result['chat_cold_wall_s']:.2f} s wall,"
        f" {result['chat_cold_max_rss_mb']:.0f} MB max RSS (includes the ONNX export)",
        f"mnemo doctor: {result['doctor_wall_s']:.2f} s wall,"
        f" {result['doctor_max_rss_mb']:.0f} MB max RSS",
        f"mnemo run (Telegram): polling after {run['polling_after_s']:.2f} s; first reply"
        f" {run['first_reply_s']:.3f} s, later median {run['later_replies_median_s']:.3f} s"
        f" (max {run['later_replies_max_s']:.3f} s)",
        f"mnemo run after {run['turns']} turns in {run['chats']} chats:"
        f" {run['rss_after_turns_mb']:.0f} MB RSS (peak {run['peak_rss_mb']:.0f} MB)",
    ]


@click.command("startup")
@click.option("--repeat", default=3, show_default=True, help="Runs of each warm command.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_startup(repeat: int, as_json: bool) -> None:
    """Wall time and memory of `mnemo chat`, `mnemo doctor` and `mnemo run` (fake model)."""
    result = startup_bench(repeat)
    echo_result(result, as_json, lambda: startup_lines(result))
