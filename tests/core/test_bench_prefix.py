"""The prefix benchmark's arithmetic and layouts (figures are measured by `mnemo bench prefix`)."""

from __future__ import annotations

from typing import Any

import pytest

from core.api import ContextSection
from core.bench.prefix import (
    AppendOnlyBlocks,
    TurnRequests,
    common_prefix_share,
    growing_notes_memory,
    memory_in_system_prompt,
    prefix_bench,
    without_memory,
)
from core.context import render_dynamic


def block(*lines: str) -> dict[str, Any]:
    text = render_dynamic([ContextSection("memories", "store", "\n".join(lines))])
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def reply(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


SYSTEM = {"role": "system", "content": "You are Mnemo."}


def test_common_prefix_share_counts_the_later_requests_characters() -> None:
    assert common_prefix_share("abcdef", "abcxyz") == pytest.approx(3 / 6)
    assert common_prefix_share("abc", "abcdefghij") == pytest.approx(3 / 10)
    assert common_prefix_share("abc", "xbc") == 0.0
    assert common_prefix_share("abc", "") == 1.0


def test_layouts_move_or_drop_the_dynamic_block() -> None:
    messages = [SYSTEM, user("hi"), reply("hello"), block("[PROFILE] likes tea"), user("tea?")]
    moved = memory_in_system_prompt(messages)
    assert len(moved) == 4 and "likes tea" in moved[0]["content"]
    assert messages[0] == SYSTEM  # the recorded request is not changed
    assert without_memory(messages) == [SYSTEM, user("hi"), reply("hello"), user("tea?")]


def test_append_only_blocks_keep_each_turns_block_and_show_only_new_lines() -> None:
    turn0 = [SYSTEM, block("[PROFILE] likes tea"), user("first")]
    turn1 = [
        SYSTEM,
        user("first"),
        reply("ok"),
        block("[PROFILE] likes tea", "[EVENT] moved"),
        user("second"),
    ]
    turns = [TurnRequests([{"messages": turn0}], False), TurnRequests([{"messages": turn1}], False)]
    blocks = AppendOnlyBlocks(turns)
    assert "likes tea" in blocks.blocks[0] and "moved" not in blocks.blocks[0]
    assert "moved" in blocks.blocks[1] and "likes tea" not in blocks.blocks[1]
    first, second = blocks.layout(0, turn0), blocks.layout(1, turn1)
    assert [m["role"] for m in second] == [
        "system",
        "system",
        "user",
        "assistant",
        "system",
        "user",
    ]
    assert second[: len(first)] == first  # the later request starts with the whole earlier one


async def test_prefix_bench_orders_the_layouts() -> None:
    result = await prefix_bench(growing_notes_memory, turns=6)
    assert result["turns"] == 6 and result["pairs"] == result["requests"] - 1
    ours = result["share_memory_before_newest"]
    assert 0 < result["share_memory_in_system_prompt"] < ours < 1
    assert ours < result["share_append_only_blocks"] <= result["share_without_any_memory"] + 0.01
