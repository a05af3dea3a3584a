"""The tool registry: tools by name, their schemas, and running one safely."""

from __future__ import annotations

import json
import logging
from typing import Any

from core.api import Tool, TurnContext
from core.errors import InputError, ToolError

logger = logging.getLogger(__name__)


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
        except (ToolError, InputError) as exc:
            return f"error: {exc}"
        except Exception as exc:
            logger.exception("tool %s failed", name)
            return f"error: tool {name} failed: {type(exc).__name__}: {exc}"
