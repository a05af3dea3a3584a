"""`mnemo bench stream`: how soon a streamed reply shows, how many platform calls it costs,
and whether the final text is the stored reply, per channel.

The fake model streams at a set token rate (some answers cut half-way); the real
Telegram channel talks to the fake Bot API (a private chat's drafts, a group's edits),
the terminal prints into a buffer. Each run is one turn through the dispatcher, as in
`mnemo run`.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from bots.runtime import Runtime, build_runtime
from bots.telegram import TelegramChannel
from bots.terminal import TerminalChannel
from core import plugin as default_plugin
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.bench.fakes.fake_telegram import BOT_USERNAME, FakeTelegramServer, user
from core.bench.support import bench_config, echo_result

PARTIAL_CALLS = {"sendMessageDraft", "editMessageText"}
TARGETS_S = {"telegram-draft": 1.0, "telegram-edit": 1.5, "terminal": 1.0}


@dataclass(frozen=True)
class Run:
    """One streamed reply on one channel."""

    channel: str
    first_visible_s: float  # from the model's first token to the first text shown
    partial_calls: int  # platform calls while streaming (drafts, edits, the group's first)
    generation_s: float  # from the first token to the last
    identical: bool  # the final text the user sees is the stored reply
    cut: bool


class TimedBuffer(io.StringIO):
    """The terminal's stdout: when text was first written."""

    first_write: float | None = None

    def write(self, text: str) -> int:
        if text.strip() and self.first_write is None:
            self.first_write = time.monotonic()
        return super().write(text)


