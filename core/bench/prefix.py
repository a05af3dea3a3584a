"""`mnemo bench prefix`: how much of each request repeats the previous one (fake model).

prefix: 40 scripted turns, a new memory saved before each; for consecutive model requests,
the share of the later request (characters of its serialized messages) equal to the earlier
request's prefix, for this layout, for one with memory in the system prompt, for an
append-only layout (each turn's block kept in the history, showing only what no earlier
block showed), and with no memory at all. The memory plugin registers the command with its
real memory store; `--stand-in` uses growing notes instead.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from core.api import ContextSection, Extension, Inbound, TurnContext
from core.bench.support import (
    TOPICS,
    bench_agent,
    echo_result,
    scripted_reply,
    scripted_user_message,
)
from core.config import Config
from core.context import render_dynamic
from core.db import Connection
from core.summary import SUMMARY_MARKER
from core.testing.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.turn import Agent

DYNAMIC_START = "Context for this reply"


@dataclass
class BenchMemory:
    """The memory the prefix benchmark saves to every turn: an extension and a save function."""

    name: str
    extension: Extension
    save: Callable[[int, str], None]


MemoryFactory = Callable[[Config, Connection], BenchMemory]


class GrowingNotes(Extension):
    """Stand-in memory: every saved note is shown in one growing dynamic section."""

    name = "bench-notes"

    def __init__(self) -> None:
        self.notes: list[str] = []

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        text = "\n".join(f"- {note}" for note in self.notes)
        return [ContextSection("memories", "bench", text, priority=60)] if text else []


def growing_notes_memory(config: Config, conn: Connection) -> BenchMemory:
    notes = GrowingNotes()
    return BenchMemory(
        "bench notes (stand-in)", notes, lambda chat_id, text: notes.notes.append(text)
    )


def common_prefix_share(earlier: str, later: str) -> float:
    """Share of `later` (in characters) that equals the start of `earlier`."""
    limit = min(len(earlier), len(later))
    low, high = 0, limit
    while low < high:  # binary search on the longest common prefix
        middle = (low + high + 1) // 2
        if earlier[:middle] == later[:middle]:
            low = middle
        else:
            high = middle - 1
    return low / len(later) if later else 1.0


Messages = list[dict[str, Any]]
Layout = Callable[[int, Messages], Messages]  # (turn number, request messages) -> laid out


def is_dynamic(index: int, message: dict[str, Any]) -> bool:
    """Whether the message at `index` of a request is the dynamic-context block."""
    return bool(
        index and message["role"] == "system" and str(message["content"]).startswith(DYNAMIC_START)
    )


def memory_in_system_prompt(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same request laid out with the dynamic block appended to the system prompt."""
    moved = [dict(message) for message in messages]
    for index, message in enumerate(moved):
        if is_dynamic(index, message):
            del moved[index]
            moved[0]["content"] = f"{moved[0]['content']}\n\n{message['content']}"
            break
    return moved


