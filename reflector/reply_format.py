"""The reply's JSON schema and the structured-output requests that ask a server for it.

Servers accept different forms: `json_schema` (llama.cpp's llama-server, Ollama, vLLM,
OpenAI), llama-cpp-python's `json_object` carrying a `schema`, or none at all (then the
prompt alone asks for JSON and `reflector.extraction` parses and repairs what comes back).
The form that works is learned per model (`core.model.profile`, `structured`) and tried
first next time; the prompt is the same in every mode.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from core.model.profile import StructuredMode

SCHEMA_NAME = "reflection"
FALLBACK: dict[StructuredMode, StructuredMode | None] = {
    "json_schema": "json_object",
    "json_object": "none",
    "none": None,
}


def strict_object(properties: Mapping[str, Any]) -> dict[str, Any]:
    """An object schema in the strict form (every key required, nothing else allowed)."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": list(properties),
        "additionalProperties": False,
    }


def reply_schema(
    categories: Collection[str], extras: Mapping[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """`{"memories": [...]}` plus each pass contributor's key (its own value schema)."""
    memory = strict_object(
        {
            "content": {"type": "string"},
            "category": {"type": "string", "enum": sorted(c.upper() for c in categories)},
            "supersedes_id": {"type": ["integer", "null"]},
        }
    )
    return strict_object({"memories": {"type": "array", "items": memory}, **(extras or {})})


def response_format(mode: StructuredMode, schema: dict[str, Any]) -> dict[str, Any] | None:
    """The `response_format` that asks for `schema` in `mode` (None: ask in the prompt only)."""
    if mode == "json_schema":
        return {
            "type": "json_schema",
            "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": True},
        }
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None
