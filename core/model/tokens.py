"""Token accounting: character-based estimates and calibration arithmetic.

The estimate is `chars / chars_per_token` plus fixed per-message and per-request
overheads. Each response's `usage.prompt_tokens` moves the model's ratio towards the
observed one (an exponential moving average; `core.model.calibration` persists it per model),
so the estimate converges to the server's real tokenizer. Tool schemas are estimated apart
(`ToolCost`): a server that renders them into the prompt adds a function-calling preamble
of its own and spells each schema its own way, so they cost `fixed + per_char * chars`,
learned from the server's answers by least squares (`fit_tool_cost`). Pure functions only.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

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
# What offering tools costs before the server's answers say: a chat format's function-calling
# preamble (llama-cpp-python's chatml-function-calling: ~150 tokens with SmolLM2's tokenizer,
# docs/benchmarks.md) plus the schemas' JSON at the estimator's own ratio.
DEFAULT_TOOLS_FIXED_TOKENS = 160.0
TOOLS_SAMPLES = 8  # requests with tools kept to fit the tool cost
PER_CHAR_BOUNDS = (0.02, 2.0)  # tokens per schema character a fit may give
MAX_TOOLS_FIXED_TOKENS = 4_000.0
# How many requests' worth the defaults count for in a fit: the messages' ratio, the tool
# block's preamble, its cost per character.
PRIOR_WEIGHTS = (0.1, 0.01, 0.01)
# A template repeating the tool block in each system message must explain the prompt this
# much better than one block before Mnemo believes it.
MIN_COPIES_EVIDENCE = 0.1


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


def schema_chars(tools: Sequence[dict[str, Any]]) -> int:
    """Characters of the tool schemas as sent (their JSON)."""
    return len(json.dumps(list(tools), ensure_ascii=False)) if tools else 0


def system_messages(messages: Sequence[dict[str, Any]]) -> int:
    return sum(1 for message in messages if message.get("role") == "system")


class ToolSample(NamedTuple):
    """One request that carried tools, and the prompt tokens the server counted for it."""

    message_chars: int
    messages: int
    schema_chars: int
    systems: int  # its system messages (a template may write the tools into each)
    prompt_tokens: int


@dataclass(frozen=True)
class ToolCost:
    """What the tool schemas of a request cost in prompt tokens: `fixed` (the chat format's
    function-calling preamble) plus `per_char` tokens per character of their JSON (None: the
    estimator's own ratio), once, or once per system message (`per_system`: a template,
    like llama-cpp-python's chatml-function-calling, that writes the block into each)."""

    fixed: float = DEFAULT_TOOLS_FIXED_TOKENS
    per_char: float | None = None
    per_system: bool = False
    samples: tuple[ToolSample, ...] = ()  # the requests with tools it was fitted on

    def copies(self, messages: Sequence[dict[str, Any]]) -> int:
        """How many times the tool block reaches the prompt of `messages`."""
        return max(1, system_messages(messages)) if self.per_system else 1


@dataclass(frozen=True)
class TokenEstimator:
    """Estimates tokens from characters with one chars-per-token ratio; tool schemas with
    the model's `ToolCost`."""

    chars_per_token: float
    tool_cost: ToolCost = ToolCost()

    def text(self, text: str) -> int:
        return int(len(text) / self.chars_per_token) + 1 if text else 0

    def chars(self, chars: int) -> int:
        return int(chars / self.chars_per_token)

    def message(self, message: dict[str, Any]) -> int:
        return self.chars(message_chars(message)) + MESSAGE_OVERHEAD_TOKENS

    def tool_block(self, chars: int) -> float:
        """Tokens of one tool block whose schemas have `chars` characters."""
        per_char = self.tool_cost.per_char
        if per_char is None:
            per_char = 1 / self.chars_per_token
        return self.tool_cost.fixed + per_char * chars

    def tools(
        self, tools: Sequence[dict[str, Any]] | None, messages: Sequence[dict[str, Any]] = ()
    ) -> int:
        """Tokens the tool schemas add to a request of `messages` (0 without tools)."""
        if not tools:
            return 0
        copies = self.tool_cost.copies(messages)
        return math.ceil(self.tool_block(schema_chars(tools)) * copies)

    def request(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> int:
        chars = request_chars(messages)
        return self.chars(chars) + overhead_tokens(len(messages)) + self.tools(tools, messages)


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
    """Whether a prompt's token count included the tool schemas, from the messages' ratio
    it implies either way (with the tools: what is left once their estimated tokens are
    taken off): True, False, or None when the tools are too small a share to tell.

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


def copies_reading(
    prompt_tokens: int, message_tokens: int, block: float, system_count: int
) -> bool | None:
    """Whether a prompt holds the tool block once per system message rather than once,
    from which explains `prompt_tokens` better; None with fewer than two system messages
    or too little difference to tell."""
    if system_count < 2:
        return None
    once = abs(prompt_tokens - message_tokens - block)
    each = abs(prompt_tokens - message_tokens - block * system_count)
    if abs(once - each) < MIN_COPIES_EVIDENCE * prompt_tokens:
        return None
    return each < once


def _solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """`matrix` x = `vector` by Gaussian elimination with partial pivoting."""
    size = len(vector)
    rows = [[*matrix[i], vector[i]] for i in range(size)]
    for col in range(size):
        pivot = max(range(col, size), key=lambda r: abs(rows[r][col]))
        rows[col], rows[pivot] = rows[pivot], rows[col]
        for r in range(size):
            if r != col and rows[col][col]:
                factor = rows[r][col] / rows[col][col]
                rows[r] = [a - factor * b for a, b in zip(rows[r], rows[col], strict=True)]
    return [rows[i][size] / rows[i][i] if rows[i][i] else 0.0 for i in range(size)]


def fit_error(samples: Sequence[ToolSample], chars_per_token: float, per_system: bool) -> float:
    """The squared error of `fit_tool_cost` over `samples` (prompt tokens)."""
    per_message_char, fixed, per_char = fit_tool_cost(samples, chars_per_token, per_system)
    error = 0.0
    for s in samples:
        copies = max(1, s.systems) if per_system else 1
        fitted = s.message_chars * per_message_char + copies * (fixed + per_char * s.schema_chars)
        error += (s.prompt_tokens - overhead_tokens(s.messages) - fitted) ** 2
    return error


def fit_tool_cost(
    samples: Sequence[ToolSample], chars_per_token: float, per_system: bool = False
) -> tuple[float, float, float]:
    """(tokens per message char, fixed, per_char) fitted by least squares to `samples`:
    prompt - overheads = message_chars * a + copies * (fixed + per_char * schema_chars).

    Messages grow and shrink from request to request while the tools mostly stay: what
    does not grow with the messages is the tool block. A ridge towards the default (the
    estimator's ratio, `DEFAULT_TOOLS_FIXED_TOKENS`; `PRIOR_WEIGHTS`) settles what the
    samples cannot tell apart (the preamble from the schemas while the offer stays the
    same); the messages' ratio, calibrated on every request, is trusted more than the
    tool block, so a first answer corrects mostly the tool block."""
    prior = [1 / chars_per_token, DEFAULT_TOOLS_FIXED_TOKENS, 1 / chars_per_token]
    copies = [float(max(1, s.systems) if per_system else 1) for s in samples]
    rows = [
        [float(s.message_chars), n, n * s.schema_chars]
        for n, s in zip(copies, samples, strict=True)
    ]
    ys = [float(s.prompt_tokens - overhead_tokens(s.messages)) for s in samples]
    count = max(1, len(rows))
    matrix = [[sum(r[i] * r[j] for r in rows) for j in range(3)] for i in range(3)]
    vector = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(3)]
    for i, weight in enumerate(PRIOR_WEIGHTS):
        ridge = weight * max(1.0, matrix[i][i] / count)
        matrix[i][i] += ridge
        vector[i] += ridge * prior[i]
    per_message_char, fixed, per_char = _solve(matrix, vector)
    low, high = PER_CHAR_BOUNDS
    fixed = min(MAX_TOOLS_FIXED_TOKENS, max(0.0, fixed))
    return per_message_char, fixed, min(high, max(low, per_char))


def next_tool_cost(
    current: ToolCost, sample: ToolSample, per_system: bool | None, chars_per_token: float
) -> ToolCost:
    """`current` refitted with one more request (and what it showed about copies). A
    reading that the tools are written once per system message (or once) overturns what
    was learned only if it fits the kept requests better: one request whose tools cost
    more than the fit says (a bigger offer) is not a template that repeats them."""
    samples = (*current.samples, sample)[-TOOLS_SAMPLES:]
    repeated = current.per_system if per_system is None else per_system
    if repeated != current.per_system and len(samples) > 1:
        now = fit_error(samples, chars_per_token, current.per_system)
        if fit_error(samples, chars_per_token, repeated) >= now:
            repeated = current.per_system
    _, fixed, per_char = fit_tool_cost(samples, chars_per_token, repeated)
    return ToolCost(round(fixed, 1), round(per_char, 5), repeated, samples)
