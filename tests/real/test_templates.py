"""(b) Memory against a template that refuses a late system message, and against one that
accepts it."""

from __future__ import annotations

import pytest

from core.api import Inbound
from core.bench.fakes.llama_server import MODEL_ALIAS, LlamaServer
from core.model.profile import load_profile
from tests.real.conftest import RuntimeFactory

pytestmark = pytest.mark.real

FACT = "remember: my sister is called Ana and she lives in Porto"
QUESTION = "Where does my sister live, and what is her name?"


async def test_memory_turns_succeed_on_a_strict_template(
    strict_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    async with real_runtime(strict_server) as runtime:
        noted = await runtime.dispatcher(Inbound("terminal", "local", FACT))
        first = await runtime.dispatcher(Inbound("terminal", "local", QUESTION))
        mark = strict_server.log_size()
        second = await runtime.dispatcher(Inbound("terminal", "local", "And my sister's name?"))
        profile = load_profile(runtime.store, MODEL_ALIAS)

    assert noted is not None and noted.text.startswith("Noted.")
    assert first is not None and not first.is_error, first
    assert second is not None and not second.is_error, second
    assert profile.late_system is False  # learned once from the template's refusal
    # Once learned, no request is refused again: the later turn sent no late system message.
    assert "System message must be at the beginning" not in strict_server.log()[mark:]


async def test_memory_turns_keep_the_system_layout_where_the_template_allows_it(
    default_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    async with real_runtime(default_server) as runtime:
        await runtime.dispatcher(Inbound("terminal", "local", FACT))
        reply = await runtime.dispatcher(Inbound("terminal", "local", QUESTION))
        profile = load_profile(runtime.store, MODEL_ALIAS)

    assert reply is not None and not reply.is_error, reply
    assert profile.late_system is not False
