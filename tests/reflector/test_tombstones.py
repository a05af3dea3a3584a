"""A forgotten fact does not come back through the reflector when the model words it
differently: tombstones match by distinctive terms and by meaning, on both engines, with
and without the embedding model; an unrelated fact is still learned."""

from __future__ import annotations

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from core.storage.engine import Storage
from memory.embeddings import Embedder
from memory.keeper import Access, MemoryKeeper
from tests.reflector.conftest import Reflectors
from tests.reflector.engines import query
from tests.reflector.test_pass import facts, say

SECRET = "my secret phrase is ZEBRAQUARTZ lighthouse"


@pytest.mark.parametrize("with_model", [False, True], ids=["keywords", "embeddings"])
async def test_a_reworded_forgotten_fact_is_not_learned_again(
    reflectors: Reflectors,
    reflector_config: Config,
    fake_llm: FakeOpenAIServer,
    db: Storage,
    embedder: Embedder,
    with_model: bool,
) -> None:
    reflector = reflectors.open(embedder if with_model else None)
    memories = await reflector.memory_store()
    chat_id, _ = say(reflector, [SECRET, "Noted!", "my favourite colour is teal", "Nice!"])
    memory_id = memories.add(chat_id, SECRET, "PROFILE", source="explicit")
    chat = reflector.store.chat_by_id(chat_id)
    assert chat is not None
    you = Access(chat, control=False, sender_id="local", sender_name="you")  # `mnemo chat`
    MemoryKeeper(reflector_config, memories).forget(you, memory_id)  # as `/forget` does

    fake_llm.add(
        facts(
            ("Alice's secret phrase is ZEBRAQUARTZ lighthouse", "PROFILE"),
            ("Alice uses the words zebraquartz lighthouse as her secret", "PROFILE"),
            ("Alice's favourite colour is teal", "PROFILE"),
        )
    )
    [run] = (await reflector.run_pass()).runs
    assert run.ok, run.error
    stored = query(db, "SELECT content FROM memories WHERE chat_id = ?", (chat_id,))
    assert stored == [("Alice's favourite colour is teal",)]
    assert "2 forgotten facts not learned again" in run.notes
