"""Calibration on what the server tokenises: tool schemas a template drops are not counted."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.model.calibration import calibrate_request, estimator_for
from core.model.profile import ModelProfile, learn, load_profile
from core.model.tokens import Calibration, overhead_tokens, request_chars, tools_counted
from core.storage.database import Database
from core.storage.session_store import DatabaseSessionStore
from core.storage.store import SessionStore
from tests.core.support import light_runtime

TRUE_RATIO = 3.8


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


def tokenizer(counts_tools: bool) -> Callable[[dict[str, Any]], FakeReply]:
    """A server whose tokenizer makes 3.8 chars a token, with or without the tools."""

    def respond(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        chars = request_chars(messages, request.get("tools") if counts_tools else None)
        tokens = int(chars / TRUE_RATIO) + overhead_tokens(len(messages))
        return FakeReply(content="noted " + "y" * 200, prompt_tokens=tokens)

    return respond


async def chat(runtime: Runtime, turns: int) -> None:
    for turn in range(turns):
        await runtime.agent.handle(Inbound("terminal", "cal", f"message {turn} " + "z" * 300))


def ratio(store: SessionStore, model: str) -> float:
    calibration = store.load_calibration(model)
    assert calibration is not None
    return calibration.chars_per_token


@pytest.mark.parametrize("counts_tools", [False, True])
async def test_calibration_learns_whether_the_tools_reach_the_prompt(
    runtime: Runtime, fake_llm: FakeOpenAIServer, counts_tools: bool
) -> None:
    fake_llm.responder = tokenizer(counts_tools)
    await chat(runtime, 15)
    model = runtime.config.llm.model
    assert load_profile(runtime.store, model).tools_in_prompt is counts_tools
    assert abs(ratio(runtime.store, model) - TRUE_RATIO) < 0.1
    chat_row = runtime.store.find_chat("terminal", "cal")
    assert chat_row is not None
    plan = runtime.agent.planner.plan(chat_row, [], tools=True)
    assert plan.tools  # sent either way; counted only where the server counts them
    request = fake_llm.requests[-1]
    served = tokenizer(counts_tools)(request).prompt_tokens
    estimate = estimator_for(runtime.store, runtime.config).request(
        request["messages"], request["tools"] if counts_tools else None
    )
    assert served is not None and abs(estimate - served) / served < 0.05
    assert plan.tools_in_prompt is counts_tools


async def test_a_calibration_spoiled_by_dropped_tools_recovers(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    model = runtime.config.llm.model
    runtime.store.save_calibration(Calibration(model, 11.4, 40, 11.4))
    fake_llm.responder = tokenizer(counts_tools=False)
    await chat(runtime, 15)
    assert load_profile(runtime.store, model).tools_in_prompt is False
    assert abs(ratio(runtime.store, model) - TRUE_RATIO) < 0.2


async def test_a_server_that_starts_counting_the_tools_is_believed(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    model = runtime.config.llm.model
    learn(runtime.store, model, tools_in_prompt=False)
    fake_llm.responder = tokenizer(counts_tools=True)
    await chat(runtime, 3)
    assert load_profile(runtime.store, model).tools_in_prompt is True


def test_tools_counted_reads_the_ratio_both_ways() -> None:
    assert tools_counted(11.4, 3.9, 4.0) is False  # counting them: implausibly coarse
    assert tools_counted(3.9, 0.8, 4.0) is True  # leaving them out: implausibly fine
    assert tools_counted(5.5, 4.0, 4.0) is False  # nearer the model's usual ratio
    assert tools_counted(4.0, 3.0, 4.0) is True
    assert tools_counted(4.1, 3.9, 4.0) is None  # too small a share to tell


class CountingStore(DatabaseSessionStore):
    """The real store, counting its reads of a model's calibration and profile."""

    def __init__(self, db: Database) -> None:
        super().__init__(db)
        self.reads: dict[str, int] = {"calibration": 0, "profile": 0}

    def load_calibration(self, model: str) -> Calibration | None:
        self.reads["calibration"] += 1
        return super().load_calibration(model)

    def load_model_profile(self, model: str) -> ModelProfile | None:
        self.reads["profile"] += 1
        return super().load_model_profile(model)


def test_a_request_with_tools_reads_the_models_facts_once(runtime: Runtime) -> None:
    assert isinstance(runtime.store, DatabaseSessionStore)
    store = CountingStore(runtime.store.db)
    model = runtime.config.llm.model
    messages = [{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 800}]
    tools = [{"type": "function", "function": {"name": "look", "description": "d" * 300}}]
    tokens = int(request_chars(messages, tools) / TRUE_RATIO) + overhead_tokens(len(messages))

    calibrate_request(store, runtime.config, model, messages, tools, tokens)

    assert load_profile(runtime.store, model).tools_in_prompt is True
    # One read for the step; `calibrate` reads the calibration again inside its
    # transaction, and each `learn` (tools_in_prompt, then the tool cost) its profile.
    assert store.reads == {"calibration": 2, "profile": 3}