def without_memory(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same request with no dynamic block at all (the ceiling for this conversation)."""
    return [message for index, message in enumerate(messages) if not is_dynamic(index, message)]


_SECTION = re.compile(r'<([\w-]+) source="([^"]*)">\n(.*?)\n</\1>', re.S)


class AppendOnlyBlocks:
    """The same requests if each turn's dynamic block stayed in the history (append-only).

    Each turn's block shows only the lines (memories, notes) that no earlier block since
    the last compaction showed, and sits before that turn's user message in every later
    request. Issue #2 rules this layout out ("never persisted"); it is measured to show
    what persisting would buy.
    """

    def __init__(self, turns: list[TurnRequests]) -> None:
        self.blocks: list[str] = []
        shown: dict[str, set[str]] = {}
        for turn in turns:
            if turn.compacted:
                shown = {}
            first = turn.requests[0]["messages"] if turn.requests else []
            block = next((m["content"] for i, m in enumerate(first) if is_dynamic(i, m)), "")
            self.blocks.append(self._delta(str(block), shown))

    @staticmethod
    def _delta(block: str, shown: dict[str, set[str]]) -> str:
        sections = []
        for key, source, text in _SECTION.findall(block):
            seen = shown.setdefault(key, set())
            lines = [line for line in text.split("\n") if line not in seen and line.strip()]
            lines = [line for line in lines if not line.startswith("(+")]  # "N more" notes
            seen.update(lines)
            sections.append(ContextSection(key, source, "\n".join(lines)))
        return render_dynamic(sections)

    def layout(self, turn: int, messages: Messages) -> Messages:
        users = [index for index, message in enumerate(messages) if message["role"] == "user"]
        laid: Messages = []
        for index, message in enumerate(messages):
            if is_dynamic(index, message):
                continue
            if message["role"] == "user":
                block = self.blocks[turn - (len(users) - 1 - users.index(index))]
                if block:
                    laid.append({"role": "system", "content": block})
            laid.append(message)
        return laid


def serialized(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False)


@dataclass(frozen=True)
class TurnRequests:
    requests: list[dict[str, Any]]  # the model requests of the turn (summaries excluded)
    compacted: bool


async def run_turns(
    agent: Agent,
    server: FakeOpenAIServer,
    turns: int,
    before_turn: Callable[[int, int], None] | None = None,
) -> list[TurnRequests]:
    """Send `turns` scripted user messages to one chat; group the model requests by turn."""
    chat = agent.store.get_or_create_chat("bench", "chat-1")
    results: list[TurnRequests] = []
    for turn in range(turns):
        if before_turn is not None:
            before_turn(chat.id, turn)
        start = len(server.requests)
        compactions = agent.store.session(chat.id).compaction_count
        await agent.handle(Inbound("bench", "chat-1", scripted_user_message(turn)))
        requests = [
            request
            for request in server.requests[start:]
            if not request["messages"][0]["content"].startswith(SUMMARY_MARKER)
        ]
        compacted = agent.store.session(chat.id).compaction_count != compactions
        results.append(TurnRequests(requests, compacted))
    return results


def mean_prefix_share(turns: list[TurnRequests], layout: Layout) -> tuple[float, int]:
    """Mean share over consecutive request pairs whose later request is in no compaction turn."""
    shares: list[float] = []
    previous: str | None = None
    for number, turn in enumerate(turns):
        for request in turn.requests:
            current = serialized(layout(number, request["messages"]))
            if previous is not None and not turn.compacted:
                shares.append(common_prefix_share(previous, current))
            previous = current
    return (sum(shares) / len(shares) if shares else 0.0), len(shares)


def prefix_responder(request: dict[str, Any]) -> FakeReply:
    """Every fifth user message gets a tool call first, so turns have several requests."""
    messages = request["messages"]
    last = messages[-1]
    users = sum(message["role"] == "user" for message in messages)
    if (
        last["role"] == "user"
        and users % 5 == 0
        and not messages[0]["content"].startswith(SUMMARY_MARKER)
    ):
        return FakeReply(tool_calls=[tool_call("get_current_time", {}, f"call_{users}")])
    return scripted_reply(request)


async def prefix_bench(memory_factory: MemoryFactory, turns: int = 40) -> dict[str, Any]:
    memories: list[BenchMemory] = []

    def extensions(config: Config, conn: Connection) -> list[Extension]:
        memories.append(memory_factory(config, conn))
        return [memories[0].extension]

    with (
        FakeOpenAIServer(prefix_responder) as server,
        bench_agent(server, None, extensions) as agent,
    ):

        def save(chat_id: int, turn: int) -> None:
            topic = TOPICS[turn % len(TOPICS)]
            memories[0].save(
                chat_id,
                f"In turn {turn} the user said item {turn * 7 % 31} of {topic}"
                f" cost {turn * 13 % 97} euros.",
            )

        await agent.extensions.start()
        results = await run_turns(agent, server, turns, save)
    ours, pairs = mean_prefix_share(results, lambda _turn, messages: messages)
    system, _ = mean_prefix_share(results, lambda _turn, m: memory_in_system_prompt(m))
    append_only, _ = mean_prefix_share(results, AppendOnlyBlocks(results).layout)
    ceiling, _ = mean_prefix_share(results, lambda _turn, m: without_memory(m))
    return {
        "turns": turns,
        "requests": sum(len(turn.requests) for turn in results),
        "pairs": pairs,
        "compaction_turns": sum(turn.compacted for turn in results),
        "memory": memories[0].name,
        "share_memory_before_newest": round(ours, 4),
        "share_memory_in_system_prompt": round(system, 4),
        "share_append_only_blocks": round(append_only, 4),
        "share_without_any_memory": round(ceiling, 4),
    }


PREFIX_FIGURES = (
    ("memory before the newest message (Mnemo)", "share_memory_before_newest"),
    ("memory in the system prompt", "share_memory_in_system_prompt"),
    ("append-only blocks (persisted; not allowed)", "share_append_only_blocks"),
    ("no memory at all (ceiling)", "share_without_any_memory"),
)


def prefix_command(memory_factory: MemoryFactory | None = None) -> click.Command:
    """`mnemo bench prefix`, saving memories through `memory_factory` (else stand-in notes)."""

    @click.command("prefix")
    @click.option("--turns", default=40, show_default=True, help="Scripted turns.")
    @click.option("--stand-in", is_flag=True, help="Use growing notes, not the memory store.")
    @click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
    def bench_prefix(turns: int, stand_in: bool, as_json: bool) -> None:
        """Prefix stability of requests while a memory is saved every turn (fake model)."""
        factory = memory_factory if memory_factory and not stand_in else growing_notes_memory
        result = asyncio.run(prefix_bench(factory, turns))
        echo_result(result, as_json, lambda: prefix_lines(result))

    return bench_prefix


def prefix_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        f"prefix: {result['turns']} turns, {result['requests']} model requests,"
        f" {result['pairs']} request pairs counted ({result['compaction_turns']} compaction"
        f" turns left out); memory: {result['memory']}",
        "mean share of a request equal to the previous request's prefix:",
    ]
    lines += [f"  {label:<44} {result[key]:.4f}" for label, key in PREFIX_FIGURES]
    return lines
