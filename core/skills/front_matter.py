"""The front matter of a SKILL.md: the `---` block of `key: value` lines before its body.

The subset of YAML that SKILL.md files use (Anthropic's skills, MicroClaw, nanobot,
OpenClaw): top-level `key: value` scalars, plain or quoted, and `>`/`|` block scalars.
Nested mappings and lists (`metadata:`, `allowed-tools:`) are kept as their raw text and
never interpreted. No anchors, aliases, tags or types: a skill can only name and describe
itself, and nothing in a file someone downloaded can make this parser do more work than
one pass over its lines. (PyYAML stays a dev dependency: a full YAML loader is more than
two strings need.)
"""

from __future__ import annotations

import json
import re

from core.errors import SkillError

KEY = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.-]*)\s*:(?:\s+(.*))?$")
MAX_FRONT_MATTER_LINES = 200


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """({key: value}, body) of a SKILL.md; SkillError if the front matter is missing or
    malformed."""
    text = text.lstrip("\ufeff")
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise SkillError("SKILL.md does not start with a '---' front matter block")
    try:
        end = next(i for i, line in enumerate(lines[1:], 1) if line.strip() in ("---", "..."))
    except StopIteration:
        raise SkillError("SKILL.md's front matter has no closing '---'") from None
    if end > MAX_FRONT_MATTER_LINES:
        raise SkillError(f"SKILL.md's front matter is over {MAX_FRONT_MATTER_LINES} lines")
    return parse_front_matter(lines[1:end]), "\n".join(lines[end + 1 :]).strip()


def parse_front_matter(lines: list[str]) -> dict[str, str]:
    """Top-level keys and their scalar values (a nested block's raw text for the others)."""
    fields: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[0].isspace():
            raise SkillError(f"front matter line {index}: unexpected indentation: {line!r}")
        match = KEY.match(line.rstrip())
        if match is None:
            raise SkillError(f"front matter line {index}: not a 'key: value' line: {line!r}")
        key, value = match.group(1), (match.group(2) or "").strip()
        if key in fields:
            raise SkillError(f"front matter: {key!r} is given twice")
        block, index = _indented_block(lines, index)
        fields[key] = _scalar(value, block, index)
    return fields


def _indented_block(lines: list[str], index: int) -> tuple[list[str], int]:
    """The indented (or blank) lines from `index` on, and the index after them."""
    block: list[str] = []
    while index < len(lines) and (not lines[index].strip() or lines[index][0].isspace()):
        block.append(lines[index])
        index += 1
    while block and not block[-1].strip():
        block.pop()
    return block, index


def _scalar(value: str, block: list[str], line: int) -> str:
    stripped = [part.strip() for part in block]
    if value.startswith((">", "|")):
        if value.rstrip("+-") not in (">", "|"):
            raise SkillError(f"front matter line {line}: unsupported block style {value!r}")
        if value.startswith(">"):
            return " ".join(part for part in stripped if part)
        return "\n".join(stripped)
    if not value:
        return "\n".join(block)  # a nested mapping or list: kept raw, never interpreted
    if block:  # a plain scalar folded over several lines
        value = " ".join([value, *(part for part in stripped if part)])
    return _unquote(value, line)


def _unquote(value: str, line: int) -> str:
    if value.startswith('"'):
        try:
            decoded = json.loads(value)
        except json.JSONDecodeError:
            raise SkillError(f"front matter line {line}: bad double-quoted string") from None
        if not isinstance(decoded, str):
            raise SkillError(f"front matter line {line}: bad double-quoted string")
        return decoded
    if value.startswith("'"):
        if len(value) < 2 or not value.endswith("'"):
            raise SkillError(f"front matter line {line}: unterminated single-quoted string")
        return value[1:-1].replace("''", "'")
    return re.sub(r"\s+#.*$", "", value)  # a trailing comment
