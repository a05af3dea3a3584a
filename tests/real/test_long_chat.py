"""(a) A long chat on a 2,048-token server with `[llm] context_window` unset."""

from __future__ import annotations

import re

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.llama_server import MODEL_ALIAS, LlamaServer
from core.bench.kv import user_message
from core.model.profile import load_profile
from tests.real.conftest import N_CTX, RuntimeFactory

pytestmark = pytest.mark.real

TURNS = 40
# A 2,048 window (1,440 tokens to the compaction threshold, ~350 of them the static prefix)
# holds about four of these turns (~110 tokens asked, up to 256 answered): a compaction
# every third turn is the least possible. The bug this guards against compacted on 36 of 40.
MAX_COMPACTIONS = TURNS // 3


def archived_ids(runtime: Runtime) -> set[int]:
    found: set[int] = set()
    for path in runtime.store.archive_paths():  # relative to the data dir: read via its FileStore
        text = runtime.agent.files.read_text(path) or ""
        found.update(int(n) for n in re.findall(r"^### #(\d+) ", text, re.MULTILINE))
    return found


async def test_forty_long_turns_fit_a_2048_window_without_a_failed_turn(
    default_server: LlamaServer, real_runtime: RuntimeFactory
) -> None:
    sent = [user_message(turn) for turn in range(1, TURNS + 1)]
    async with real_runtime(default_server) as runtime:
        failed: list[tuple[int, str]] = []
        for turn, text in enumerate(sent, start=1):
            reply = await runtime.dispatcher(Inbound("terminal", "local", text))
            assert reply is not None
            if reply.is_error:
                failed.append((turn, reply.text))
        chat = runtime.store.get_or_create_chat("terminal", "local")
        compactions = runtime.store.session(chat.id).compaction_count
        stored = runtime.store.messages_between(chat.id, 0, 10_000)
        compacted = runtime.store.compacted_message_ids()
        archived = archived_ids(runtime)
        profile = load_profile(runtime.store, MODEL_ALIAS)

    assert failed == [], f"failed turns {failed}; server log {default_server.log_path}"
    assert 1 <= compactions <= MAX_COMPACTIONS, f"{compactions} compactions in {TURNS} turns"
    assert [m.content for m in stored if m.role == "user"] == sent  # every message kept
    assert sum(m.role == "assistant" for m in stored) == TURNS
    assert compacted and compacted <= archived  # every compacted message is in an archive
    assert profile.window == N_CTX  # learned from the server's own overflow error
