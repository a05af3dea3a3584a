"""The Telegram channel's fixtures: the fake Bot API and a runtime pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bots.runtime import Runtime, build_runtime
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import FakeTelegramServer
from core.turn.dispatcher import Dispatcher
from tests.conftest import make_config

FAST_RETRIES = (0.05, 0.05, 0.05)  # a failed send is tried again at once in tests


@pytest.fixture
def tg() -> Iterator[FakeTelegramServer]:
    with FakeTelegramServer() as server:
        yield server


@pytest.fixture
def tg_runtime(
    tmp_path: Path, fake_llm: FakeOpenAIServer, tg: FakeTelegramServer
) -> Iterator[Runtime]:
    # Whole replies: these tests read what sendMessage carried; streaming has its own tests
    # (tests/bots/test_telegram_stream.py), which switch it on.
    telegram = {"token": "123:TEST", "api_base_url": tg.base_url, "api_file_url": tg.file_url,
                "streaming": False}  # fmt: skip
    runtime = build_runtime(make_config(tmp_path / "data", fake_llm.base_url, telegram=telegram))
    runtime.dispatcher = Dispatcher(runtime.agent, retry_delays_s=FAST_RETRIES)
    yield runtime
    runtime.close()
