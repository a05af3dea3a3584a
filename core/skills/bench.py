"""`mnemo bench skills`: what N installed skills add to a turn.

- the scan at each turn: cold (a fresh process parses every SKILL.md), warm (nothing
  changed: one listing with stamps), and after one skill was edited; p50/p95 in ms;
- the request: the skills list's size, and the first request of a chat with and without
  the skills (the fake model server's four-characters-a-token count); the second turn's
  request shows the list is not sent again (the dynamic block adds only new lines).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, prompt_tokens_of
from core.bench.support import bench_agent, echo_result, scripted_reply
from core.model.tokens import estimate_tokens
from core.skills.catalog import SkillCatalog, scope_dir
from core.skills.extension import SkillsExtension, render_skills
from core.storage.file_store import DirectoryFileStore, FileStore

TOPICS = ("pdf", "spreadsheet", "invoice", "travel", "recipe", "git", "email", "budget")


BENCH_CHANNEL = "mnemo-bench"  # a database's own global skills are left alone


def write_skills(files: FileStore, count: int, directory: str = "skills/") -> None:
    """`count` skills like the ones people install: a one-line description, ~2 KB of
    instructions and two extra files each."""
    for number in range(count):
        topic = TOPICS[number % len(TOPICS)]
        name = f"{topic}-helper-{number}"
        description = (
            f"Work with {topic} tasks (number {number}): create, check and convert them, "
            "and explain the result step by step. Use when the user mentions a "
            f"{topic} or asks for help with one."
        )
        body = "\n".join(f"{i}. Step {i} of handling a {topic}: check inputs." for i in range(60))
        folder = f"{directory}{name}/"
        files.write_text(
            f"{folder}SKILL.md", f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"
        )
        files.write_text(f"{folder}reference.md", f"# {topic} reference\n" + "detail\n" * 100)
        files.write_text(f"{folder}scripts/check.py", "print('never run by Mnemo')\n")


def _named_only(section: str) -> int:
    tail = section.rpartition("\n- more skills (read_skill gives their descriptions): ")[2]
    return len(tail.split(", ")) if "\n- more skills (" in section else 0


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 3), "p95_ms": round(p95 * 1000, 3)}


def measure_scans(files: FileStore, turns: int, channel: str = "telegram") -> dict[str, Any]:
    cold: list[float] = []
    for _ in range(5):
        started = time.perf_counter()
        SkillCatalog(files).for_chat(channel, "42")
        cold.append(time.perf_counter() - started)
    catalog = SkillCatalog(files)
    catalog.for_chat(channel, "42")
    warm: list[float] = []
    for _ in range(turns):
        started = time.perf_counter()
        catalog.for_chat(channel, "42")
        warm.append(time.perf_counter() - started)
    edited: list[float] = []
    path = catalog.for_chat(channel, "42")[0][0].path
    for round_ in range(5):
        files.write_text(path, (files.read_text(path) or "") + f"\nEdited {round_}.\n")
        started = time.perf_counter()
        catalog.for_chat(channel, "42")
        edited.append(time.perf_counter() - started)
    return {"cold": _ms(cold), "warm": _ms(warm), "one_edited": _ms(edited)}


async def measure_requests(count: int, window: int) -> dict[str, Any]:
    with FakeOpenAIServer(responder=scripted_reply) as server:
        extensions: list[SkillsExtension] = []

        def factory(config: Any, conn: Any) -> list[Any]:
            extensions.append(
                SkillsExtension(config.skills, DirectoryFileStore(config.storage.data_dir))
            )
            return extensions

        with bench_agent(server, window, factory) as agent:
            await agent.handle(Inbound("bench", "before", "Hello, can you help me?"))
            write_skills(extensions[0].catalog.files, count)
            await agent.handle(Inbound("bench", "after", "Hello, can you help me?"))
            await agent.handle(Inbound("bench", "after", "And one more thing, please."))
            skills, _ = extensions[0].catalog.for_chat("bench", "after")
            section = render_skills(skills, agent.config.skills.list_max_chars)
        tokens = [prompt_tokens_of(request) for request in server.requests]
    return {
        "section_chars": len(section),
        "section_tokens_estimate": estimate_tokens(section),
        "skills_described": section.count("\n- ") - ("\n- more skills" in section),
        "skills_named_only": _named_only(section),
        "first_request_tokens_without": tokens[0],
        "first_request_tokens_with": tokens[1],
        "added_tokens_first_turn": tokens[1] - tokens[0],
        "second_turn_request_tokens": tokens[2],
    }


def scans_on_database(url: str, count: int, turns: int) -> dict[str, Any]:
    """`measure_scans` on the file store of the database at `url` (rows of stored_files)."""
    from core.config import StorageConfig
    from core.storage.engine import open_storage
    from core.storage.stores import file_store

    storage = open_storage(StorageConfig(url=url))
    files = file_store(storage, Path("."))
    directory = scope_dir("channel", BENCH_CHANNEL)
    try:
        write_skills(files, count, directory)
        return measure_scans(files, turns, BENCH_CHANNEL)
    finally:
        files.delete_tree(directory)
        storage.close()


@click.command("skills")
@click.option("--skills", "count", default=50, show_default=True, help="Skills installed.")
@click.option("--turns", default=200, show_default=True, help="Warm scans timed.")
@click.option("--window", default=32_768, show_default=True, help="The model's context window.")
@click.option(
    "--storage-url",
    default="",
    help="Scan skills kept in this PostgreSQL database (under the channel scope "
    f"'{BENCH_CHANNEL}', deleted afterwards) instead of a temporary data dir.",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_skills(count: int, turns: int, window: int, storage_url: str, as_json: bool) -> None:
    """What COUNT installed skills add to a turn: scan time (cold, warm, one edited) and
    request size."""
    if storage_url:
        scans = scans_on_database(storage_url, count, turns)
    else:
        with tempfile.TemporaryDirectory(prefix="mnemo-bench-skills-") as tmp:
            files = DirectoryFileStore(Path(tmp))
            write_skills(files, count)
            scans = measure_scans(files, turns)
    requests = asyncio.run(measure_requests(count, window))
    engine = "postgresql" if storage_url else "data dir"
    result = {
        "skills": count,
        "store": engine,
        "window": window,
        "scan": scans,
        "request": requests,
    }

    def lines() -> list[str]:
        return [
            f"{count} skills installed ({engine})",
            *(
                f"scan {kind}: p50 {v['p50_ms']} ms, p95 {v['p95_ms']} ms"
                for kind, v in scans.items()
            ),
            *(f"{key}: {value}" for key, value in requests.items()),
        ]

    echo_result(result, as_json, lines)
