"""The sub-agents extension: the `spawn_agent` tool, the recent runs with their provenance
for `/context` and `mnemo inspect`, and the runs as part of a chat's data (export, delete)."""

from __future__ import annotations

from typing import Any

from core.api import Chat, ChatDataSection, Extension, Tool, TurnContext
from core.errors import ToolError
from core.subagents.prompt import SPAWN_TOOL
from core.subagents.run_store import DatabaseSubagentRunStore, SubagentRun
from core.subagents.runner import SubagentRunner

REPORT_RUNS = 5
TASK_CHARS = 80
SPAWN_DESCRIPTION = (
    "Hand a self-contained side task (research, reading, comparing) to a sub-agent and get "
    "its result. It sees nothing of this conversation: put everything it needs in `context`. "
    "It has read-only tools only and a small budget."
)
SPAWN_PARAMETERS = {
    "type": "object",
    "properties": {
        "task": {"type": "string", "description": "what the sub-agent must do, in full"},
        "context": {"type": "string", "description": "facts and material it needs"},
    },
    "required": ["task"],
}


class SubagentsExtension(Extension):
    """`spawn_agent` and the stored runs."""

    name = "subagents"

    def __init__(self, runner: SubagentRunner, runs: DatabaseSubagentRunStore) -> None:
        self.runner = runner
        self.runs = runs

    def tools(self) -> list[Tool]:
        if not self.runner.config.subagents.enabled:
            return []
        return [Tool(SPAWN_TOOL, SPAWN_DESCRIPTION, self.spawn, SPAWN_PARAMETERS)]

    async def spawn(self, turn: TurnContext, args: dict[str, Any]) -> str:
        task = str(args.get("task") or "").strip()
        if not task:
            raise ToolError("task must not be empty")
        context = args.get("context") or ""
        if not isinstance(context, str):
            raise ToolError("context must be a string")
        return await self.runner.run(turn, task, context.strip())

    def report_lines(self, chat: Chat) -> list[str]:
        recent = self.runs.recent(chat.id, REPORT_RUNS)
        if not recent:
            return []
        return [
            "sub-agent runs (newest first; only their results entered the history):",
            *(f"  - {run_line(run)}" for run in recent),
        ]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return {"sub-agent runs": self.runs.count(chat.id)}

    def export_chat(self, chat: Chat) -> list[ChatDataSection]:
        runs = self.runs.all(chat.id)
        if not runs:
            return []
        text = "\n".join(f"- {run_line(run)}\n  result: {run.result}" for run in runs)
        return [
            ChatDataSection(
                "subagent_runs", "Sub-agent runs", [run.to_dict() for run in runs], text
            )
        ]

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        return {"sub-agent runs": self.runs.forget_chat(chat.id)}


def run_line(run: SubagentRun) -> str:
    """One line about a run: its provenance, status, spending and task."""
    task = run.task if len(run.task) <= TASK_CHARS else run.task[: TASK_CHARS - 1] + "…"
    parent = f" (parent message #{run.parent_message_id})" if run.parent_message_id else ""
    why = f" ({run.stop_reason})" if run.status != "done" and run.stop_reason else ""
    return (
        f"{run.provenance}{parent}: {run.status}{why}, {run.iterations} model calls,"
        f" {run.output_tokens} tokens, tools [{', '.join(run.tools)}]; task: {task}"
    )
