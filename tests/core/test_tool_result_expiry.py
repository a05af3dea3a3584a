"""Stored tool results expire by age and by total size per chat (CoPaw, issue 32), and an
expired one reads as expired to the model."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from bots.runtime import Runtime
from core.api import Inbound, TurnContext
from core.chat.files import TOOL_RESULTS_DIR, chat_prefix
from core.clock import utc_now
from core.config import Config
from core.errors import ToolError
from core.tools.results import keep_tool_result, read_stored_result
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


def _stored(runtime: Runtime, chat_key: str, days_ago: int, chars: int) -> str:
    """A stored result written `days_ago` days ago (its name carries the time); its path
    relative to the chat."""
    chat = runtime.store.get_or_create_chat("terminal", chat_key)
    stamp = (utc_now() - timedelta(days=days_ago)).strftime("%Y%m%dT%H%M%S%f")
    relative = f"{TOOL_RESULTS_DIR}/{stamp}-tool-call_{days_ago}.txt"
    runtime.agent.files.write_text(f"{chat_prefix(chat)}/{relative}", "r" * chars)
    return relative


def _left(runtime: Runtime, chat_key: str) -> list[str]:
    chat = runtime.store.get_or_create_chat("terminal", chat_key)
    prefix = f"{chat_prefix(chat)}/"
    return [p.removeprefix(prefix) for p in runtime.agent.files.list(prefix + TOOL_RESULTS_DIR)]


def test_results_expire_by_age_and_then_oldest_first_by_total_size(runtime: Runtime) -> None:
    config = runtime.config
    config.context.tool_result_max_age_days = 30
    config.context.tool_result_max_total_chars = 50_000
    ancient = _stored(runtime, "exp", 40, 20_000)
    older = _stored(runtime, "exp", 10, 20_000)
    newer = _stored(runtime, "exp", 5, 20_000)
    chat = runtime.store.get_or_create_chat("terminal", "exp")
    excerpt = keep_tool_result(config, runtime.agent.files, chat, "call_9", "big", "x" * 20_000)
    assert "stored in full at" in excerpt
    left = _left(runtime, "exp")
    assert ancient not in left and older not in left  # age, then size (newest first kept)
    assert newer in left and len(left) == 2
    with pytest.raises(ToolError, match="has expired"):
        read_stored_result(config, runtime.agent.files, chat, {"path": older})


def test_zero_keeps_every_result(runtime: Runtime) -> None:
    config = runtime.config
    config.context.tool_result_max_age_days = 0
    config.context.tool_result_max_total_chars = 0
    old = _stored(runtime, "keep", 400, 30_000)
    chat = runtime.store.get_or_create_chat("terminal", "keep")
    keep_tool_result(config, runtime.agent.files, chat, "call_1", "big", "x" * 20_000)
    assert old in _left(runtime, "keep") and len(_left(runtime, "keep")) == 2


async def test_the_model_reads_that_a_result_expired(runtime: Runtime) -> None:
    chat = runtime.store.get_or_create_chat("terminal", "gone")
    turn = TurnContext(chat, Inbound("terminal", "gone", "read it"))
    path = f"{TOOL_RESULTS_DIR}/20200101T000000000000-big-call_1.txt"
    result = await runtime.extensions.tools.execute(
        "read_tool_result", f'{{"path": "{path}"}}', turn
    )
    assert result.startswith(f"error: the stored tool result at {path} has expired")
