"""Running one sub-agent: its own small tool loop over the same model client and the same
tool round as a turn (`core.turn.tool_round`), within its budget (model calls, output
tokens, wall time) and its chat's concurrency limit, recorded as it starts and as it ends.

The child runs inside its parent's tool call, so cancelling the parent's turn cancels it
(recorded as `cancelled`). Only the result it returns enters the parent's history."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from core.api import TurnContext
from core.config import Config
from core.errors import LLMError
from core.model.client import LLM, ToolCall
from core.model.profile import load_profile, tools_enabled
from core.model.usage import complete_recorded
from core.storage.file_store import FileStore
from core.storage.store import SessionStore
from core.subagents.prompt import (
    START,
    cap_context,
    child_prompt,
    child_registry,
    inherited_history,
    policy,
)
from core.subagents.run_store import DatabaseSubagentRunStore, RunEnd, RunStart
from core.text import strip_think
from core.tools.registry import ToolRegistry
from core.tools.results import keep_tool_result
from core.tools.text_calls import strip_tool_text
from core.turn.loop_guard import RepeatGuard
from core.turn.tool_round import run_tool_round

logger = logging.getLogger(__name__)

USAGE_KIND = "subagent"
FOUND_CHARS = 1_500  # of each tool result quoted in a partial result


@dataclass
class ChildRun:
    """One child's conversation and spending as it runs."""

    run_id: int
    messages: list[dict[str, Any]]
    iterations: int = 0
    output_tokens: int = 0
    answer: str = ""
    stop: str = ""  # why it stopped early ("" while running or when it answered)
    found: list[str] = field(default_factory=list)  # its tool results, for a partial result


class SubagentRunner:
    """Runs children for the `spawn_agent` tool; one concurrency limit per chat."""

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        llm: LLM,
        tools: ToolRegistry,
        files: FileStore,
        runs: DatabaseSubagentRunStore,
    ) -> None:
        self.config = config
        self.store = store
        self.llm = llm
        self.tools = tools
        self.files = files
        self.runs = runs
        self._slots: dict[int, asyncio.Semaphore] = {}

    def slot(self, chat_id: int) -> asyncio.Semaphore:
        if chat_id not in self._slots:
            self._slots[chat_id] = asyncio.Semaphore(self.config.subagents.max_concurrent)
        return self._slots[chat_id]

    async def run(self, turn: TurnContext, task: str, context: str) -> str:
        """The child's result as the parent's tool result (marked partial when a budget ran
        out); waits for a free slot of the chat first."""
        async with self.slot(turn.chat.id):
            return await self._run(turn, task, context)

    async def _run(self, turn: TurnContext, task: str, context: str) -> str:
        settings = self.config.subagents
        context = cap_context(context, settings.max_context_chars)
        tools = child_registry(self.tools, turn.chat, settings)
        history = inherited_history(self.store, turn.chat, settings)
        prompt = child_prompt(self.config.agent.name, task, context, history)
        start = RunStart(turn.chat.id, turn.user_message_id or None, turn.tool_call_id, task,
                         context, policy(settings), tools.names)  # fmt: skip
        child = ChildRun(self.runs.start(start), [{"role": "system", "content": prompt}, START])
        try:
            async with asyncio.timeout(settings.wall_time_s):
                await self._loop(child, turn, tools)
        except TimeoutError:
            child.stop = f"its wall time of {settings.wall_time_s:g} s ran out"
        except asyncio.CancelledError:
            self._end(child, "cancelled", "the parent turn was cancelled", "")
            raise
        except LLMError as exc:
            logger.warning("sub-agent run #%d failed in %s: %s", child.run_id, turn.chat.key, exc)
            result = f"error: sub-agent run #{child.run_id} failed: {exc}"
            self._end(child, "failed", str(exc), result)
            return result
        result = self._result(child)
        self._end(child, "partial" if child.stop else "done", child.stop or "answered", result)
        return result

    async def _loop(self, child: ChildRun, turn: TurnContext, tools: ToolRegistry) -> None:
        """Model calls and tool rounds until the child answers or a budget is spent."""
        settings = self.config.subagents
        guard = RepeatGuard()
        profile = load_profile(self.store, self.llm.model)
        schemas = (tools.schemas() if tools_enabled(self.config.llm, profile) else []) or None
        while True:
            left = settings.max_tokens - child.output_tokens
            if child.iterations >= settings.max_iterations:
                child.stop = f"its budget of {settings.max_iterations} model calls is spent"
                return
            if left <= 0:
                child.stop = f"its budget of {settings.max_tokens} output tokens is spent"
                return
            completion = await complete_recorded(
                self.llm, self.store, turn.chat.id, USAGE_KIND, child.messages, schemas,
                max_tokens=min(left, self.config.llm.max_output_tokens),
            )  # fmt: skip
            child.iterations += 1
            child.output_tokens += completion.completion_tokens or len(completion.content) // 4
            if not completion.tool_calls:
                child.answer = strip_think(strip_tool_text(completion.content)[0])
                child.messages.append({"role": "assistant", "content": child.answer})
                if completion.finish_reason == "length":
                    child.stop = "its answer was cut at its output token budget"
                return
            fresh = guard.fresh(completion.tool_calls)
            child.messages += await self._tool_round(child, turn, tools, fresh)
            if len(fresh) < len(completion.tool_calls):
                child.stop = "it repeated a tool call"
                return

    async def _tool_round(
        self, child: ChildRun, turn: TurnContext, tools: ToolRegistry, calls: list[ToolCall]
    ) -> list[dict[str, Any]]:
        def keep(call: ToolCall, result: str) -> str:
            kept = keep_tool_result(self.config, self.files, turn.chat, call.id, call.name, result)
            child.found.append(f"{call.name}: {kept[:FOUND_CHARS]}")
            return kept

        return await run_tool_round(tools, turn, calls, len(calls), "", keep)

    def _result(self, child: ChildRun) -> str:
        """What the parent reads: the answer under a line naming the run; a partial result
        is marked as such, with what the child had found so far."""
        steps = f"{child.iterations} model call{'s' if child.iterations != 1 else ''}"
        if not child.stop:
            return f"[sub-agent run #{child.run_id}: done in {steps}]\n{child.answer or '(empty)'}"
        lines = [
            f"[sub-agent run #{child.run_id}: PARTIAL RESULT, stopped after {steps}: {child.stop}]"
        ]
        if child.answer:
            lines.append(child.answer)
        if child.found:
            lines.append("What it found so far:\n" + "\n".join(child.found[-3:]))
        if not child.answer and not child.found:
            lines.append("(nothing found yet)")
        return "\n".join(lines)

    def _end(self, child: ChildRun, status: str, reason: str, result: str) -> None:
        """Record how the run ended (its transcript without the system prompt's repeat)."""
        end = RunEnd(status, reason, result, child.messages, child.iterations, child.output_tokens)
        self.runs.finish(child.run_id, end)
