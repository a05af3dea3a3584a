"""One round of tool calls: the assistant message that carries them and their results, run
concurrently within what is left of a budget. The turn loop (`core.turn.agent`) and a
sub-agent's loop (`core.subagents.runner`) both run their tools through it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from core.api import TurnContext
from core.model.client import ToolCall
from core.tools.registry import ToolRegistry

# What a result becomes in the conversation (offloaded to a file and capped, or as it is).
KeepResult = Callable[[ToolCall, str], str]


async def run_tool_round(
    tools: ToolRegistry,
    turn: TurnContext,
    calls: list[ToolCall],
    allowed: int,
    refusal: str,
    keep: KeepResult,
) -> list[dict[str, Any]]:
    """The assistant message carrying `calls` (content "", never null: llama-cpp-python
    refuses null) and their results in call order; nothing when `calls` is empty.

    The calls of one response are independent, so they run concurrently, each seeing its
    own id in `turn.tool_call_id`; those past the first `allowed` are not run and get
    `refusal`, an error the model can read."""
    if not calls:
        return []
    messages: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "tool_calls": [call.to_openai() for call in calls]}
    ]
    ran = await asyncio.gather(
        *(
            tools.execute(call.name, call.arguments, replace(turn, tool_call_id=call.id))
            for call in calls[: max(0, allowed)]
        )
    )
    results = [*ran, *[refusal] * (len(calls) - len(ran))]
    for call, result in zip(calls, results, strict=True):
        messages.append({"role": "tool", "tool_call_id": call.id, "content": keep(call, result)})
    return messages
