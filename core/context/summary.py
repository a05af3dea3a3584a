"""The compaction summary: prompt, transcript, fitting the request, judging the answer.

The summary is structured (Goal, Constraints and preferences, Progress, Key decisions,
Next steps, Critical context) and updated incrementally from the previous one. Only an
answer with the six headings in order, each followed by some text, is used; an empty,
cut or error answer, or one that merely mentions the headings, never is.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.config import Config
from core.errors import LLMError
from core.model.client import LLM, is_overflow_message
from core.model.profile import request_tokens_for
from core.model.tokens import TokenEstimator
from core.model.usage import complete_recorded
from core.storage.store import SessionStore, StoredMessage
from core.text import clip_middle, strip_think

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
LENGTH_RULE = "\nKeep the whole summary under {words} words."
CONTINUATION_PROMPT = (
    f"{SUMMARY_MARKER} above, so that you can go on without its older messages. "
    "{scope}Write the running summary with exactly these Markdown headings:\n"
    "## Goal\n## Constraints and preferences\n"
    "## Progress\n(Done / In progress / Blocked)\n## Key decisions\n## Next steps\n"
    "## Critical context\n(exact names, paths, numbers, ids, commands; copy them verbatim)\n\n"
    "Keep what still holds from the summary of the earlier conversation (if there is one), "
    "change what changed, add what is new. Write 'none' under a heading with nothing to "
    "say. Do not answer the last message. Output only the summary."
)
SCOPE_SNIPPET_CHARS = 80
USAGE_KIND = "compaction"
SUMMARY_ANSWER_TOKENS = 512  # a summary's own answer budget, above a small max_output_tokens
TOKENS_PER_SUMMARY_WORD = 2  # answer room per word of the length rule: headings and slack
ENTRY_MAX_CHARS = 2_000
SUMMARY_TOKENS_MAX = 1_000
MIN_SUMMARY_CHARS = 40
_HEADING_NAMES = {heading.lower(): heading for heading in HEADINGS}
_HEADING_DECOR = re.compile(r"^\s*(?:#{1,6}\s*)?(?:\d+[.)]\s*)?|[*_:]+|\s*#*\s*$")
_WORD = re.compile(r"\w")
_ERROR_STARTS = ("error", "sorry", "i'm sorry", "i am sorry", "i cannot", "i can't", "as an ai")


@dataclass(frozen=True)
class SummaryOutcome:
    summary: str | None  # None: no usable summary (the caller falls back)
    calls: int
    messages_summarised: int
    error: str = ""


def is_summary_request(messages: Sequence[dict[str, Any]]) -> bool:
    """Whether a request asks for the compaction summary (as a transcript or as the chat's
    continuation): for fake servers, benches and logs."""
    ends = (messages[0], messages[-1]) if messages else ()
    return any(SUMMARY_MARKER in str(message.get("content") or "") for message in ends)


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


def summary_words(window: int) -> int:
    """How long a summary may be, in words: a tenth of the window (at most 1,000 tokens),
    so on a small window the summary leaves room for the conversation."""
    return max(60, int(min(window // 10, SUMMARY_TOKENS_MAX) * 0.75))


def summary_request(
    previous: str | None, part: Sequence[StoredMessage], words: int = 0
) -> list[dict[str, Any]]:
    rule = LENGTH_RULE.format(words=words) if words else ""
    body = "\n\n".join(transcript_entry(message) for message in part)
    earlier = f"Previous summary:\n{previous}\n\n" if previous else "Previous summary: none\n\n"
    return [
        {"role": "system", "content": SUMMARY_PROMPT + rule},
        {"role": "user", "content": f"{earlier}New messages:\n{body}"},
    ]


def continuation_request(
    conversation: Sequence[dict[str, Any]], first_kept: StoredMessage | None, words: int = 0
) -> list[dict[str, Any]]:
    """The chat's own request followed by the summary instruction, so a server that caches
    prompts (llama.cpp, vLLM) evaluates only the instruction, not the conversation again.

    The instruction joins the last message when that is the user's (templates that want
    user and assistant to alternate refuse two user messages in a row)."""
    scope = ""
    if first_kept is not None and first_kept.content:
        start = " ".join(first_kept.content.split())[:SCOPE_SNIPPET_CHARS]
        scope = (
            f"The messages from the one that begins {json.dumps(start, ensure_ascii=False)} "
            "on stay in the conversation; the summary must hold what matters from the ones "
            "before it. "
        )
    instruction = CONTINUATION_PROMPT.format(scope=scope)
    if words:
        instruction += LENGTH_RULE.format(words=words)
    messages = [dict(message) for message in conversation]
    last = messages[-1] if messages else None
    if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
        last["content"] = f"{last['content']}\n\n---\n{instruction}"
    else:
        messages.append({"role": "user", "content": instruction})
    return messages


def old_part(conversation: Sequence[dict[str, Any]], old_count: int) -> list[dict[str, Any]]:
    """The start of `conversation` (a planned request) up to the end of its first
    `old_count` stored messages: the kept messages and the blocks sent with them cut off.
    Requests carry the stored history in order, each message once; every other message
    (the prompt, the summary, context blocks) is a system message. Empty if the request
    holds no more than `old_count` such messages."""
    seen = 0
    for index, message in enumerate(conversation):
        if message.get("role") == "system":
            continue
        if seen == old_count:
            while conversation[index - 1].get("role") == "system":
                index -= 1
            return [dict(entry) for entry in conversation[:index]]
        seen += 1
    return []


def fit_summary_request(
    previous: str | None,
    old: Sequence[StoredMessage],
    estimator: TokenEstimator,
    budget_tokens: int,
    words: int = 0,
) -> tuple[list[dict[str, Any]], int]:
    """The request and how many old messages it covers: drop the oldest half until it fits."""
    part = list(old)
    messages = summary_request(previous, part, words)
    while estimator.request(messages) > budget_tokens and len(part) > 1:
        part = part[len(part) // 2 :]
        messages = summary_request(previous, part, words)
    return messages, len(part)


def heading_of(line: str) -> str | None:
    """The summary heading a line names (`## Goal`, `**Goal**`, `Goal:`), else None."""
    name = _HEADING_DECOR.sub("", line).strip().lower()
    return _HEADING_NAMES.get(name)


def sections_of(text: str) -> list[tuple[str, str]] | None:
    """(heading, body) in order of appearance; None when a known heading repeats."""
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        heading = heading_of(line)
        if heading is not None:
            if any(name == heading for name, _ in sections):
                return None
            sections.append((heading, []))
        elif sections:
            sections[-1][1].append(line)
    return [(name, "\n".join(body)) for name, body in sections]


def well_structured(text: str) -> bool:
    """Whether `text` has the six headings, in order, each with some text under it
    ("none" counts as text)."""
    sections = sections_of(text)
    if sections is None or tuple(name for name, _ in sections) != HEADINGS:
        return False
    return all(_WORD.search(body) for _, body in sections)


def usable_summary(text: str, finish_reason: str = "") -> str | None:
    """The cleaned summary, or None for cut answers, error texts and anything without the
    six headings in order, each filled."""
    cleaned = strip_think(text)
    lowered = cleaned.lower()
    if finish_reason == "length" or len(cleaned) < MIN_SUMMARY_CHARS:
        return None
    if is_overflow_message(lowered) or lowered.startswith(_ERROR_STARTS):
        return None
    if not well_structured(cleaned):
        return None
    lines = cleaned.splitlines()
    first = next(index for index, line in enumerate(lines) if heading_of(line))
    return "\n".join(lines[first:])  # without a preamble ("Here is the summary:")


@dataclass(frozen=True)
class SummaryBudget:
    """What a summary request may use: prompt tokens, answer tokens, and how many words
    the summary should have (it scales with the window)."""

    prompt_tokens: int
    answer_tokens: int
    words: int = 0

    @classmethod
    def of(cls, window: int, config: Config) -> SummaryBudget:
        """A summary gets its own answer room: up to `SUMMARY_ANSWER_TOKENS` (a small
        `max_output_tokens` cuts every summary), at most a quarter of the window, and no
        more than `TOKENS_PER_SUMMARY_WORD` tokens a word of its length rule. On a small
        window every token of answer room is one less for the prompt: the chat's own
        request, continued (cached by the server), fits only if the room is not wasted."""
        words = summary_words(window)
        turn_answer = request_tokens_for(window, config.llm.max_output_tokens)
        room = min(window // 4, SUMMARY_ANSWER_TOKENS, words * TOKENS_PER_SUMMARY_WORD)
        answer = max(turn_answer, room)
        return cls(window - answer, answer, words)


async def summarise(
    llm: LLM,
    store: SessionStore,
    chat_id: int,
    previous: str | None,
    old: Sequence[StoredMessage],
    estimator: TokenEstimator,
    budget: SummaryBudget,
    conversation: Sequence[dict[str, Any]] = (),
    first_kept: StoredMessage | None = None,
) -> SummaryOutcome:
    """Ask the model for the updated summary of `old`; never raises an `LLMError`.

    With `conversation` (the chat's request as just planned) the summary is asked for as
    the continuation of its start up to the end of `old` when that fits the window (the
    server cached it with the previous request; the kept messages after it stay in the
    chat, so the newest message and its block are not evaluated twice), else from a
    transcript of `old`."""
    words = budget.words
    covered = len(old)
    # The conversation up to the old part's end: what the server cached from the previous
    # request (the kept messages and their blocks are new to it, and stay in the chat).
    head = old_part(conversation, len(old))
    messages = continuation_request(head, None, words) if head else []
    if not messages and conversation:
        messages = continuation_request(conversation, first_kept, words)
    if not messages or estimator.request(messages) > budget.prompt_tokens:
        messages, covered = fit_summary_request(
            previous, old, estimator, budget.prompt_tokens, words
        )
    try:
        completion = await complete_recorded(
            llm, store, chat_id, USAGE_KIND, messages, max_tokens=budget.answer_tokens
        )
    except LLMError as exc:
        return SummaryOutcome(None, 1, covered, f"{type(exc).__name__}: {exc}")
    summary = usable_summary(completion.content, completion.finish_reason)
    if summary is None:
        cut = " (cut at the output limit)" if completion.finish_reason == "length" else ""
        preview = json.dumps(completion.content[:120])
        return SummaryOutcome(None, 1, covered, f"unusable summary{cut}: {preview}")
    return SummaryOutcome(summary, 1, covered)
