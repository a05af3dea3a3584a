"""Curating learned strategies: the delta operations a reflector pass may return.

The model answers, next to its facts, a list `"strategies"` of operations:
  {"op": "ADD", "section": "...", "content": "..."}
  {"op": "UPDATE", "id": N, "content": "..."}
  {"op": "TAG", "id": N, "tag": "helpful" | "harmful" | "neutral"}
  {"op": "REMOVE", "id": N}
Each is validated (ids of this chat only, sizes, the facts' quality gate) before it is
applied; an ADD close to an existing bullet (Jaccard ≥ 0.5) becomes a helpful TAG of it.

Attribution (ACE): the assistant cites the injected (PROMOTED) strategies it applied
(`[s12]`), and only those may be tagged helpful or harmful: a TAG of a PROMOTED strategy
no reply cited since the last pass is rejected, so the counters measure use, not exposure.
SHADOW strategies are never injected; the reflector judges them by observation.
Reflection window (ACE): the prompt shows each strategy's last `WINDOW` verdicts, not its
whole history.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from memory.hidden_text import visible_text
from memory.quality import check_fact
from memory.strategies.lifecycle import ARCHIVED, PROMOTED
from memory.strategies.store import Strategy, StrategyStore
from memory.terms import jaccard

logger = logging.getLogger(__name__)

MERGE_JACCARD = 0.5
MAX_SECTION_CHARS = 40
MAX_OPS_PER_PASS = 20
LISTED_STRATEGIES = 50
WINDOW = 3  # verdicts per strategy the reflector sees

INSTRUCTIONS = """\
Also curate a playbook of strategies: what works when serving this user (tone, language,
format, checks to make first). Judge from how the user reacted in the new messages:
thanks or follow-through count as helpful, corrections, complaints or repeated requests as
harmful. Tag a PROMOTED strategy helpful or harmful only when it is listed under "Cited"
(the assistant applied it); SHADOW ones are judged by what you observe. Put operations
in "strategies" (an empty list when nothing applies):
  {"op": "ADD", "section": "<short topic>", "content": "<observation, 8-240 chars>"}
  {"op": "TAG", "id": <id>, "tag": "helpful" | "harmful" | "neutral"}
  {"op": "UPDATE", "id": <id>, "content": "<better wording>"}
  {"op": "REMOVE", "id": <id>}
Phrase a strategy as an observation ("Answers in Spanish land better with this user"),
never as an order to the assistant. Use only the ids listed under Existing strategies."""


class _Add(BaseModel):
    op: Literal["ADD"]
    section: str = Field(default="general", max_length=200)
    content: str = Field(max_length=2000)


class _Update(BaseModel):
    op: Literal["UPDATE"]
    id: int
    content: str = Field(max_length=2000)


class _Tag(BaseModel):
    op: Literal["TAG"]
    id: int
    tag: Literal["helpful", "harmful", "neutral"]


class _Remove(BaseModel):
    op: Literal["REMOVE"]
    id: int


Operation = Annotated[_Add | _Update | _Tag | _Remove, Field(discriminator="op")]
_OPERATION = TypeAdapter(Operation)

# One flat object per operation for structured output (strict schemas want every key):
# the keys an operation does not use are null, and `parse_operations` drops them.
OPERATIONS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "type": "object",
        "properties": {
            "op": {"type": "string", "enum": ["ADD", "UPDATE", "TAG", "REMOVE"]},
            "id": {"type": ["integer", "null"]},
            "section": {"type": ["string", "null"]},
            "content": {"type": ["string", "null"]},
            "tag": {
                "anyOf": [
                    {"type": "string", "enum": ["helpful", "harmful", "neutral"]},
                    {"type": "null"},
                ]
            },
        },
        "required": ["op", "id", "section", "content", "tag"],
        "additionalProperties": False,
    },
}


@dataclass
class CurationTally:
    added: int = 0
    updated: int = 0
    tagged: int = 0
    merged: int = 0
    removed: int = 0
    rejected: int = 0
    reasons: list[str] = field(default_factory=list)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.reasons.append(reason)


def parse_operations(raw: Any) -> tuple[list[Operation], int]:
    """Valid operations from the model's `strategies` value, and how many were dropped."""
    if not isinstance(raw, list):
        return [], 0 if raw is None else 1
    operations: list[Operation] = []
    dropped = 0
    for item in raw[:MAX_OPS_PER_PASS]:
        if isinstance(item, dict):
            item = {key: value for key, value in item.items() if value is not None}
            if isinstance(item.get("op"), str):
                item["op"] = item["op"].upper()
        try:
            operations.append(_OPERATION.validate_python(item))
        except ValidationError:
            dropped += 1
    return operations, dropped + max(0, len(raw) - MAX_OPS_PER_PASS)


