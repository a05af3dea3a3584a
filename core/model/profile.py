"""What Mnemo knows about a model as its server serves it, learned once and remembered.

A `ModelProfile` holds facts that the configuration rarely states and a server shows only
by how it answers: its context window (and where that figure came from), whether its chat
template accepts a system message after the first, whether it does tool calls, whether the
tool schemas reach the prompt, which structured-output request it accepts. Facts come from
asking the server (`core.model.discovery`) or from its errors (`core.turn.agent`), and are persisted
per model through the session store, so a restart does not learn them again.

`[llm] context_window` and `[llm] tools` win over anything learned.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Literal, Protocol

from core.config import LLMConfig
from core.model.tokens import ToolCost, ToolSample

logger = logging.getLogger(__name__)

DEFAULT_WINDOW = 4_096  # Ollama's default num_ctx: a guess that rarely overshoots
MIN_WINDOW = 256

# Windows of hosted models, whose servers do not say (longest matching prefix wins).
# Open-weight models are absent on purpose: their window is whatever the server was
# started with (Ollama serves 4,096 by default whatever the model was trained for).
HOSTED_WINDOWS: dict[str, int] = {
    "gpt-4.1": 1_047_576,
    "gpt-4o": 128_000,
    "gpt-4-turbo": 128_000,
    "gpt-4": 8_192,
    "gpt-3.5-turbo": 16_385,
    "gpt-5": 400_000,
    "o1": 200_000,
    "o3": 200_000,
    "o4-mini": 200_000,
    "claude": 200_000,
    "gemini": 1_048_576,
}

_RUNNING_FACTS = frozenset({"tools_fixed", "tools_per_char", "tools_samples"})

StructuredMode = Literal["json_schema", "json_object", "none"]


@dataclass(frozen=True)
class ModelProfile:
    model: str
    window: int | None = None
    window_source: str = ""  # e.g. "server /props", "overflow error"
    late_system: bool | None = None  # None: not known yet
    tools: bool | None = None
    tools_in_prompt: bool | None = None
    structured: StructuredMode | None = None
    served_model: str | None = None  # the id the server reports (the label to show)
    vision: bool | None = None  # takes image parts; None: not known (`core.chat.media` guesses)
    # What the tool schemas cost in the prompt (`core.model.tokens.ToolCost`), as learned
    # from the server's answers; None: not learned yet.
    tools_fixed: float | None = None
    tools_per_char: float | None = None
    tools_per_system: bool | None = None  # the template repeats them in each system message
    tools_samples: list[list[int]] | None = None  # `ToolSample`s it was fitted on

    def facts(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "model" and v not in (None, "")}

    @classmethod
    def from_facts(cls, model: str, facts: dict[str, Any]) -> ModelProfile:
        known = {f.name for f in fields(cls)} - {"model"}
        return cls(model, **{k: v for k, v in facts.items() if k in known})


class ProfileStore(Protocol):
    def load_model_profile(self, model: str) -> ModelProfile | None: ...

    def save_model_profile(self, profile: ModelProfile) -> None: ...


@dataclass(frozen=True)
class Window:
    """A context window in tokens and where the figure came from."""

    tokens: int
    source: str


def load_profile(store: ProfileStore, model: str) -> ModelProfile:
    return store.load_model_profile(model) or ModelProfile(model)


def learn(store: ProfileStore, model: str, **facts: Any) -> ModelProfile:
    """Record new facts about `model`; logs each one that changes (the tool cost's running
    figures, which move with every request that carries tools, only at debug level)."""
    current = load_profile(store, model)
    updated = replace(current, **facts)
    if updated != current:
        before = current.facts()  # once: each call is a `dataclasses.asdict`
        changed = {k: v for k, v in updated.facts().items() if before.get(k) != v}
        news = {k: v for k, v in changed.items() if k not in _RUNNING_FACTS}
        logger.log(logging.INFO if news else logging.DEBUG, "learned about model %s: %s",
                   model, news or changed)  # fmt: skip
        store.save_model_profile(updated)
    return updated


def tool_cost(profile: ModelProfile) -> ToolCost:
    """The model's learned tool cost, else the default (`ToolCost()`)."""
    default = ToolCost()
    samples = tuple(ToolSample(*map(int, row)) for row in profile.tools_samples or ())
    return ToolCost(
        default.fixed if profile.tools_fixed is None else profile.tools_fixed,
        profile.tools_per_char,
        bool(profile.tools_per_system),
        samples,
    )


def tool_cost_facts(cost: ToolCost) -> dict[str, Any]:
    """`cost` as profile facts (what `learn` takes)."""
    return {
        "tools_fixed": cost.fixed,
        "tools_per_char": cost.per_char,
        "tools_per_system": cost.per_system,
        "tools_samples": [list(sample) for sample in cost.samples],
    }


def hosted_window(model: str) -> int | None:
    name = model.lower().rsplit("/", 1)[-1].split(":", 1)[0]
    matches = [prefix for prefix in HOSTED_WINDOWS if name.startswith(prefix)]
    return HOSTED_WINDOWS[max(matches, key=len)] if matches else None


def resolve_window(llm: LLMConfig, profile: ModelProfile) -> Window:
    """The window to plan with: config, else learned, else a known hosted model, else 4,096."""
    if llm.context_window:
        return Window(llm.context_window, "config [llm] context_window")
    if profile.window:
        return Window(profile.window, profile.window_source or "learned")
    hosted = hosted_window(profile.model)
    if hosted:
        return Window(hosted, "known model")
    return Window(DEFAULT_WINDOW, "default (not stated by the server yet)")


def window_for(store: ProfileStore, llm: LLMConfig, model: str | None = None) -> Window:
    return resolve_window(llm, load_profile(store, model or llm.model))


def answer_reserve(window: int, max_output_tokens: int) -> int:
    """Tokens kept free for the answer: `max_output_tokens`, at most a quarter of the window."""
    return min(max_output_tokens, window // 4)


def effective_window(window: int, max_output_tokens: int) -> int:
    """Tokens a request may use: the window minus the room kept for the answer."""
    return max(MIN_WINDOW, window - answer_reserve(window, max_output_tokens))


def request_tokens_for(window: int, max_output_tokens: int) -> int:
    """`max_tokens` to ask for: what the reserve keeps free."""
    return max(16, answer_reserve(window, max_output_tokens))


def server_disagrees(llm: LLMConfig, profile: ModelProfile) -> str:
    """A warning when `[llm] context_window` and the server's own figure differ, else ''."""
    if llm.context_window and profile.window and profile.window != llm.context_window:
        return (
            f"[llm] context_window is {llm.context_window} but the server says "
            f"{profile.window} ({profile.window_source})"
        )
    return ""


def served_id(profile: ModelProfile) -> str:
    """The id the server reports for the model (discovery stores it as `served_model`),
    else the configured id: what status pages label the model with."""
    return str(getattr(profile, "served_model", None) or profile.model)


def model_label(profile: ModelProfile) -> str:
    """The served id with the configured one when they differ: "SmolLM2-135M-Instruct
    (configured as llama3.2)"."""
    served = served_id(profile)
    return served if served == profile.model else f"{served} (configured as {profile.model})"


def tools_enabled(llm: LLMConfig, profile: ModelProfile) -> bool:
    """Whether to send tools: `[llm] tools` on/off, or auto (unless found unsupported)."""
    if llm.tools != "auto":
        return llm.tools == "on"
    return profile.tools is not False
