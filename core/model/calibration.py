"""Per-model calibration of the token estimate, persisted through the session store.

Calibration counts only what the server tokenised: when a request carried tools, the
response tells whether their schemas reached the prompt, and the model's profile
remembers it (`tools_in_prompt`), so the estimate leaves them out where they are dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from core.config import Config
from core.model.profile import learn, load_profile
from core.model.tokens import (
    PLAUSIBLE_RATIOS,
    Calibration,
    TokenEstimator,
    next_calibration,
    observed_ratio,
    request_chars,
    tools_counted,
)
from core.storage.store import SessionStore


def estimator_for(store: SessionStore, config: Config, model: str | None = None) -> TokenEstimator:
    """The calibrated estimator of `model` (default `[llm] model`), else the configured ratio."""
    calibration = store.load_calibration(model or config.llm.model)
    ratio = calibration.chars_per_token if calibration else config.context.chars_per_token
    return TokenEstimator(ratio)


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


def usual_ratio(store: SessionStore, config: Config, model: str) -> float:
    """The model's calibrated ratio when plausible, else the configured one."""
    calibration = store.load_calibration(model)
    low, high = PLAUSIBLE_RATIOS
    if calibration and low <= calibration.chars_per_token <= high:
        return calibration.chars_per_token
    return config.context.chars_per_token


def tools_were_counted(
    store: SessionStore,
    config: Config,
    model: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]],
    prompt_tokens: int,
) -> bool:
    """Whether `prompt_tokens` included the tool schemas. A clear reading is learned for
    the model; an unclear one falls back to what was learned before (else True)."""
    count = len(messages)
    with_tools = observed_ratio(request_chars(messages, tools), count, prompt_tokens)
    without = observed_ratio(request_chars(messages), count, prompt_tokens)
    reading = None
    if with_tools and without:
        reading = tools_counted(with_tools, without, usual_ratio(store, config, model))
    if reading is None:
        return load_profile(store, model).tools_in_prompt is not False
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
    schemas only when the server did."""
    counted = bool(tools and prompt_tokens) and tools_were_counted(
        store, config, model, messages, tools or (), prompt_tokens or 0
    )
    chars = request_chars(messages, tools if counted else None)
    return calibrate(store, config, model, chars, len(messages), prompt_tokens)