def answer(words: int, rate: float, cut: bool) -> FakeReply:
    text = " ".join(f"word{i}" for i in range(words))
    return FakeReply(text, tokens_per_s=rate, cut_after=words // 2 if cut else None)


def stored_reply(runtime: Runtime, channel: str, chat_id: str) -> str:
    chat = runtime.store.find_chat(channel, chat_id)
    assert chat is not None
    replies = [m.content for m in runtime.store.history(chat.id) if m.role == "assistant"]
    return replies[-1] if replies else ""


async def until(check: Any, within_s: float = 60) -> None:
    async with asyncio.timeout(within_s):
        while not check():  # noqa: ASYNC110 (the fakes live in other threads)
            await asyncio.sleep(0.01)


@contextlib.asynccontextmanager
async def telegram_running(runtime: Runtime, tg: FakeTelegramServer) -> AsyncIterator[None]:
    channel = TelegramChannel(runtime.config.telegram, runtime.extensions.command_list())
    runtime.dispatcher.attach(channel)
    task = asyncio.create_task(channel.run(runtime.dispatcher))
    try:
        await until(lambda: bool(tg.sent("getUpdates")) or task.done())
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def delivered(runtime: Runtime) -> int:
    return runtime.deliveries.delivery_totals().delivered


async def telegram_run(
    runtime: Runtime, tg: FakeTelegramServer, llm: FakeOpenAIServer, index: int, group: bool
) -> Run:
    """One reply in a new private chat (drafts) or group (edits), through the real channel."""
    chat_id = -(5000 + index) if group else 1000 + index
    chat = {"id": chat_id, "type": "supergroup", "title": f"G{index}"} if group else {
        "id": chat_id, "type": "private", "first_name": f"U{index}"}  # fmt: skip
    fields: dict[str, Any] = {}
    if group:
        fields["entities"] = [{"type": "mention", "offset": 0, "length": len(BOT_USERNAME) + 1}]
    before, done = len(tg.calls), delivered(runtime) + 1
    tg.push_message(chat, user(1000 + index, f"U{index}"), f"@{BOT_USERNAME} go", **fields)
    await until(lambda: delivered(runtime) >= done)
    calls = [c for c in tg.calls[before:] if str(c.params.get("chat_id")) == str(chat_id)]
    shown = [c for c in calls if c.method in PARTIAL_CALLS or (group and c.method == "sendMessage")]
    if group:
        final = "".join(m["text"] for m in tg.delivered if m["chat"]["id"] == chat_id)
        partial = len(shown) - 1  # the last edit put in the final reply
    else:
        final = "".join(str(c.params["text"]) for c in calls if c.method == "sendMessage")
        partial = len(shown)
    stored = stored_reply(runtime, "telegram", str(chat_id))
    times = llm.token_times[-1]
    # The first text the user sees: a draft or edit, or the real message of a reply that
    # was done before any partial was due.
    visible = [c for c in calls if c.method in PARTIAL_CALLS or c.method == "sendMessage"]
    first = visible[0].at - times[0] if visible else float("nan")
    name = "telegram-edit" if group else "telegram-draft"
    return Run(name, first, partial, times[-1] - times[0], final == stored, "[reply cut" in stored)


async def terminal_run(runtime: Runtime, llm: FakeOpenAIServer, index: int) -> Run:
    """One reply printed by the terminal channel as it grows."""
    out = TimedBuffer()
    channel = TerminalChannel(f"t{index}", stdin=io.StringIO(), stdout=out, interactive=False)
    runtime.dispatcher.attach(channel)
    try:
        await runtime.dispatcher(Inbound("terminal", f"t{index}", "go", message_id=str(index)))
    finally:
        runtime.dispatcher.detach(channel)
    stored = stored_reply(runtime, "terminal", f"t{index}")
    times = llm.token_times[-1]
    first = (out.first_write or float("nan")) - times[0]
    final = out.getvalue().rstrip("\n")
    return Run("terminal", first, 0, times[-1] - times[0], final == stored, "[reply cut" in stored)


async def bench_runs(runs: int, words: int, rate: float, cut_every: int) -> list[Run]:
    """`runs` streamed replies on each channel; every `cut_every`-th answer is cut."""
    results: list[Run] = []
    with (
        FakeOpenAIServer() as llm,
        FakeTelegramServer() as tg,
        tempfile.TemporaryDirectory() as tmp,
    ):
        config = bench_config(Path(tmp) / "data", llm.base_url)
        config.telegram.token = "123:BENCH"
        config.telegram.api_base_url = tg.base_url
        config.telegram.api_file_url = tg.file_url
        runtime = build_runtime(config, plugins=[default_plugin])
        try:
            async with telegram_running(runtime, tg):
                for index in range(runs * 3):
                    cut = cut_every > 0 and index % cut_every == cut_every - 1
                    llm.add(answer(words, rate, cut))
                    kind = index % 3
                    if kind == 2:
                        results.append(await terminal_run(runtime, llm, index))
                    else:
                        results.append(await telegram_run(runtime, tg, llm, index, kind == 1))
        finally:
            await runtime.dispatcher.stop()
            runtime.close()
    return results


def summary(results: list[Run], rate: float, words: int) -> dict[str, Any]:
    """Per channel: first visible text (median, max), calls per reply and per second of
    generation, and the share of runs whose final text is the stored reply."""
    channels: dict[str, Any] = {}
    for name in sorted({run.channel for run in results}):
        mine = [run for run in results if run.channel == name]
        firsts = [run.first_visible_s for run in mine]
        per_s = [run.partial_calls / max(run.generation_s, 1e-3) for run in mine]
        # After the first call (made at once, for the first text), the throttle's rate.
        after_first = [max(r.partial_calls - 1, 0) / max(r.generation_s, 1e-3) for r in mine]
        channels[name] = {
            "runs": len(mine),
            "cut_runs": sum(run.cut for run in mine),
            "first_visible_s_median": round(statistics.median(firsts), 3),
            "first_visible_s_max": round(max(firsts), 3),
            "target_s": TARGETS_S[name],
            "partial_calls_per_reply": round(statistics.mean(r.partial_calls for r in mine), 2),
            "partial_calls_per_s_max": round(max(per_s), 2),
            "calls_after_first_per_s_max": round(max(after_first), 2),
            "final_equals_stored": round(sum(r.identical for r in mine) / len(mine), 3),
        }
    return {"tokens_per_s": rate, "tokens_per_reply": words, "channels": channels}


def summary_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"stream bench: {result['tokens_per_reply']} tokens at {result['tokens_per_s']}/s"]
    for name, row in result["channels"].items():
        lines.append(
            f"  {name:15} first text {row['first_visible_s_median']:.3f} s (max "
            f"{row['first_visible_s_max']:.3f}, target <= {row['target_s']}) | "
            f"{row['partial_calls_per_reply']} calls/reply, <= {row['partial_calls_per_s_max']}/s"
            f" ({row['calls_after_first_per_s_max']}/s after the first)"
            f" | final == stored {row['final_equals_stored']:.0%} ({row['cut_runs']} cut)"
        )
    return lines


@click.command("stream")
@click.option("--runs", default=4, show_default=True, help="Replies per channel.")
@click.option("--tokens", default=40, show_default=True, help="Tokens per reply.")
@click.option("--rate", default=20.0, show_default=True, help="The fake model's tokens/s.")
@click.option("--cut-every", default=4, show_default=True, help="Every Nth answer cut half-way.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_stream(runs: int, tokens: int, rate: float, cut_every: int, as_json: bool) -> None:
    """Streamed replies: first visible text, platform calls, final text == stored."""
    results = asyncio.run(bench_runs(runs, tokens, rate, cut_every))
    result = summary(results, rate, tokens)
    echo_result(result, as_json, lambda: summary_lines(result))
