"""Facts only from what people said: the grounding check, and a pass that refuses facts
taken from the assistant's replies and says why in its run (on both engines)."""

from __future__ import annotations

import json

from core.api import TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.events import Inbound
from core.storage.engine import Storage
from core.storage.store import StoredMessage
from reflector.extension import ReflectorExtension
from reflector.grounding import Grounding, stem
from reflector.reflection import Reflector
from tests.reflector.engines import query
from tests.reflector.test_pass import facts, say


def message(role: str, text: str, sender: str = "") -> StoredMessage:
    return StoredMessage(1, 1, role, sender, text, None, None, "", 0)


BATCH = [
    message("user", "Hi, I'm Alice. My dog Rex loves the beach near Porto.", "alice"),
    message("assistant", "El Elenrocha is the finest beach of the Sierra Madre!"),
    message("user", "I have been running marathons since 2019", "alice"),
]


def test_inflections_share_a_stem() -> None:
    assert stem("lives") == stem("lived") == stem("living") == stem("live")
    assert stem("dogs") == stem("dog") and stem("running") == stem("run")
    assert stem("marathons") == stem("marathon") and stem("cities") == stem("city")


def test_facts_in_the_users_words_are_grounded_even_reworded() -> None:
    grounding = Grounding(BATCH)
    for fact in (
        "Alice has a dog named Rex.",
        "Alice's dog Rex loves beaches near Porto.",
        "The user runs marathons since 2019.",
        "Alice has run marathons since 2019.",
    ):
        verdict = grounding.check(fact)
        assert verdict.grounded, (fact, verdict)


def test_facts_from_the_assistant_or_from_nowhere_are_refused_with_a_reason() -> None:
    grounding = Grounding(BATCH)
    babble = grounding.check("El Elenrocha is the finest beach of the Sierra Madre.")
    assert not babble.grounded and "only from the assistant" not in babble.reason
    assert set(babble.only_assistant) >= {"elenrocha", "sierra", "madre", "finest"}
    assert babble.reason.startswith("ungrounded")
    only_bot = grounding.check("Elenrocha is in the Sierra Madre.")
    assert not only_bot.grounded and "only from the assistant" in only_bot.reason
    invented = grounding.check("Alice is a famous violinist in Vienna.")
    assert not invented.grounded and "no word of it" in invented.reason
    # The speakers' names say nothing on their own: "Alice" alone grounds nothing.
    assert not grounding.check("Alice likes Elenrocha.").grounded


def test_a_fact_about_who_someone_is_is_grounded_when_the_name_was_said() -> None:
    grounding = Grounding(BATCH)  # Alice said "I'm Alice"
    assert grounding.check("The user's name is Alice.").grounded
    quiet = Grounding([message("user", "I have a dog.", "bob"), message("assistant", "Hi Bob!")])
    assert not quiet.check("The user's name is Bob.").grounded  # only the bot said it


async def test_a_pass_refuses_facts_taken_from_the_bots_replies_and_counts_why(
    reflector: Reflector, fake_llm: FakeOpenAIServer, db: Storage
) -> None:
    chat_id, _ = say(
        reflector,
        [
            "My name is Alice and I live in Porto with my dog Rex.",
            "Porto is lovely! El Elenrocha, the great poet of Madrid, wrote about it.",
        ],
    )
    fake_llm.add(
        facts(
            ("Alice lives in Porto with her dog Rex.", "PROFILE"),
            ("El Elenrocha is a great poet of Madrid.", "KNOWLEDGE"),
            ("Alice is a famous violinist in Vienna.", "PROFILE"),
            ("Hi there!", "EVENT"),
        )
    )
    [run] = (await reflector.run_pass()).runs
    assert run.ok and (run.added, run.skipped) == (1, 3)
    assert run.skip_reasons == {"ungrounded": 2, "small talk": 1}
    assert "3 skipped (2 ungrounded, 1 small talk)" in run.summary()
    assert query(db, "SELECT content FROM memories WHERE chat_id = ?", (chat_id,)) == [
        ("Alice lives in Porto with her dog Rex.",)
    ]
    [row] = reflector.runs.recent(chat_id)
    assert row.skip_reasons == "2 ungrounded, 1 small talk"
    assert "3 skipped (2 ungrounded, 1 small talk)" in row.summary()
    assert row.outcome == "ok, 3 skipped (2 ungrounded, 1 small talk)"


async def test_doctor_and_the_runs_say_why_and_that_the_last_run_failed(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    chat_id, _ = say(reflector, ["I keep bees in my garden."])
    fake_llm.add(facts(("Alice keeps bees in her garden.", "PROFILE"), ("Hi there!", "EVENT")))
    await reflector.run_pass()
    extension = ReflectorExtension(reflector.config, reflector)
    [check] = await extension.checks()
    assert check.ok and "ok, 1 skipped (1 small talk)" in check.detail

    say(reflector, ["And I sell honey at the market."])
    fake_llm.add(FakeReply(status=500, error="the GPU caught fire"))
    [failed] = (await reflector.run_pass()).runs
    assert failed.status == "failed"
    [check] = await extension.checks()
    assert not check.ok and not check.fatal
    assert "FAILED:" in check.detail and "GPU caught fire" in check.detail
    assert check.line().startswith("[warn] reflector:")

    lines = [row.summary() for row in reflector.runs.recent(chat_id)]
    assert "FAILED:" in lines[0] and "GPU caught fire" in lines[0]
    assert "1 skipped (1 small talk)" in lines[1]


async def test_the_flush_before_compaction_reads_up_to_the_old_part_past_the_batch_cap(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    reflector.config.reflector.batch_messages = 2
    texts = [f"I visited city number {n} this year" for n in range(6)]
    chat_id, ids = say(reflector, [t for text in texts for t in (text, "Nice.")])
    fake_llm.responder = lambda request: FakeReply(content=json.dumps({"memories": []}))
    extension = ReflectorExtension(reflector.config, reflector)
    chat = reflector.store.get_or_create_chat("terminal", "alice")
    turn = TurnContext(chat, Inbound("terminal", "alice", "hi"))
    assert await extension.before_compaction(turn, ids[7])
    assert reflector.cursor.position(chat_id) >= ids[7]


async def test_a_flush_that_fails_says_so(reflector: Reflector, fake_llm: FakeOpenAIServer) -> None:
    chat_id, ids = say(reflector, ["I live in Porto", "Nice."])
    fake_llm.responder = lambda request: FakeReply(status=500, error="down")
    extension = ReflectorExtension(reflector.config, reflector)
    chat = reflector.store.get_or_create_chat("terminal", "alice")
    turn = TurnContext(chat, Inbound("terminal", "alice", "hi"))
    assert not await extension.before_compaction(turn, ids[-1])
    assert reflector.cursor.position(chat_id) == 0
