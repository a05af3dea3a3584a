"""Per-model calibration of the token estimate, persisted through the session store.

Calibration counts only what the server tokenised: when a request carried tools, the
response tells whether their schemas reached the prompt, and the model's profile
remembers it (`tools_in_prompt`), so the estimate leaves them out where they are dropped.
Where they reach it, the prompt's tokens are split between the messages (the ratio) and
the tool block (the profile's tool cost: preamble, per-character cost, repeated per system
message or not), each learned from its share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.config import Config
from core.model.profile import ModelProfile, learn, load_profile, tool_cost, tool_cost_facts
from core.model.tokens import (
    PLAUSIBLE_RATIOS,
    Calibration,
    TokenEstimator,
    ToolSample,
    copies_reading,
    next_calibration,
    next_tool_cost,
    observed_ratio,
    request_chars,
    schema_chars,
    system_messages,
    tools_counted,
)
from core.storage.store import SessionStore


def estimator_for(
    store: SessionStore,
    config: Config,
    model: str | None = None,
    profile: ModelProfile | None = None,
) -> TokenEstimator:
    """The calibrated estimator of `model` (default `[llm] model`), else the configured ratio,
    with the tool cost learned in its profile (`profile`, when the caller has it read)."""
    name = model or config.llm.model
    ratio = _ratio(store.load_calibration(name), config)
    return TokenEstimator(ratio, tool_cost(profile or load_profile(store, name)))


def _ratio(calibration: Calibration | None, config: Config) -> float:
    return calibration.chars_per_token if calibration else config.context.chars_per_token


def calibrate(
    store: SessionStore,
    config: Config,
    model: str,
    chars: int,
    message_count: int,
    prompt_tokens: int | None,
) -> Calibration | None:
    """Move `model`'s ratio towards the one observed in a response; persist and return it."""
    with store.transaction():
        current = store.load_calibration(model)
        calibration = next_calibration(
            current, config.context.chars_per_token, model, chars, message_count, prompt_tokens
        )
        if calibration is not None:
            store.save_calibration(calibration)
    return calibration


def _plausible_ratio(calibration: Calibration | None, config: Config) -> float:
    """The model's calibrated ratio when plausible, else the configured one."""
    low, high = PLAUSIBLE_RATIOS
    if calibration and low <= calibration.chars_per_token <= high:
        return calibration.chars_per_token
    return config.context.chars_per_token


@dataclass(frozen=True)
class ModelReading:
    """What one calibration step knows of a model before it learns: its profile, its
    estimator and its usual ratio, read from the store once for the whole step."""

    profile: ModelProfile
    estimator: TokenEstimator
    usual_ratio: float


def read_model(store: SessionStore, config: Config, model: str) -> ModelReading:
    """`model`'s profile and calibration, each read once."""
    calibration = store.load_calibration(model)
    profile = load_profile(store, model)
    estimator = TokenEstimator(_ratio(calibration, config), tool_cost(profile))
    return ModelReading(profile, estimator, _plausible_ratio(calibration, config))


def tools_were_counted(
    store: SessionStore,
    model: str,
    known: ModelReading,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    prompt_tokens: int,
) -> bool:
    """Whether `prompt_tokens` included the tool schemas. A clear reading is learned for
    the model; an unclear one falls back to what was learned before (else True)."""
    count = len(messages)
    chars = request_chars(messages)
    estimator = known.estimator
    if estimator.tool_cost.samples and known.profile.tools_in_prompt:
        return True  # learned: what the estimate misses is the tool cost's to fit, not a flip
    if estimator.tool_cost.samples:  # the messages' ratio once the tools' tokens are off
        tokens = prompt_tokens - estimator.tools(tools, messages)
        with_tools = observed_ratio(chars, count, tokens)
    else:  # no tool cost learned yet: the tools' characters at the messages' ratio
        with_tools = observed_ratio(request_chars(messages, tools), count, prompt_tokens)
    without = observed_ratio(chars, count, prompt_tokens)
    reading = None
    if with_tools and without:
        reading = tools_counted(with_tools, without, known.usual_ratio)
    if reading is None:
        return known.profile.tools_in_prompt is not False
    learn(store, model, tools_in_prompt=reading)
    return reading


def calibrate_request(
    store: SessionStore,
    config: Config,
    model: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None,
    prompt_tokens: int | None,
) -> Calibration | None:
    """Calibrate `model` on a request and its `usage.prompt_tokens`, counting the tool
    schemas only when the server did: the request joins the tool cost's fit (the profile),
    and what that leaves of the prompt calibrates the messages' ratio."""
    chars = request_chars(messages)
    if not tools or not prompt_tokens:
        return calibrate(store, config, model, chars, len(messages), prompt_tokens)
    known = read_model(store, config, model)
    if not tools_were_counted(store, model, known, messages, tools, prompt_tokens):
        return calibrate(store, config, model, chars, len(messages), prompt_tokens)
    estimator = known.estimator  # learning `tools_in_prompt` leaves the tool cost as it was
    chars_of_tools = schema_chars(tools)
    systems = system_messages(messages)
    block = estimator.tool_block(chars_of_tools)
    per_system = copies_reading(prompt_tokens, estimator.request(messages), block, systems)
    sample = ToolSample(chars, len(messages), chars_of_tools, systems, prompt_tokens)
    cost = next_tool_cost(estimator.tool_cost, sample, per_system, estimator.chars_per_token)
    learn(store, model, **tool_cost_facts(cost))
    tool_tokens = TokenEstimator(estimator.chars_per_token, cost).tools(tools, messages)
    return calibrate(store, config, model, chars, len(messages), prompt_tokens - tool_tokens)


def learn_from_overflow(
    store: SessionStore,
    config: Config,
    model: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    prompt_tokens: int,
) -> bool:
    """Whether an overflow error's stated prompt shows a template that writes the tool block
    into every system message (learned for the model: its requests then carry one system
    message). Nothing else is learned from an error: a server's own loop of tool calls
    (llama-cpp-python's) can grow the prompt it states far past the request sent."""
    estimator = estimator_for(store, config, model)
    if estimator.tool_cost.per_system:
        return False
    block = estimator.tool_block(schema_chars(tools))
    message_tokens = estimator.request(messages)
    if not copies_reading(prompt_tokens, message_tokens, block, system_messages(messages)):
        return False
    learn(store, model, tools_per_system=True)
    return True
