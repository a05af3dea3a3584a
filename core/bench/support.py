"""What the core's benchmarks share: a scripted chat, a bench agent, printing results."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from core.api import Extension
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config, load_config
from core.context.summary import is_summary_request
from core.model.client import OpenAILLM
from core.storage.database import SqliteDatabase
from core.storage.db import Connection, connect
from core.storage.engine import sqlite_storage
from core.storage.session_store import DatabaseSessionStore
from core.turn.agent import Agent
from core.turn.assembly import build_agent
from core.turn.builtins import CoreExtension

TOPICS = (
    "the database migration for the billing service",
    "the trip to Lisbon in May with two kids",
    "the quarterly report for the marketing team",
    "the home network with a new router and a NAS",
    "the vegetable garden plan for the spring",
)

BENCH_SUMMARY = (
    "## Goal\nKeep helping with the user's projects.\n## Constraints and preferences\nnone\n"
    "## Progress\nDone: earlier turns reviewed.\n## Key decisions\nnone\n"
    "## Next steps\nContinue.\n## Critical context\nreports are fetched with fetch_report"
)

ExtensionsFactory = Callable[[Config, Connection], list[Extension]]


def bench_config(data_dir: Path, base_url: str, window: int | None = None) -> Config:
    config = load_config(None, env={})
    config.storage.data_dir = data_dir
    config.llm.base_url = base_url
    config.llm.model = "fake-model"
    config.llm.max_retries = 0
    config.llm.timeout_s = 30
    config.llm.context_window = window
    return config


@contextmanager
def bench_agent(
    server: FakeOpenAIServer, window: int | None, extensions: ExtensionsFactory
) -> Iterator[Agent]:
    """An agent with the built-ins and `extensions` on a temporary database."""
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-") as tmp:
        config = bench_config(Path(tmp) / "data", server.base_url, window)
        conn = connect(config.storage.database_path)
        try:
            store = DatabaseSessionStore(SqliteDatabase(conn))
            agent = build_agent(config, sqlite_storage(conn), store, OpenAILLM(config.llm), [])
            core = CoreExtension(
                config, store, agent.extensions, agent.compactor, agent.planner, agent.files
            )
            agent.extensions.add(core)  # the built-ins, without the plugin (it registers us)
            for extension in extensions(config, conn):
                agent.extensions.add(extension)
            yield agent
        finally:
            conn.close()


def scripted_user_message(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    return (
        f"Turn {turn}: let's continue with {topic}. Yesterday I checked item {turn * 7 % 31} "
        f"and it cost {turn * 13 % 97} euros; what should I do next, and is there anything "
        "I forgot from what we agreed before?"
    )


def scripted_reply(request: dict[str, Any]) -> FakeReply:
    """The fake model of the benchmarks: a summary when asked, else a plain answer."""
    messages = request["messages"]
    if is_summary_request(messages):
        return FakeReply(content=BENCH_SUMMARY)
    last = messages[-1]
    if last["role"] == "tool":
        return FakeReply(content=f"I read the result ({len(last['content'])} chars); all fine.")
    text = str(last.get("content") or "")[:60]
    return FakeReply(
        content=f"About '{text}': here is a plan in three steps. First, write down what changed; "
        "second, compare it with what we agreed; third, decide the next small action and a "
        "date for it. I will remember the details you gave."
    )


def echo_result(result: dict[str, Any], as_json: bool, lines: Callable[[], list[str]]) -> None:
    """Print a benchmark's result: the JSON object, or its lines of text."""
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for line in lines():
        click.echo(line)


def choice_option(
    flag: str, choices: Sequence[str], help_text: str, dest: str | None = None
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A bench's `--flag` among `choices`, the first the default (shown in --help)."""
    names = [flag] if dest is None else [flag, dest]
    return click.option(
        *names, type=click.Choice(list(choices)), default=choices[0], show_default=True,
        help=help_text,
    )  # fmt: skip
