"""(d) A tool call round trip on `chatml-function-calling` (the platform, not the model)."""

from __future__ import annotations

import time

import pytest

from core.api import Inbound
from core.bench.fakes.llama_server import LlamaServer
from tests.real.conftest import RuntimeFactory

pytestmark = pytest.mark.real

ASKS = (
    "What time is it right now?",
    "Please tell me the current time.",
    "What is the date and time now? Use the get_current_time tool.",
)
TURN_LIMIT_S = 120  # the loop must stop, not run all its iterations for minutes


async def test_a_tool_call_round_trip_completes_and_no_raw_call_text_reaches_the_user(
    tools_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    replies = []
    async with real_runtime(tools_server) as runtime:
        chat = runtime.store.get_or_create_chat("terminal", "local")
        for text in ASKS:
            began = time.perf_counter()
            reply = await runtime.dispatcher(Inbound("terminal", "local", text))
            replies.append((reply, time.perf_counter() - began))
            stored = runtime.store.messages_between(chat.id, 0, 1000)
            if any(m.role == "tool" for m in stored):
                break
    calls = {c["id"] for m in stored for c in (m.tool_calls or [])}
    results = {m.tool_call_id for m in stored if m.role == "tool"}

    assert calls and calls == results, f"no complete tool round trip: {stored}"
    for reply, seconds in replies:
        assert reply is not None and not reply.is_error, reply
        assert "functions." not in reply.text, reply.text
        assert seconds < TURN_LIMIT_S, f"a turn took {seconds:.0f} s"
