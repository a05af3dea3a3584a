"""The tools offered with a request, within their own budget.

Tool schemas are part of every request, at what the server makes of them (the model's
learned tool cost: a function-calling preamble plus the schemas). When they fit their
budget (`tools_share` of the usable window, less when the messages leave less room) every
tool is offered as written. Past it their descriptions are compacted
(the first sentence; only the required parameters, undescribed); still past it, only the tools the
chat likely needs are offered: the essential ones (memory) always, then others by
relevance to the newest message or by recent use in the history, while they fit. What was
left out, and why, is reported by `/context`. The order stays the registry's, so while the
offer does not change the request's start stays byte-identical.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.api import Tool
from core.model.tokens import TokenEstimator

DESCRIPTION_CHARS = 60
_WORD = re.compile(r"[a-z0-9]{4,}")
_COMMON = frozenset({"this", "that", "with", "from", "when", "what", "your", "read", "have"})


@dataclass(frozen=True)
class ToolOffer:
    """The schemas to send, and what was compacted or left out (name -> reason)."""

    schemas: list[dict[str, Any]]
    compacted: bool = False
    left_out: dict[str, str] = field(default_factory=dict)
    budget_tokens: int = 0

    @property
    def names(self) -> list[str]:
        return [schema["function"]["name"] for schema in self.schemas]


def compact_description(text: str) -> str:
    """The first sentence of a description, at most `DESCRIPTION_CHARS` characters."""
    first = re.split(r"(?<=[.;])\s", " ".join(text.split()), maxsplit=1)[0]
    return first if len(first) <= DESCRIPTION_CHARS else first[: DESCRIPTION_CHARS - 1] + "…"


def compact_parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """A parameters schema with its required properties alone, without their descriptions
    (types and enums stay: they decide whether a call is valid). An optional argument is
    still accepted when the model passes it: calls are checked against the full schema."""
    required = schema.get("required") or []
    properties = {
        name: {key: value for key, value in prop.items() if key != "description"}
        for name, prop in (schema.get("properties") or {}).items()
        if name in required
    }
    return schema | {"properties": properties} if "properties" in schema else dict(schema)


def compact_schema(tool: Tool) -> dict[str, Any]:
    schema = tool.schema()
    function = schema["function"] | {
        "description": compact_description(tool.description),
        "parameters": compact_parameters(tool.parameters),
    }
    return schema | {"function": function}


def words(text: str) -> set[str]:
    """Content words (4+ letters) of `text`, lowercase; `read_tool_result` gives its parts."""
    return set(_WORD.findall(text.lower().replace("_", " "))) - _COMMON


def relevance(tool: Tool, message_words: set[str]) -> int:
    """How many words of the newest message the tool's name or description shares."""
    return len(words(f"{tool.name} {tool.description}") & message_words)


def offer_tools(
    tools: Sequence[Tool],
    budget_tokens: int,
    estimator: TokenEstimator,
    message: str = "",
    recent: Iterable[str] = (),
) -> ToolOffer:
    """The schemas of `tools` within `budget_tokens` (see the module docstring); `recent`
    names the tools called in the stored history, newest last."""

    full = [tool.schema() for tool in tools]
    if estimator.tools(full) <= budget_tokens:
        return ToolOffer(full, budget_tokens=budget_tokens)
    compact = {tool.name: compact_schema(tool) for tool in tools}
    if estimator.tools(list(compact.values())) <= budget_tokens:
        return ToolOffer(list(compact.values()), True, budget_tokens=budget_tokens)
    chosen, left_out = choose_tools(tools, message, recent)

    def offered(names: set[str]) -> list[dict[str, Any]]:
        return [compact[tool.name] for tool in tools if tool.name in names]

    for tool in tools:
        if tool.name in chosen or tool.name in left_out:
            continue
        if estimator.tools(offered(chosen | {tool.name})) <= budget_tokens:
            chosen.add(tool.name)
        else:
            left_out[tool.name] = "relevant, but over the tool budget"
    return ToolOffer(offered(chosen), True, left_out, budget_tokens)


def without_tools(offer: ToolOffer, reason: str) -> ToolOffer:
    """`offer` with every tool left out for `reason` (the request has no room for any)."""
    left_out = dict(offer.left_out) | {name: reason for name in offer.names}
    return ToolOffer([], offer.compacted, left_out, 0)


def choose_tools(
    tools: Sequence[Tool], message: str, recent: Iterable[str]
) -> tuple[set[str], dict[str, str]]:
    """(the essential tools, the rest that is neither relevant nor recently used -> why):
    what `offer_tools` starts from when not every tool fits."""
    message_words = words(message)
    used = set(recent)
    chosen = {tool.name for tool in tools if tool.essential}
    left_out = {
        tool.name: "small window: not relevant to the message and not used recently"
        for tool in tools
        if not tool.essential and tool.name not in used and not relevance(tool, message_words)
    }
    return chosen, left_out
