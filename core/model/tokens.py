"""Token accounting: character-based estimates and calibration arithmetic.

The estimate is `chars / chars_per_token` plus fixed per-message and per-request
overheads. Each response's `usage.prompt_tokens` moves the model's ratio towards the
observed one (an exponential moving average; `core.model.calibration` persists it per model),
so the estimate converges to the server's real tokenizer. Pure functions only.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

DEFAULT_CHARS_PER_TOKEN = 4.0  # the stored per-message estimate, before any calibration
MESSAGE_OVERHEAD_TOKENS = 4  # role and separators the chat template adds per message
REQUEST_OVERHEAD_TOKENS = 3  # the assistant turn header
CALIBRATION_RATE = 0.3  # weight of the newest observation
MIN_RATIO, MAX_RATIO = 0.5, 12.0
MIN_CALIBRATION_CHARS = 400  # tiny requests are dominated by overheads: skip them
# Chars per token of real tokenizers on prose, code and JSON (CJK text near the low end).
PLAUSIBLE_RATIOS = (1.0, 6.0)
# Counting the tools or not must change the observed ratio by this factor to tell which.
MIN_TOOLS_SEPARATION = 1.25


def estimate_tokens(text: str, chars_per_token: float = DEFAULT_CHARS_PER_TOKEN) -> int:
    """A character-based token estimate (stored with each message)."""
    return int(len(text) / chars_per_token) + 1


def message_chars(message: dict[str, Any]) -> int:
    """Characters of one request message that the tokenizer sees (content and tool calls)."""
    content = message.get("content") or ""
    chars = len(content) if isinstance(content, str) else len(json.dumps(content))
    if message.get("tool_calls"):
        chars += len(json.dumps(message["tool_calls"], ensure_ascii=False))
    return chars


def request_chars(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] | None = None
) -> int:
    chars = sum(message_chars(message) for message in messages)
    return chars + (len(json.dumps(list(tools), ensure_ascii=False)) if tools else 0)


def overhead_tokens(message_count: int) -> int:
    return message_count * MESSAGE_OVERHEAD_TOKENS + REQUEST_OVERHEAD_TOKENS


@dataclass(frozen=True)
class TokenEstimator:
    """Estimates tokens from characters with one chars-per-token ratio."""

    chars_per_token: float

    def text(self, text: str) -> int:
        return int(len(text) / self.chars_per_token) + 1 if text else 0

    def chars(self, chars: int) -> int:
        return int(chars / self.chars_per_token)

    def message(self, message: dict[str, Any]) -> int:
        return self.chars(message_chars(message)) + MESSAGE_OVERHEAD_TOKENS

    def request(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        chars = request_chars(messages, tools)
        return self.chars(chars) + overhead_tokens(len(messages))


@dataclass(frozen=True)
class Calibration:
    model: str
    chars_per_token: float
    samples: int
    last_ratio: float | None


def observed_ratio(chars: int, message_count: int, prompt_tokens: int) -> float | None:
    """chars per token implied by a response's `usage.prompt_tokens`, or None if unusable."""
    content_tokens = prompt_tokens - overhead_tokens(message_count)
    if chars < MIN_CALIBRATION_CHARS or content_tokens <= 0:
        return None
    return min(MAX_RATIO, max(MIN_RATIO, chars / content_tokens))


def next_calibration(
    current: Calibration | None,
    default_ratio: float,
    model: str,
    chars: int,
    message_count: int,
    prompt_tokens: int | None,
) -> Calibration | None:
    """`current` moved towards the ratio a response implies; None when it says nothing."""
    if not prompt_tokens:
        return None
    observed = observed_ratio(chars, message_count, prompt_tokens)
    if observed is None:
        return None
    start = current.chars_per_token if current else default_ratio
    ratio = start + CALIBRATION_RATE * (observed - start)
    samples = (current.samples if current else 0) + 1
    logger.debug("calibrated %s: %.3f chars/token (observed %.3f)", model, ratio, observed)
    return Calibration(model, ratio, samples, observed)


def tools_counted(with_tools: float, without_tools: float, reference: float) -> bool | None:
    """Whether a prompt's token count included the tool schemas, from the ratio it implies
    either way: True, False, or None when the tools are too small a share to tell.

    Some servers silently leave the tools out of the prompt (llama.cpp's default chat
    format); counting their characters anyway made 11.4 chars/token of a real 3.7-4.1.
    The reading that is implausible for any tokenizer loses; else the one nearer the
    model's usual ratio (`reference`) wins.
    """
    if with_tools < without_tools * MIN_TOOLS_SEPARATION:
        return None
    low, high = PLAUSIBLE_RATIOS
    if with_tools > high >= without_tools:
        return False
    if without_tools < low <= with_tools:
        return True
    return abs(math.log(with_tools / reference)) < abs(math.log(without_tools / reference))
