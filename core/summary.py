"""The compaction summary: prompt, transcript, fitting the request, judging the answer.

The summary is structured (Goal, Constraints and preferences, Progress, Key decisions,
Next steps, Critical context) and updated incrementally from the previous one. An
answer that is empty, an error text or lacks the structure is never used.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.config import Config
from core.errors import LLMError
from core.llm import LLM, is_overflow_message
from core.store import SessionStore, StoredMessage
from core.text import clip_middle, strip_think
from core.tokens import TokenEstimator, effective_window
from core.usage import complete_recorded

logger = logging.getLogger(__name__)

SUMMARY_MARKER = "You maintain the running summary of a conversation"
HEADINGS = (
    "Goal",
    "Constraints and preferences",
    "Progress",
    "Key decisions",
    "Next steps",
    "Critical context",
)
SUMMARY_PROMPT = (
    f"{SUMMARY_MARKER} between a user and an assistant, so that the assistant can go on "
    "without the older messages. Write it with exactly these Markdown headings:\n"
    "## Goal\n## Constraints and preferences\n"
    "## Progress\n(Done / In progress / Blocked)\n## Key decisions\n## Next steps\n"
    "## Critical context\n(exact names, paths, numbers, ids, commands; copy them verbatim)\n\n"
    "If a previous summary is given, update it with the new messages: keep what still "
    "holds, change what changed, add what is new, drop what is finished and irrelevant. "
    "Write 'none' under a heading with nothing to say. Output only the summary."
)
USAGE_KIND = "compaction"
ENTRY_MAX_CHARS = 2_000
MIN_SUMMARY_CHARS = 40
MIN_HEADINGS = 3
_ERROR_STARTS = ("error", "sorry", "i'm sorry", "i am sorry", "i cannot", "i can't", "as an ai")


@dataclass(frozen=True)
class SummaryOutcome:
    summary: str | None  # None: no usable summary (the caller falls back)
    calls: int
    messages_summarised: int
    error: str = ""


def transcript_entry(message: StoredMessage) -> str:
    """One stored message as a transcript line for the summariser (long texts clipped)."""
    who = f"{message.role} ({message.sender})" if message.sender else message.role
    text = message.content
    if message.tool_calls:
        calls = ", ".join(
            f"{call.get('function', {}).get('name', '?')}"
            f"({call.get('function', {}).get('arguments', '')})"
            for call in message.tool_calls
        )
        text = f"{text}\n[calls {calls}]".strip()
    if message.role == "tool":
        who = f"tool result {message.tool_call_id or ''}".strip()
    return f"[#{message.id}] {who}: {clip_middle(text, ENTRY_MAX_CHARS)}"


def summary_request(previous: str | None, part: Sequence[StoredMessage]) -> list[dict[str, Any]]:
    body = "\n\n".join(transcript_entry(message) for message in part)
    earlier = f"Previous summary:\n{previous}\n\n" if previous else "Previous summary: none\n\n"
    return [
        {"role": "system", "content": SUMMARY_PROMPT},
        {"role": "user", "content": f"{earlier}New messages:\n{body}"},
    ]


def fit_summary_request(
    previous: str | None,
    old: Sequence[StoredMessage],
    estimator: TokenEstimator,
    budget_tokens: int,
) -> tuple[list[dict[str, Any]], int]:
    """The request and how many old messages it covers: drop the oldest half until it fits."""
    part = list(old)
    messages = summary_request(previous, part)
    while estimator.request(messages) > budget_tokens and len(part) > 1:
        part = part[len(part) // 2 :]
        messages = summary_request(previous, part)
    return messages, len(part)


def usable_summary(text: str) -> str | None:
    """The cleaned summary, or None for empty answers, error texts and unstructured junk."""
    cleaned = strip_think(text)
    lowered = cleaned.lower()
    if len(cleaned) < MIN_SUMMARY_CHARS or is_overflow_message(lowered):
        return None
    if lowered.startswith(_ERROR_STARTS):
        return None
    found = sum(heading.lower() in lowered for heading in HEADINGS)
    return cleaned if found >= MIN_HEADINGS else None


async def summarise(
    llm: LLM,
    store: SessionStore,
    config: Config,
    chat_id: int,
    previous: str | None,
    old: Sequence[StoredMessage],
    estimator: TokenEstimator,
) -> SummaryOutcome:
    """Ask the model for the updated summary of `old`; never raises an `LLMError`."""
    messages, covered = fit_summary_request(previous, old, estimator, effective_window(config.llm))
    try:
        completion = await complete_recorded(llm, store, chat_id, USAGE_KIND, messages)
    except LLMError as exc:
        return SummaryOutcome(None, 1, covered, f"{type(exc).__name__}: {exc}")
    summary = usable_summary(completion.content)
    if summary is None:
        preview = json.dumps(completion.content[:120])
        return SummaryOutcome(None, 1, covered, f"unusable summary: {preview}")
    return SummaryOutcome(summary, 1, covered)
