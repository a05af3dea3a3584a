"""Fitting one reflector request into the model's context window.

The window and the calibrated token estimate are the turn's (`core.model.profile`,
`core.model.calibration`), looked up under the reflector's model. The prompt and the
contributors' rules are counted first; their listings and the known memories get a capped
share; the unseen messages take what is left, as many as fit. A message alone that does
not fit is clipped, never skipped. A request the server still refuses, or whose reply is
cut, is retried smaller (`Shape.smaller`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any
from zoneinfo import ZoneInfo

from core.config import Config
from core.model.calibration import estimator_for
from core.model.profile import Window, effective_window, request_tokens_for, window_for
from core.model.tokens import TokenEstimator
from core.storage.store import SessionStore, StoredMessage
from reflector.dates import UTC
from reflector.extraction import (
    MESSAGE_MAX_CHARS,
    MESSAGE_MIN_CHARS,
    TRANSCRIPT_MAX_CHARS,
    ExistingMemory,
    PromptExtra,
    Transcript,
    build_messages,
    render_transcript,
)

ESTIMATE_MARGIN = 0.05  # the estimate is calibrated, not exact; an overflow costs a call
KNOWN_SHARE = 0.25  # known memories: at most this share of the usable window
LISTING_SHARE = 0.15  # each contributor's listing: at most this share
_NO_MESSAGES = Transcript("", 0, 0, 0)


@dataclass(frozen=True)
class Budget:
    """What one reflector request may use with the reflector's model."""

    window: Window
    max_tokens: int  # room for the answer, sent as `max_tokens`
    usable: int  # tokens the prompt may take
    estimator: TokenEstimator
    zone: ZoneInfo = UTC  # the chat's days (its /timezone, else `[memory] timezone`)

    def chars(self, tokens: int) -> int:
        return max(0, int(tokens * self.estimator.chars_per_token))


def budget_for(
    store: SessionStore, config: Config, model: str, zone: ZoneInfo | None = None
) -> Budget:
    """The budget of the next request: read afresh, since an overflow may teach a window.
    Its transcript's days are read in `zone` (the chat's), else in `[memory] timezone`."""
    window = window_for(store, config.llm, model)
    max_output = config.llm.max_output_tokens
    usable = int(effective_window(window.tokens, max_output) * (1 - ESTIMATE_MARGIN))
    return Budget(
        window,
        request_tokens_for(window.tokens, max_output),
        usable,
        estimator_for(store, config, model),
        zone or ZoneInfo(config.memory.timezone),
    )


@dataclass(frozen=True)
class Shape:
    """The most the next batch may hold: messages, and characters of each message."""

    max_messages: int
    message_chars: int = MESSAGE_MAX_CHARS

    def smaller(self, sent: Transcript) -> Shape | None:
        """Half of what was sent (half the messages; for one message, half its text), or
        None when a single message is already as short as it may get."""
        if sent.count > 1:
            return Shape(max(1, sent.count // 2), self.message_chars)
        chars = len(sent.text) // 2
        return Shape(1, chars) if chars >= MESSAGE_MIN_CHARS else None


@dataclass(frozen=True)
class Batch:
    """One planned request: the messages it covers and what it sends."""

    transcript: Transcript
    request: list[dict[str, Any]]
    tokens: int  # the request's estimate
    known: int  # known memories listed


KnownLookup = Callable[[str], Sequence[ExistingMemory]]


def plan_batch(
    budget: Budget,
    messages: Sequence[StoredMessage],
    shape: Shape,
    extras: Sequence[PromptExtra],
    known_for: KnownLookup,
) -> Batch | None:
    """The request for as many of `messages` as fit `budget` in `shape`; None if none.

    `known_for(text)` gives the chat's memories for the messages' text, most useful first;
    those that fit their share are listed.
    """
    candidates = messages[: shape.max_messages]
    listing_chars = budget.chars(int(budget.usable * LISTING_SHARE))
    extras = [replace(e, listing=clip_listing(e.listing, listing_chars)) for e in extras]
    room = budget.usable - budget.estimator.request(build_messages(_NO_MESSAGES, [], extras))
    chars = _transcript_chars(budget, room)
    draft = render_transcript(candidates, chars, shape.message_chars, budget.zone)
    if draft is None:
        return None
    known_cap = min(int(budget.usable * KNOWN_SHARE), room // 2)
    known = fit_known(known_for(draft.plain), known_cap, budget.estimator)
    known_tokens = sum(_known_tokens(m, budget.estimator) for m in known)
    chars = _transcript_chars(budget, room - known_tokens)
    transcript = render_transcript(candidates, chars, shape.message_chars, budget.zone)
    assert transcript is not None  # the same messages as the draft
    request = build_messages(transcript, known, extras)
    return Batch(transcript, request, budget.estimator.request(request), len(known))


def _transcript_chars(budget: Budget, tokens: int) -> int:
    return min(TRANSCRIPT_MAX_CHARS, budget.chars(tokens))


def _known_tokens(memory: ExistingMemory, estimator: TokenEstimator) -> int:
    return estimator.text(f"[id={memory.id}] [{memory.category}] {memory.content}") + 1


def fit_known(
    memories: Sequence[ExistingMemory], max_tokens: int, estimator: TokenEstimator
) -> list[ExistingMemory]:
    """The first of `memories` (most useful first) that fit `max_tokens`, in id order."""
    kept: list[ExistingMemory] = []
    used = 0
    for memory in memories:
        cost = _known_tokens(memory, estimator)
        if used + cost > max_tokens:
            break
        kept.append(memory)
        used += cost
    return sorted(kept, key=lambda m: m.id)


def clip_listing(listing: str, max_chars: int) -> str:
    """`listing`'s first whole lines within `max_chars`, and how many were left out."""
    if len(listing) <= max_chars:
        return listing
    lines = listing.splitlines()
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > max_chars - 30:
            break
        kept.append(line)
        used += len(line) + 1
    return "\n".join([*kept, f"({len(lines) - len(kept)} more not shown)"])