def existing_block(store: StrategyStore, chat_id: int) -> str:
    """The chat's own strategies as the prompt lists them, each with its last `WINDOW`
    verdicts (`[id=N] (STATE, last: helpful, harmful) section: text`), then the ids the
    assistant cited since the last pass."""
    own = [s for s in store.for_chat(chat_id, include_global=False) if s.state != ARCHIVED]
    lines = []
    for strategy in own[:LISTED_STRATEGIES]:
        verdicts = ", ".join(store.recent_tags(strategy.id, WINDOW)) or "none yet"
        lines.append(
            f"[id={strategy.id}] ({strategy.state}, last: {verdicts})"
            f" {strategy.section}: {strategy.content}"
        )
    cited = sorted(store.pending_citations(chat_id))
    listing = "\n".join(lines) or "(none yet)"
    return f"{listing}\nCited: {', '.join(f'[id={i}]' for i in cited) or 'none'}"


def apply_operations(
    store: StrategyStore,
    chat_id: int,
    operations: Sequence[Operation],
    run_id: int | None,
    cited: set[int] | None = None,
) -> CurationTally:
    """Apply validated operations for one chat (inside the caller's transaction). With
    `cited`, a helpful or harmful TAG of a strategy outside it is rejected."""
    tally = CurationTally()
    for operation in operations:
        if isinstance(operation, _Add):
            _add(store, chat_id, operation, run_id, tally, cited)
            continue
        target = store.get(operation.id)
        if target is None or target.chat_id != chat_id or target.state == ARCHIVED:
            tally.reject(f"{operation.op} of unknown id {operation.id}")
        elif isinstance(operation, _Tag) and uncited(operation, target, cited):
            tally.reject(f"TAG {operation.tag} of {operation.id}: not cited by the assistant")
        elif isinstance(operation, _Tag):
            store.tag(target.id, operation.tag, run_id)
            tally.tagged += 1
        elif isinstance(operation, _Remove):
            store.archive(target.id, run_id, "removed by reflector")
            tally.removed += 1
        else:
            verdict = check_fact(operation.content)
            if not verdict.accepted:
                tally.reject(f"UPDATE {operation.id}: {verdict.reason}")
            else:
                store.update(target.id, verdict.content, run_id)
                tally.updated += 1
    return tally


def uncited(operation: _Tag, target: Strategy, cited: set[int] | None) -> bool:
    """Whether a helpful or harmful TAG names an injected (PROMOTED) strategy the assistant
    did not cite. SHADOW strategies are never injected: they are judged by observation."""
    if cited is None or operation.tag == "neutral" or target.state != PROMOTED:
        return False
    return operation.id not in cited


def _add(
    store: StrategyStore,
    chat_id: int,
    operation: _Add,
    run_id: int | None,
    tally: CurationTally,
    cited: set[int] | None = None,
) -> None:
    verdict = check_fact(operation.content)
    if not verdict.accepted:
        tally.reject(f"ADD: {verdict.reason}")
        return
    section = " ".join(visible_text(operation.section).split())[:MAX_SECTION_CHARS] or "general"
    near = _near(store.for_chat(chat_id, include_global=False), verdict.content)
    if near is not None:
        if cited is None or near.state != PROMOTED or near.id in cited:  # see `uncited`
            store.tag(near.id, "helpful", run_id)
        tally.merged += 1
        return
    store.add(chat_id, section, verdict.content, run_id)
    tally.added += 1


def _near(strategies: Sequence[Strategy], content: str) -> Strategy | None:
    best: Strategy | None = None
    best_score = MERGE_JACCARD
    for strategy in strategies:
        if strategy.state == ARCHIVED:
            continue
        score = jaccard(strategy.content, content)
        if score >= best_score:
            best, best_score = strategy, score
    return best
