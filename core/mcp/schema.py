"""Input schemas of MCP tools made acceptable to strict local model servers.

llama.cpp turns a tool's schema into a grammar and rejects what it cannot: `$ref` into
`$defs`, unknown `format`s, a missing `properties`. The cleaned schema keeps the meaning
where it can (simple references are inlined) and loosens it where it cannot.
"""

from __future__ import annotations

import re
from typing import Any

DROPPED_KEYS = frozenset({"$schema", "$id", "$defs", "definitions", "$comment", "examples"})
KEPT_FORMATS = frozenset({"date", "time", "date-time", "uuid"})
MAX_REF_DEPTH = 6
TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
MAX_TOOL_NAME = 64


def clean_schema(schema: object) -> dict[str, Any]:
    """`schema` as an object schema with `properties`, refs inlined, unsupported keys gone."""
    root = schema if isinstance(schema, dict) else {}
    defs = {**(root.get("definitions") or {}), **(root.get("$defs") or {})}
    cleaned = _clean(root, defs, 0)
    if not isinstance(cleaned, dict):
        cleaned = {}
    cleaned["type"] = "object"
    properties = cleaned.get("properties")
    cleaned["properties"] = properties if isinstance(properties, dict) else {}
    required = cleaned.get("required")
    if isinstance(required, list):
        kept = [key for key in required if key in cleaned["properties"]]
        if kept:
            cleaned["required"] = kept
        else:
            cleaned.pop("required")
    return cleaned


def _clean(node: object, defs: dict[str, Any], depth: int) -> object:
    if isinstance(node, list):
        return [_clean(item, defs, depth) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _inline(node, defs, depth)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in DROPPED_KEYS:
            continue
        if key == "format" and value not in KEPT_FORMATS:
            continue
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: _clean(sub, defs, depth) for name, sub in value.items()}
        else:
            out[key] = _clean(value, defs, depth)
    return out


def _inline(node: dict[str, Any], defs: dict[str, Any], depth: int) -> object:
    """A local `#/$defs/X` reference replaced by X (cleaned); anything else: any value."""
    ref = str(node["$ref"])
    name = ref.rsplit("/", 1)[-1]
    local = ref.startswith(("#/$defs/", "#/definitions/"))
    if not local or name not in defs or depth >= MAX_REF_DEPTH:
        described = {"description": node["description"]} if "description" in node else {}
        return described
    rest = {key: value for key, value in node.items() if key != "$ref"}
    target = _clean(defs[name], defs, depth + 1)
    merged = dict(target) if isinstance(target, dict) else {}
    extra = _clean(rest, defs, depth + 1)
    if isinstance(extra, dict):
        merged.update(extra)
    return merged


def model_tool_name(server: str, tool: str) -> str:
    """`<server>__<tool>` with only the characters tool names may have, at most 64."""
    return TOOL_NAME.sub("_", f"{server}__{tool}")[:MAX_TOOL_NAME]
