"""The tool loop's guard against a model that repeats itself.

A small model whose template hides tool results from it (llama-cpp-python renders a `tool`
message as an empty turn) calls the same tool with the same arguments again and again.
A call the turn has already made is not made again: the loop ends and the model answers
without tools.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from core.model.client import ToolCall


def call_key(call: ToolCall) -> tuple[str, str]:
    """A call's name and its arguments in a canonical form (key order and spacing ignored)."""
    try:
        arguments = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except ValueError:
        arguments = call.arguments.strip()
    return call.name, arguments


@dataclass
class RepeatGuard:
    """Remembers the calls of one turn."""

    seen: set[tuple[str, str]] = field(default_factory=set)

    def fresh(self, calls: Sequence[ToolCall]) -> list[ToolCall]:
        """The calls of `calls` not made before in this turn (remembered from now on)."""
        new = []
        for call in calls:
            key = call_key(call)
            if key not in self.seen:
                self.seen.add(key)
                new.append(call)
        return new
