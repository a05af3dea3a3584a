"""What a sub-agent is given: LiberClaw's lightweight prompt (one combined system message:
who it is, the task, the context its parent passed, brief guidelines), the history it
inherits per `[subagents]`, and MicroClaw's restricted tool registry.

Nothing of the owner's reaches it: no AGENTS.md, no memory sections, no skills, no
instructions from `[agent]`; the parent's tool results neither."""

from __future__ import annotations

from core.api import Chat, Tool, ToolSource
from core.config import SubagentsConfig
from core.storage.store import SessionStore
from core.tools.registry import ToolRegistry

SPAWN_TOOL = "spawn_agent"
CUT_CONTEXT = "\n[context cut: longer than [subagents] max_context_chars]"
START = {"role": "user", "content": "Do the task now and reply with its result."}
GUIDELINES = (
    "Guidelines:\n"
    "- Stay focused on the task; do nothing else.\n"
    "- Be concise: reply with the result and the facts it rests on, no preamble.\n"
    "- Use only the tools offered; they are read-only. You cannot start sub-agents.\n"
    "- If you cannot finish, say what you found and what is missing."
)


def child_prompt(parent: str, task: str, context: str, history: list[str]) -> str:
    """The child's one system message."""
    parts = [
        f"You are a sub-agent of {parent}, started to do one task for it. You are not "
        f"talking to a person: your reply goes back to {parent} as a tool result.",
        f"Task:\n{task}",
        f"Context from {parent}:\n{context or '(none)'}",
    ]
    if history:
        parts.append("Recent conversation (inherited):\n" + "\n".join(history))
    parts.append(GUIDELINES)
    return "\n\n".join(parts)


def cap_context(context: str, limit: int) -> str:
    return context if len(context) <= limit else context[:limit] + CUT_CONTEXT


def inherited_history(store: SessionStore, chat: Chat, config: SubagentsConfig) -> list[str]:
    """`role: text` lines of the chat's last user and assistant texts, when `history` is
    "recent"; nothing when it is "none" (the default)."""
    if config.history == "none":
        return []
    texts = [m for m in store.history(chat.id) if m.role in ("user", "assistant") and m.content]
    return [f"{m.role}: {m.content}" for m in texts[-config.history_messages :]]


def policy(config: SubagentsConfig) -> dict[str, str]:
    """The inheritance applied, per field (stored with each run)."""
    return {
        "history": config.history
        if config.history == "none"
        else f"recent {config.history_messages}",
        "memory": config.memory,
        "tool_results": config.tool_results,
        "instructions": "none",
        "skills": "none",
        "context": "what the parent passed",
    }


def may_use(tool: Tool, config: SubagentsConfig) -> bool:
    """Whether a child may be offered `tool`: never `spawn_agent`; a tool listed in
    `allow_tools`; else a read-only one, memory readers only with `memory = "tools"`."""
    if tool.name == SPAWN_TOOL:
        return False
    if tool.name in config.allow_tools:
        return True
    return tool.read_only and (not tool.reads_memory or config.memory == "tools")


class Refused:
    """A tool source with no tools that says why a name is missing for a child: one of the
    parent's tools it may not call, or what the parent's sources say (a server down or
    not open to the chat). A call to such a tool comes back as an error and is never run."""

    def __init__(self, names: list[str], sources: list[ToolSource]) -> None:
        self.names = set(names)
        self.sources = sources

    def tools_for(self, chat: Chat) -> list[Tool]:
        return []

    def why_missing(self, chat: Chat, name: str) -> str:
        if name in self.names:
            return "a sub-agent may use read-only tools only (no writes, sending or spawning)"
        return next((why for s in self.sources if (why := s.why_missing(chat, name))), "")


def child_registry(parent: ToolRegistry, chat: Chat, config: SubagentsConfig) -> ToolRegistry:
    """The child's tools: those the parent chat may call now that the child may use (so it
    never has more rights than its parent); the rest are refused by name."""
    available = parent.tools_for(chat)
    registry = ToolRegistry([tool for tool in available if may_use(tool, config)])
    refused = [tool.name for tool in available if not may_use(tool, config)]
    registry.add_source(Refused(refused, parent.sources))
    return registry
