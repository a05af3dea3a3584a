"""Per-model calibration of the token estimate, persisted through the session store."""

from __future__ import annotations

from core.config import Config
from core.store import SessionStore
from core.tokens import Calibration, TokenEstimator, next_calibration


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
