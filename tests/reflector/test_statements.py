"""People's own statements as facts when a small model extracts none (on both engines)."""

from __future__ import annotations

import json

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.storage.engine import Storage
from core.storage.store import StoredMessage
from reflector.reflection import Reflector
from reflector.statements import is_statement, self_statements
from tests.reflector.engines import query
from tests.reflector.test_pass import say

EARLY = [
    "Hi, I'm Marta and I live in Lisbon.",
    "My dog is a beagle called Biscuit.",
    "I work as a night nurse at the city hospital.",
    "My favourite food is grilled sardines.",
    "I play the cello in an amateur orchestra on Thursdays.",
]
NOT_STATEMENTS = [
    "Give me one short thought about tea.",
    "Which city do I live in?",
    "If I move to Porto, what changes?",
    "Do you like my dog?",
    "I think.",
    "Thanks!",
]


def user(text: str, sender: str = "Marta") -> StoredMessage:
    return StoredMessage(1, 1, "user", sender, text, None, None, "", 0)


def empty_reply() -> FakeReply:
    return FakeReply(content=json.dumps({"memories": []}))


def test_first_person_statements_become_attributed_facts_in_the_speakers_words() -> None:
    found = self_statements([user(text) for text in EARLY + NOT_STATEMENTS])
    assert [c.content for c in found] == [
        "Marta said: I'm Marta and I live in Lisbon.",
        "Marta said: My dog is a beagle called Biscuit.",
        "Marta said: I work as a night nurse at the city hospital.",
        "Marta said: My favourite food is grilled sardines.",
        "Marta said: I play the cello in an amateur orchestra on Thursdays.",
    ]
    assert {c.category for c in found} == {"PROFILE"}
    assert not any(is_statement(text) for text in NOT_STATEMENTS)


def test_the_assistants_words_and_repeats_are_not_statements() -> None:
    bot = StoredMessage(
        2, 1, "assistant", "", "I am a beagle expert. My name is Bot.", None, None, "", 0
    )
    found = self_statements([user("I live in Lisbon."), bot, user("I live in Lisbon.")])
    assert [c.content for c in found] == ["Marta said: I live in Lisbon."]


async def test_a_small_model_that_offers_nothing_still_leaves_the_statements_in_memory(
    reflector: Reflector, fake_llm: FakeOpenAIServer, db: Storage
) -> None:
    reflector.config.llm.context_window = 2_048
    chat_id, _ = say(reflector, [EARLY[1], "Cute!", "Tell me a joke.", "Sure."])
    fake_llm.add(empty_reply())
    [run] = (await reflector.run_pass()).runs
    assert run.ok and run.added == 1
    assert "1 facts from what people said about themselves" in run.summary()
    assert query(db, "SELECT content FROM memories WHERE chat_id = ?", (chat_id,)) == [
        ("alice said: My dog is a beagle called Biscuit.",)
    ]


async def test_a_large_window_or_off_keeps_only_what_the_model_offered(
    reflector: Reflector, fake_llm: FakeOpenAIServer, db: Storage
) -> None:
    reflector.config.llm.context_window = 128_000
    chat_id, _ = say(reflector, [EARLY[1], "Cute!"])
    fake_llm.add(empty_reply())
    [run] = (await reflector.run_pass()).runs
    assert run.ok and run.added == 0
    reflector.config.llm.context_window = 2_048
    reflector.config.reflector.statements = "off"
    say(reflector, [EARLY[2], "Wow."])
    fake_llm.add(empty_reply())
    [run] = (await reflector.run_pass()).runs
    assert run.ok and run.added == 0
    assert query(db, "SELECT content FROM memories WHERE chat_id = ?", (chat_id,)) == []


async def test_a_batch_about_to_be_skipped_keeps_its_statements_instead(
    reflector: Reflector, fake_llm: FakeOpenAIServer, db: Storage
) -> None:
    reflector.config.llm.context_window = 2_048
    reflector.config.reflector.max_attempts = 1
    chat_id, ids = say(reflector, [EARLY[4], "Lovely."])
    fake_llm.responder = lambda request: FakeReply(content="no JSON from this model")
    # Halved to one message at a time: the statement's batch is kept, the reply's skipped.
    kept, skipped = (await reflector.run_pass()).runs
    assert kept.ok and kept.status == "done" and kept.added == 1
    assert skipped.status == "skipped" and skipped.added == 0
    assert reflector.cursor.position(chat_id) == ids[-1]
    assert query(db, "SELECT content FROM memories WHERE chat_id = ?", (chat_id,)) == [
        ("alice said: I play the cello in an amateur orchestra on Thursdays.",)
    ]
