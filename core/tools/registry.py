"""The tool registry: the tools a chat may call right now, their schemas, and running one
safely.

Tools come from two places: fixed tools registered once (the built-ins, memory), and tool
sources (MCP servers) whose tools come and go while the bot runs and differ per chat. Every
turn reads the current set; its order is stable (fixed tools in registration order, then
each source's tools by name) so the request's static part stays byte-identical while
nothing changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from core.api import Chat, Tool, ToolSource, TurnContext
from core.errors import InputError, ToolError

logger = logging.getLogger(__name__)

JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


class ToolRegistry:
    """Fixed tools by name, in registration order, plus the tool sources asked each turn."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        self._sources: list[ToolSource] = []
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def add_source(self, source: ToolSource) -> None:
        """A source of tools that change while the bot runs; asked on every turn."""
        self._sources.append(source)

    @property
    def sources(self) -> list[ToolSource]:
        return list(self._sources)

    @property
    def names(self) -> list[str]:
        """The fixed tools' names (every chat has them)."""
        return list(self._tools)

    def tools_for(self, chat: Chat | None) -> list[Tool]:
        """What `chat` may call now (None: the fixed tools only); a source's tool never
        shadows a fixed one."""
        found = dict(self._tools)
        if chat is not None:
            for source in self._sources:
                for tool in sorted(source.tools_for(chat), key=lambda t: t.name):
                    found.setdefault(tool.name, tool)
        return list(found.values())

    def names_for(self, chat: Chat | None) -> list[str]:
        return [tool.name for tool in self.tools_for(chat)]

    def schemas(self, chat: Chat | None = None) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.tools_for(chat)]

    async def execute(self, name: str, arguments: str, turn: TurnContext) -> str:
        """Run a tool; any failure becomes an error text for the model, never an exception."""
        available = {tool.name: tool for tool in self.tools_for(turn.chat)}
        tool = available.get(name)
        if tool is None:
            return self._unknown(name, turn.chat, list(available))
        try:
            args = json.loads(arguments or "{}")
            if not isinstance(args, dict):
                raise ToolError("arguments must be a JSON object")
            args = coerce_scalars(tool.parameters, args)
            problem = argument_problem(tool.parameters, args)
            if problem:
                raise ToolError(f"bad arguments for {name}: {problem}")
            return await tool.function(turn, args)
        except json.JSONDecodeError as exc:
            return f"error: arguments are not valid JSON ({exc.msg})"
        except (ToolError, InputError) as exc:
            return f"error: {exc}"
        except TimeoutError:
            return f"error: tool {name} timed out"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("tool %s failed", name)
            return f"error: tool {name} failed: {type(exc).__name__}: {exc}"

    def _unknown(self, name: str, chat: Chat, available: list[str]) -> str:
        for source in self._sources:
            why = source.why_missing(chat, name)
            if why:
                return f"error: tool {name!r} is not available: {why}"
        return f"error: no tool named {name!r}; available: {', '.join(available)}"


def argument_problem(schema: dict[str, Any], args: dict[str, Any]) -> str:
    """What is wrong with `args` for a tool's top-level JSON schema ("" when nothing):
    missing required keys, unknown keys when the schema forbids them, and wrong types of
    the top-level values. Deliberately shallow: the tool checks the rest itself."""
    properties = schema.get("properties") or {}
    missing = [key for key in schema.get("required") or [] if key not in args]
    if missing:
        return f"missing required {', '.join(repr(key) for key in missing)}"
    if schema.get("additionalProperties") is False:
        extra = [key for key in args if key not in properties]
        if extra:
            return f"unknown {', '.join(repr(key) for key in extra)}"
    for key, value in args.items():
        declared = properties.get(key)
        if isinstance(declared, dict) and not _fits(declared.get("type"), value):
            return f"{key!r} must be {declared.get('type')}, not {type(value).__name__}"
    return ""


def coerce_scalars(schema: dict[str, Any], args: dict[str, Any]) -> dict[str, Any]:
    """`args` with top-level numbers and booleans the model wrote as strings ("3", "true")
    turned into what the schema declares; small local models often quote them."""
    properties = schema.get("properties") or {}
    fixed = dict(args)
    for key, value in args.items():
        declared = properties.get(key)
        if not isinstance(value, str) or not isinstance(declared, dict):
            continue
        kind = declared.get("type")
        kinds = kind if isinstance(kind, list) else [kind]
        if "string" in kinds:
            continue
        text = value.strip()
        if "integer" in kinds and text.lstrip("-").isdigit():
            fixed[key] = int(text)
        elif "number" in kinds:
            with contextlib.suppress(ValueError):
                fixed[key] = float(text)
        elif "boolean" in kinds and text.lower() in ("true", "false"):
            fixed[key] = text.lower() == "true"
    return fixed


def _fits(declared: object, value: object) -> bool:
    kinds = declared if isinstance(declared, list) else [declared]
    if not all(isinstance(kind, str) and kind in JSON_TYPES for kind in kinds):
        return True  # no type, or one we do not check
    for kind in kinds:
        if isinstance(value, bool) and kind in ("integer", "number"):
            continue
        if isinstance(value, JSON_TYPES[str(kind)]):
            return True
    return False
