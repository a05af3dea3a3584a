"""Streaming against the real llama-cpp-python server: its SSE deltas reach the channel's
`show_partial` as the reply grows, and the text delivered is the reply stored, once (and
the one the dashboard's live turn ends with)."""

from __future__ import annotations

from itertools import pairwise

import pytest

from core.api import Inbound
from core.bench.fakes.llama_server import LlamaServer
from tests.core.support import stored
from tests.fakes.channels import StreamingRecordingChannel
from tests.real.conftest import RuntimeFactory

pytestmark = pytest.mark.real


async def test_a_real_turn_streams_and_the_final_text_is_the_stored_reply(
    default_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    async with real_runtime(default_server) as runtime:
        channel = StreamingRecordingChannel()
        runtime.dispatcher.attach(channel)
        try:
            said = Inbound("terminal", "stream", "Tell me a short story about a cat.", "1")
            assert await runtime.dispatcher(said) is None  # delivered through the channel
        finally:
            await runtime.dispatcher.stop()
        shown = channel.shown()
        assert len(shown) > 1, f"the reply did not stream: {shown!r}"
        assert all(later.startswith(earlier) for earlier, later in pairwise(shown))
        [final] = channel.texts()
        assert final.strip()
        assert final.startswith(shown[-1].rstrip()[:20])
        replies = [text for role, text in stored(runtime, "stream") if role == "assistant"]
        assert replies == [final]
        # The dashboard's live turn ends with the same text, its request planned in the window.
        chat = runtime.store.find_chat("terminal", "stream")
        assert chat is not None and runtime.agent.live is not None
        live = runtime.agent.live.get(chat.id)
        assert live is not None and (live.state, live.reply) == ("done", final)
        assert 0 < live.request["tokens"] <= live.request["window"]
