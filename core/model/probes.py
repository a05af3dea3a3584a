"""`mnemo doctor`'s model checks: is the model served, how large is its window, does its
template accept Mnemo's request layout, does it do tools and structured output.

Each probe is a real request with a tiny `max_tokens`. What a probe learns is remembered
in the model's profile (`core.model.profile`), so the bot starts with it; each failing
check names its fix.
"""

from __future__ import annotations

from typing import Any

from core.api import Check
from core.config import LLMConfig
from core.errors import FormatUnsupported, LLMError, TemplateRejected, ToolsUnsupported
from core.model.client import OpenAILLM
from core.model.discovery import ServerFacts, discover
from core.model.profile import ProfileStore, learn, load_profile, server_disagrees, window_for

PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_time",
        "description": "The current date and time.",
        "parameters": {"type": "object", "properties": {}},
    },
}
PROBE_SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}},
    "required": ["ok"],
}
LATE_SYSTEM_LAYOUT = [
    {"role": "system", "content": "You are a test."},
    {"role": "user", "content": "Hello."},
    {"role": "assistant", "content": "Hi."},
    {"role": "system", "content": "Context: none."},
    {"role": "user", "content": "Say ok."},
]
PLAIN = [{"role": "system", "content": "You are a test."}, {"role": "user", "content": "Say ok."}]


async def model_checks(llm: OpenAILLM, store: ProfileStore, config: LLMConfig) -> list[Check]:
    """The doctor's model checks, in order; stops after a check that makes the rest moot."""
    facts, _ = await discover(llm.client(), store, config, llm.model)
    served = _served_check(facts, config)
    if not served.ok:
        return [served]
    checks = [served, _window_check(store, config, facts)]
    for probe in (_layout_check, _tools_check, _structured_check):
        try:
            checks.append(await probe(llm, store, config))
        except LLMError as exc:
            checks.append(Check("model request", False, f"{type(exc).__name__}: {exc}"))
            break
    return checks


def _served_check(facts: ServerFacts, config: LLMConfig) -> Check:
    serves = facts.serves(config.model)
    if serves is False:
        listed = ", ".join((facts.served_models or ())[:8]) or "none"
        return Check(
            "model",
            False,
            f"{config.model!r} is not served at {config.base_url} (it serves: {listed}); "
            f"pull it (`ollama pull {config.model}`) or set [llm] model",
        )
    if serves is None:
        return Check("model", True, f"{config.model} (the server does not list it; it answers)")
    return Check("model", True, f"{config.model} is served ({facts.kind})")


def _window_check(store: ProfileStore, config: LLMConfig, facts: ServerFacts) -> Check:
    window = window_for(store, config, config.model)
    detail = f"{window.tokens} tokens ({window.source})"
    disagreement = server_disagrees(config, load_profile(store, config.model))
    if disagreement:
        return Check("context window", False, f"{detail}; {disagreement}", fatal=False)
    if window.source.startswith("default"):
        return Check(
            "context window",
            False,
            f"{detail}: the server does not say; the first overflow error will, or set "
            "[llm] context_window",
            fatal=False,
        )
    if facts.kind == "ollama" and "default" in window.source:
        detail += "; raise it with the model's num_ctx or OLLAMA_CONTEXT_LENGTH"
    return Check("context window", True, detail)


async def _layout_check(llm: OpenAILLM, store: ProfileStore, config: LLMConfig) -> Check:
    try:
        await llm.complete(LATE_SYSTEM_LAYOUT, max_tokens=1)
    except TemplateRejected:
        learn(store, llm.model, late_system=False)
        await llm.complete(PLAIN, max_tokens=1)  # the fallback layout must pass
        return Check(
            "request layout",
            False,
            "the chat template refuses a system message after the first; Mnemo carries the"
            " memory inside the user message instead (learned)",
            fatal=False,
        )
    learn(store, llm.model, late_system=True)
    return Check("request layout", True, "the template accepts Mnemo's layout")


async def _tools_check(llm: OpenAILLM, store: ProfileStore, config: LLMConfig) -> Check:
    if config.tools == "off":
        return Check("tools", True, 'off ([llm] tools = "off")')
    try:
        with_tools = await llm.complete(PLAIN, [PROBE_TOOL], max_tokens=1)
    except ToolsUnsupported:
        if config.tools == "on":
            return Check("tools", False, 'the model does not do tools: set [llm] tools = "auto"')
        learn(store, llm.model, tools=False)
        return Check(
            "tools",
            False,
            "the model does not do tools; memory tools are off (choose a model with tool"
            " support to use them)",
            fatal=False,
        )
    without = await llm.complete(PLAIN, max_tokens=1)
    learn(store, llm.model, tools=True)
    if with_tools.prompt_tokens and with_tools.prompt_tokens == without.prompt_tokens:
        learn(store, llm.model, tools_in_prompt=False)
        return Check(
            "tools",
            False,
            "the server leaves tool schemas out of the prompt (its chat template ignores"
            " tools), so the model cannot call them; llama.cpp: start it with --jinja or"
            " --chat_format chatml-function-calling",
            fatal=False,
        )
    learn(store, llm.model, tools_in_prompt=True)
    return Check("tools", True, "tool schemas reach the model")


async def _structured_check(llm: OpenAILLM, store: ProfileStore, config: LLMConfig) -> Check:
    formats: list[tuple[str, dict[str, Any]]] = [
        ("json_schema", {"type": "json_schema", "json_schema": _schema_format()}),
        ("json_object", {"type": "json_object", "schema": PROBE_SCHEMA}),
    ]
    for name, response_format in formats:
        try:
            await llm.complete(PLAIN, max_tokens=8, response_format=response_format)
        except FormatUnsupported:
            continue
        learn(store, llm.model, structured=name)
        return Check("structured output", True, f"response_format {name}")
    learn(store, llm.model, structured="none")
    return Check(
        "structured output",
        False,
        "no response_format accepted; the reflector asks for JSON in the prompt and repairs it",
        fatal=False,
    )


def _schema_format() -> dict[str, Any]:
    return {"name": "probe", "schema": PROBE_SCHEMA, "strict": True}
