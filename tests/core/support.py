"""Shared helpers of the core tests: a runtime with only the built-ins (no embedder to load)."""

from __future__ import annotations

from bots.runtime import Runtime, build_runtime
from core import default_plugin
from core.config import Config


def light_runtime(config: Config) -> Runtime:
    """Like `build_runtime()` but with the built-ins only, so tests see only the core's requests."""
    return build_runtime(config, plugins=[default_plugin])
