"""One batch's model calls: the largest batch that fits, structured output first, a cut
reply told apart from a bad one.

A batch that overflows the window, or whose reply is cut, is halved and asked again
(`reflector.batching.Shape.smaller`) until one message is left, then that message's text;
one whose reply stays unusable after a repair is halved too, a bounded number of times.

The request asks for the reply's JSON schema in the form the model's server accepts
(`reflector.reply_format`); a refused form falls back to the next one and the one that
works is remembered per model. A reply that ends at `max_tokens` (`finish_reason` "length")
is reported as cut, so the caller retries a smaller batch instead of asking for a repair;
any other unusable reply gets one repair call. A stated window in an overflow error is
learned, and every answer calibrates the token estimate, as the turn's do.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from zoneinfo import ZoneInfo

from core.config import Config
from core.errors import ContextOverflow, FormatUnsupported, LLMError, ReplyInvalid
from core.model.calibration import calibrate
from core.model.client import LLM, Completion
from core.model.profile import StructuredMode, learn, load_profile
from core.model.tokens import request_chars
from core.model.usage import complete_recorded
from core.storage.store import SessionStore, StoredMessage
from memory.store import CATEGORIES
from reflector.batching import Batch, Budget, KnownLookup, Shape, budget_for, plan_batch
from reflector.contributors import PassContributor
from reflector.extraction import (
    REPAIR_PROMPT,
    PromptExtra,
    decode_reply,
    parse_memories,
    repair_messages,
)
from reflector.reply_format import FALLBACK, reply_schema, response_format
from reflector.store import ChatRun

logger = logging.getLogger(__name__)

USAGE_KIND = "reflector"
FIRST_MODE: StructuredMode = "json_schema"
CUT = "the reply was cut at max_tokens ({max_tokens} tokens)"
UNUSABLE_SPLITS = 2  # halvings after replies unusable even when repaired, per batch
REPAIR_MIN_CHARS = 200  # of the unusable reply echoed back in the repair request


def checked_reply(reply: str) -> dict[str, Any]:
    """The decoded reply, once its `memories` list is known to be usable."""
    data = decode_reply(reply)
    parse_memories(data, CATEGORIES)
    return data


def _asked(run: ChatRun, batch: Batch) -> None:
    """Keep the range a batch asks about in its run."""
    run.first_message_id = batch.transcript.first_id
    run.last_message_id = batch.transcript.last_id
    run.messages_seen = batch.transcript.count


class ExtractionCalls:
    """Asks the reflector's model for one batch's reply."""

    def __init__(
        self,
        config: Config,
        store: SessionStore,
        llm: LLM,
        contributors: Sequence[PassContributor] = (),
    ) -> None:
        self.config = config
        self.store = store
        self.llm = llm
        self.contributors = list(contributors)
        self.schema = reply_schema(CATEGORIES, {c.key: c.schema() for c in contributors})

    @property
    def model(self) -> str:
        return self.config.reflector.model or self.llm.model

    async def reply_to_fitting(
        self,
        run: ChatRun,
        messages: Sequence[StoredMessage],
        shape: Shape,
        known_for: KnownLookup,
        zone: ZoneInfo | None = None,
    ) -> tuple[Batch, dict[str, Any]]:
        """The reply to the largest batch of `messages` (not empty) that fits `shape` and
        the window and is answered in full; the range asked about is kept in `run`. Its
        transcript dates messages in `zone` (the chat's; None: `[memory] timezone`).

        A reply unusable even after its repair is also retried on half the batch, at
        most `UNUSABLE_SPLITS` times (a small model often manages fewer messages).
        Raises the last `ContextOverflow`, or `ReplyInvalid` (cut, or unusable after a
        repair), once nothing smaller is left to try.
        """
        extras = [
            PromptExtra(c.key, c.instructions(), c.listing(run.chat_id)) for c in self.contributors
        ]
        unusable = 0
        while True:
            budget = budget_for(self.store, self.config, self.model, zone)
            batch = plan_batch(budget, messages, shape, extras, known_for)
            assert batch is not None  # `messages` is not empty
            _asked(run, batch)
            if not batch.transcript.text:
                return batch, {}  # tool messages only: nothing to ask
            error: LLMError
            try:
                data = await self.ask(run, batch, budget)
                if data is not None:
                    return batch, data
                error = ReplyInvalid(CUT.format(max_tokens=budget.max_tokens))
            except ContextOverflow as exc:
                error = exc
            except ReplyInvalid as exc:
                unusable += 1
                if unusable > UNUSABLE_SPLITS or batch.transcript.count == 1:
                    raise
                error = exc
            smaller = shape.smaller(batch.transcript)
            if smaller is None:
                raise error
            count = batch.transcript.count
            logger.info("chat %s: %s (%d messages); trying %d",
                        run.chat_id, error, count, smaller.max_messages)  # fmt: skip
            shape = smaller

    async def ask(self, run: ChatRun, batch: Batch, budget: Budget) -> dict[str, Any] | None:
        """The batch's decoded reply; None when the reply was cut at `max_tokens` (a cut
        reply that still decodes in full is used).

        Raises `ContextOverflow` (having learned a window the error states) and
        `ReplyInvalid` (a reply still unusable after one repair call).
        """
        completion = await self.send(run, batch.request, budget.max_tokens)
        try:
            return checked_reply(completion.content)
        except ReplyInvalid as first:
            if completion.finish_reason == "length":
                return None
            logger.info("chat %s: reply unusable (%s); asking once more", run.chat_id, first)
            prompt_tokens = budget.estimator.text(REPAIR_PROMPT) + 8
            room = budget.chars(budget.usable - batch.tokens - prompt_tokens)
            repair = repair_messages(
                batch.request, completion.content, str(first), max(REPAIR_MIN_CHARS, room)
            )
            completion = await self.send(run, repair, budget.max_tokens)
        try:
            return checked_reply(completion.content)
        except ReplyInvalid:
            if completion.finish_reason == "length":
                return None
            raise

    async def send(
        self, run: ChatRun, messages: list[dict[str, Any]], max_tokens: int
    ) -> Completion:
        """One request in the model's structured-output mode; while the server refuses the
        format, the next mode is tried and remembered."""
        known = load_profile(self.store, self.model).structured
        mode = known or FIRST_MODE
        while True:
            try:
                completion = await self._complete(
                    run, messages, max_tokens, response_format(mode, self.schema)
                )
            except FormatUnsupported as exc:
                fallback = FALLBACK[mode]
                if fallback is None:
                    raise
                logger.info("model %s refuses response_format %s (%s)", self.model, mode, exc)
                learn(self.store, self.model, structured=fallback)
                mode = known = fallback
                continue
            except ContextOverflow as exc:
                self._learn_window(exc)
                raise
            if known != mode:
                learn(self.store, self.model, structured=mode)
            return completion

    def _learn_window(self, exc: ContextOverflow) -> None:
        """Remember the window an overflow error states (unless the config sets one)."""
        if not exc.limit or self.config.llm.context_window:
            return
        if load_profile(self.store, self.model).window != exc.limit:
            learn(self.store, self.model, window=exc.limit, window_source="overflow error")

    async def _complete(
        self,
        run: ChatRun,
        messages: list[dict[str, Any]],
        max_tokens: int,
        format_: dict[str, Any] | None,
    ) -> Completion:
        completion = await complete_recorded(
            self.llm,
            self.store,
            run.chat_id,
            USAGE_KIND,
            messages,
            model=self.config.reflector.model or None,
            max_tokens=max_tokens,
            response_format=format_,
        )
        run.model = completion.model or self.model
        run.prompt_tokens = (run.prompt_tokens or 0) + (completion.prompt_tokens or 0)
        run.completion_tokens = (run.completion_tokens or 0) + (completion.completion_tokens or 0)
        calibrate(
            self.store,
            self.config,
            self.model,
            request_chars(messages),
            len(messages),
            completion.prompt_tokens,
        )
        return completion
