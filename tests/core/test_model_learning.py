"""A turn learns from a server's refusal, remembers it, and the user never sees it fail:
a window stated in an overflow error, a template that refuses a late system message, a
model without tools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bots.runtime import Runtime, build_runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, ServerTraits
from core.config import Config
from core.model.profile import load_profile
from tests.conftest import make_config
from tests.core.support import light_runtime


def inbound(text: str) -> Inbound:
    return Inbound("terminal", "alice", text, sender_id="u1", sender_name="Alice")


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer(traits=request.param) as fake:
        yield fake


def _config(tmp_path: Path, server: FakeOpenAIServer) -> Config:
    return make_config(tmp_path / "data", server.base_url)


@pytest.mark.parametrize("server", [ServerTraits(n_ctx=2048)], indirect=True)
async def test_the_window_an_overflow_states_is_learned_and_no_turn_fails(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    runtime = light_runtime(_config(tmp_path, server))
    server.responder = lambda request: FakeReply("Noted. " + "blah " * 120)
    try:
        for turn in range(12):
            reply = await runtime.dispatcher(inbound(f"turn {turn}: " + "long words " * 120))
            assert reply is not None and not reply.is_error, reply
        profile = load_profile(runtime.store, runtime.llm.model)
        assert (profile.window, profile.window_source) == (2048, "overflow error")
        assert all(request["max_tokens"] <= 512 for request in server.requests[-3:])
        shown = await runtime.dispatcher(inbound("/context"))
        assert shown is not None and "window 2048 from overflow error" in shown.text
        assert runtime.store.compaction_totals(1)[0] >= 1
        users = [m for m in runtime.store.messages_between(1, 0, 1000) if m.role == "user"]
        assert len(users) == 12
    finally:
        runtime.close()


@pytest.mark.parametrize("server", [ServerTraits(strict_system=True)], indirect=True)
async def test_a_strict_template_gets_the_memory_inside_the_user_message(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    runtime: Runtime = build_runtime(_config(tmp_path, server))
    await runtime.start()
    try:
        saved = await runtime.dispatcher(inbound("remember: my cat is called Miso"))
        assert saved is not None and not saved.is_error
        reply = await runtime.dispatcher(inbound("what is my cat called?"))
        assert reply is not None and not reply.is_error, reply
        assert load_profile(runtime.store, runtime.llm.model).late_system is False
        sent = server.requests[-1]["messages"]
        assert [m["role"] for m in sent].count("system") == 1 and sent[0]["role"] == "system"
        newest = sent[-1]["content"]
        assert newest.startswith("<context>") and "Miso" in newest
        assert newest.endswith("what is my cat called?")
        assert len(server.refused) == 1  # learned once, remembered after
        again = await runtime.dispatcher(inbound("and my dog?"))
        assert again is not None and not again.is_error and len(server.refused) == 1
    finally:
        runtime.close()


@pytest.mark.parametrize("server", [ServerTraits(no_tools=True)], indirect=True)
async def test_a_model_without_tools_is_asked_without_them(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    runtime = light_runtime(_config(tmp_path, server))
    try:
        first = await runtime.dispatcher(inbound("hello"))
        second = await runtime.dispatcher(inbound("hello again"))
        assert first is not None and first.text == "echo: hello"
        assert second is not None and second.text == "echo: hello again"
        assert load_profile(runtime.store, runtime.llm.model).tools is False
        assert [("tools" in request) for request in server.requests] == [True, False, False]
    finally:
        runtime.close()


@pytest.mark.parametrize("server", [ServerTraits(no_tools=True)], indirect=True)
async def test_tools_on_by_config_fail_with_a_clear_reply(
    tmp_path: Path, server: FakeOpenAIServer
) -> None:
    config = _config(tmp_path, server)
    config.llm.tools = "on"
    runtime = light_runtime(config)
    try:
        reply = await runtime.dispatcher(inbound("hello"))
        assert reply is not None and reply.is_error
        assert "does not support tools" in reply.text and "saved" in reply.text
        assert [m.content for m in runtime.store.history(1)] == ["hello"]
    finally:
        runtime.close()
