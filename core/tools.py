"""The tool registry: each tool is one async function with a JSON-schema signature."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from core.errors import ToolError

if TYPE_CHECKING:
    from core.turn import TurnContext

logger = logging.getLogger(__name__)

ToolFunction = Callable[["TurnContext", dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    function: ToolFunction
    parameters: dict[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    """Tools by name, in registration order."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self._tools.values()]

    async def execute(self, name: str, arguments: str, turn: TurnContext) -> str:
        """Run a tool; any failure becomes an error text for the model, never an exception."""
        tool = self._tools.get(name)
        if tool is None:
            return f"error: no tool named {name!r}; available: {', '.join(self.names)}"
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ToolError("arguments must be a JSON object")
            return await tool.function(turn, args)
        except json.JSONDecodeError as exc:
            return f"error: arguments are not valid JSON ({exc.msg})"
        except ToolError as exc:
            return f"error: {exc}"
        except Exception as exc:
            logger.exception("tool %s failed", name)
            return f"error: tool {name} failed: {type(exc).__name__}: {exc}"


async def get_current_time(turn: TurnContext, args: dict[str, Any]) -> str:
    """The current date and time in UTC, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="seconds")


BUILTIN_TOOLS = [
    Tool(
        "get_current_time",
        "Get the current date and time (UTC, ISO 8601).",
        get_current_time,
    ),
]
