"""Request-time pruning (the stored history never changes) and big tool results as files."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import ContextSection, Extension, Inbound, Tool, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.chat.files import chat_dir, chat_prefix, safe_path_part
from core.config import Config
from core.context.pruning import (
    Fill,
    FillLevels,
    fill_start,
    protected_start,
    prune_before,
    prune_request,
)
from core.context.request import render_dynamic
from core.model.tokens import TokenEstimator
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config, storage_url: str) -> Iterator[Runtime]:
    """On each engine: big tool results are files, or `stored_files` rows on PostgreSQL."""
    config.storage.url = storage_url
    rt = light_runtime(config)
    yield rt
    rt.close()


def _turns(count: int, result_chars: int = 1_000) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "prefix"}]
    for n in range(count):
        messages += [
            {"role": "user", "content": f"question {n}"},
            {
                "role": "assistant",
                "content": f"<think>planning {n}</think>let me look",
                "reasoning_content": "r" * 50,
                "tool_calls": [{"id": f"c{n}", "type": "function", "function": {"name": "t"}}],
            },
            {"role": "tool", "tool_call_id": f"c{n}", "content": f"{n}" * result_chars},
            {"role": "assistant", "content": f"answer {n}"},
        ]
    return messages


def test_old_tool_results_become_stubs_and_recent_turns_stay() -> None:
    messages = _turns(7)
    original = copy.deepcopy(messages)
    pruned, stats = prune_request(messages, protect_turns=5)
    assert messages == original  # the input (what was stored) is untouched
    tools = [m for m in pruned if m["role"] == "tool"]
    assert [m["content"].endswith("[pruned: 800 chars]") for m in tools] == [True] * 2 + [False] * 5
    assert tools[0]["content"].startswith("0" * 200)
    assert stats.tool_results_pruned == 2
    old_assistant = pruned[2]
    assert "reasoning_content" not in old_assistant
    assert old_assistant["content"] == "let me look"
    assert old_assistant["tool_calls"] == original[2]["tool_calls"]
    assert pruned[-3]["content"].startswith("<think>")  # protected turn keeps its reasoning
    assert len(pruned) == len(messages)


@pytest.mark.parametrize("tag", ["think", "thinking", "REASONING"])
def test_every_reasoning_tag_strip_think_knows_is_pruned(tag: str) -> None:
    messages = _turns(7)
    messages[2]["content"] = f"<{tag}>planning</{tag}>let me look"
    pruned, stats = prune_request(messages, protect_turns=5)
    assert pruned[2]["content"] == "let me look"
    assert stats.reasoning_dropped == 2


def test_protected_start_counts_user_turns_from_the_end() -> None:
    messages = _turns(3)
    assert protected_start(messages, 1) == len(messages) - 4
    assert protected_start(messages, 3) == 1
    assert protected_start(messages, 10) == 0
    assert protected_start(messages, 0) == len(messages)


def test_small_tool_results_are_not_stubbed() -> None:
    pruned, stats = prune_request(_turns(3, result_chars=150), protect_turns=1)
    assert not stats.tool_results_pruned
    assert all("[pruned" not in str(m.get("content")) for m in pruned)


class ReportTool(Extension):
    name = "reports"

    def __init__(self, chars: int) -> None:
        self.chars = chars

    def tools(self) -> list[Tool]:
        async def fetch(turn: TurnContext, args: dict[str, Any]) -> str:
            return "".join(f"line {n:05d} of the report\n" for n in range(self.chars // 24 + 1))

        return [Tool("fetch_report", "fetch the report", fetch)]


def _script_tool_turns(server: FakeOpenAIServer, turns: int) -> None:
    for n in range(turns):
        server.add(
            FakeReply(tool_calls=[tool_call("fetch_report", {"n": n}, f"call_{n}")]),
            FakeReply(content=f"summary {n}"),
        )


async def test_pruning_changes_requests_but_never_the_stored_history(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config = runtime.config
    config.llm.context_window = 8_000
    config.llm.max_output_tokens = 1_000
    config.context.protect_turns = 2
    config.context.compaction_threshold = 0.95
    runtime.extensions.add(ReportTool(2_400))
    _script_tool_turns(fake_llm, 12)
    for n in range(12):
        await runtime.agent.handle(Inbound("terminal", "p", f"report {n} please"))
    last = fake_llm.requests[-1]["messages"]
    pruned = ["[pruned:" in m["content"] for m in last if m["role"] == "tool"]
    assert len(pruned) == 12 and pruned[0]  # the oldest result is a stub ...
    assert pruned == sorted(pruned, reverse=True)  # ... the stubs are the oldest ones
    assert not any(pruned[-3:])  # the protected turns' (and this turn's) are whole
    stored = [m.content for m in runtime.store.messages_between(1, 0, 999) if m.role == "tool"]
    assert len(stored) == 12
    assert all(len(content) >= 2_400 and "[pruned" not in content for content in stored)


async def test_big_tool_result_is_stored_as_a_file_and_can_be_read_back(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    runtime.config.context.tool_result_max_chars = 1_000
    runtime.extensions.add(ReportTool(20_000))
    fake_llm.add(FakeReply(tool_calls=[tool_call("fetch_report", {}, "call_big")]))

    def read_back(request: dict[str, Any]) -> FakeReply:
        excerpt = request["messages"][-1]["content"]
        if "stored in full at " not in excerpt:
            return FakeReply(content="read it")
        path = excerpt.split("stored in full at ", 1)[1].split(";", 1)[0]
        return FakeReply(tool_calls=[tool_call("read_tool_result", {"path": path, "offset": 24})])

    fake_llm.responder = read_back
    reply = await runtime.agent.handle(Inbound("terminal", "big", "fetch the big report"))
    assert reply is not None and reply.text == "read it"
    chat = runtime.store.find_chat("terminal", "big")
    assert chat is not None
    files = runtime.agent.files
    [path] = files.list(f"{chat_prefix(chat)}/tool-results")
    assert len(files.read_text(path) or "") >= 20_000
    if runtime.storage.engine == "sqlite":  # a file an operator can open, as before
        [on_disk] = (chat_dir(runtime.config, chat) / "tool-results").iterdir()
        assert files.location(path) == str(on_disk.resolve())
    excerpt, read = [m.content for m in runtime.store.history(chat.id) if m.role == "tool"]
    assert "stored in full at tool-results/" in excerpt and len(excerpt) < 1_000
    assert "line 00000" in excerpt and "[truncated:" in excerpt
    assert read.startswith("[tool-results/") and "line 00001 of the report" in read


@pytest.mark.parametrize(
    "path", ["../../mnemo.db", "tool-results/../../other/tool-results/x.txt", "AGENTS.md", ""]
)
async def test_read_tool_result_refuses_paths_outside_the_chat(
    runtime: Runtime, fake_llm: FakeOpenAIServer, path: str
) -> None:
    other = runtime.store.get_or_create_chat("terminal", "other")
    runtime.agent.files.write_text(f"{chat_prefix(other)}/tool-results/x.txt", "another chat's")
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("read_tool_result", {"path": path}, "c1")]),
        FakeReply(content="ok"),
    )
    await runtime.agent.handle(Inbound("terminal", "evil", "read the db"))
    tool_message = fake_llm.requests[-1]["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["content"].startswith("error: path must be a file under tool-results/")


def test_chat_dir_encoding_matches_file_memory(tmp_path: Path) -> None:
    from urllib.parse import unquote

    from memory.files import safe_segment

    for text in ["local", "-100123:42", "..", ".hidden", "a/b\\c", "Ünï code", "", "x" * 200]:
        part = safe_path_part(text)
        assert part == safe_segment(text)
        assert "/" not in part and "\\" not in part and "." not in part
    assert unquote(safe_path_part("-100123:42")) == "-100123:42"


def _chat_with_blocks(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "prefix"}]
    for n in range(turns):
        block = render_dynamic(
            [
                ContextSection("memories", "m", f"fact {n}"),
                ContextSection("recalled", "r", "x" * 400),
            ]
        )
        messages.append({"role": "system", "content": block})
        messages.append({"role": "user", "content": f"question {n} " + "u" * 300})
        messages.append({"role": "assistant", "content": f"answer {n} " + "a" * 300})
    return messages[:-1]  # the newest question is being answered


LEVELS = FillLevels(fixed=0, prune=1_200, compact=1_500)
ESTIMATOR = TokenEstimator(4.0)


def test_the_remembered_boundary_is_the_one_a_replay_finds() -> None:
    """A new process replays the boundaries from the history alone and finds where the
    last request sent had them, so its first request still starts with that one."""
    remembered: Fill | None = None
    for turns in range(1, 40):
        messages = _chat_with_blocks(turns)
        remembered = fill_start(messages, 2, ESTIMATOR, LEVELS, True, remembered)
        assert fill_start(messages, 2, ESTIMATOR, LEVELS, True) == remembered, turns


def test_a_move_drops_older_blocks_recalled_lines_on_a_small_window_only() -> None:
    """A small window's move shortens the old turns and drops the recalled lines of the
    blocks before the newest turn's; a larger one keeps texts and recalled lines (later
    questions find what earlier blocks recalled), so a chat without tool results or
    reasoning has nothing to prune there and nothing moves."""
    messages = _chat_with_blocks(6)
    fill = fill_start(messages, 2, ESTIMATOR, LEVELS, small_window=True)
    assert 0 < fill.start < fill.recalled_until
    pruned, _ = prune_before(messages, fill.start, True, fill.recalled_until)
    kept = [m["content"] for m in pruned if m["role"] == "system"][1:]
    stripped = sum(1 for m in messages[: fill.recalled_until] if m["role"] == "system") - 1
    assert ["<recalled" in block for block in kept] == [False] * stripped + [True] * (
        len(kept) - stripped
    )
    assert fill_start(messages, 2, ESTIMATOR, LEVELS, small_window=False) == Fill()


def test_nothing_moves_while_the_request_fits() -> None:
    messages = _chat_with_blocks(2)
    assert fill_start(messages, 2, ESTIMATOR, LEVELS, True) == Fill()
    pruned, stats = prune_before(messages, 0, True, 0)
    assert pruned == messages and not stats.pruned
