"""Fitting a reflector request into the window: messages, known memories, listings, shapes."""

from __future__ import annotations

from core.model.profile import Window
from core.model.tokens import TokenEstimator
from core.storage.store import StoredMessage
from reflector.batching import (
    Budget,
    Shape,
    clip_listing,
    fit_known,
    plan_batch,
)
from reflector.extraction import MESSAGE_MIN_CHARS, ExistingMemory, PromptExtra, Transcript
from reflector.reply_format import reply_schema, response_format

ESTIMATOR = TokenEstimator(4.0)


def message(id_: int, content: str) -> StoredMessage:
    return StoredMessage(id_, 1, "user", "alice", content, None, None, "2026-01-01T00:00:00Z", 1)


def budget(usable: int) -> Budget:
    return Budget(Window(usable + 512, "test"), 512, usable, ESTIMATOR)


def memories(count: int) -> list[ExistingMemory]:
    return [ExistingMemory(i, "EVENT", f"Alice visited museum number {i}.") for i in range(count)]


def test_as_many_messages_as_fit_are_taken_and_the_request_stays_within_budget() -> None:
    chat = [message(i, f"message {i}: " + "words " * 40) for i in range(1, 101)]
    small = plan_batch(budget(1500), chat, Shape(100), [], lambda text: [])
    large = plan_batch(budget(6000), chat, Shape(100), [], lambda text: [])
    assert small is not None and large is not None
    assert 1 < small.transcript.count < large.transcript.count < 100
    assert small.tokens <= 1500 and large.tokens <= 6000
    assert small.transcript.first_id == 1 and small.transcript.last_id == small.transcript.count
    capped = plan_batch(budget(6000), chat, Shape(3), [], lambda text: [])
    assert capped is not None and capped.transcript.count == 3


def test_a_giant_message_alone_is_clipped_to_fit_not_skipped() -> None:
    giant = message(7, "Alice wrote a very long letter. " * 2_000)
    batch = plan_batch(
        budget(600), [giant, message(8, "Then Alice wrote more. " * 20)], Shape(2), [], lambda t: []
    )
    assert batch is not None
    assert (batch.transcript.count, batch.transcript.last_id, batch.transcript.clipped) == (1, 7, 1)
    assert "[truncated:" in batch.transcript.text and batch.tokens <= 600


def test_known_memories_and_listings_get_a_capped_share() -> None:
    chat = [message(1, "I went to another museum today")]
    looked_up: list[str] = []

    def known_for(text: str) -> list[ExistingMemory]:
        looked_up.append(text)
        return memories(200)

    extra = PromptExtra("notes", "Also list notes.", "\n".join(f"[n={i}] note" for i in range(500)))
    batch = plan_batch(budget(1200), chat, Shape(1), [extra], known_for)
    assert batch is not None and looked_up == ["I went to another museum today"]
    assert 0 < batch.known < 200
    user = batch.request[1]["content"]
    assert "more not shown)" in user and "[n=0] note" in user and "[n=499]" not in user
    assert batch.tokens <= 1200


def test_fit_known_keeps_the_most_useful_first_and_lists_them_in_id_order() -> None:
    ranked = [memories(10)[i] for i in (9, 2, 5, 0, 1)]
    kept = fit_known(ranked, 3 * 13, ESTIMATOR)  # 13 tokens a line
    assert [m.id for m in kept] == [2, 5, 9]
    assert fit_known(ranked, 0, ESTIMATOR) == []


def test_clip_listing_keeps_whole_lines() -> None:
    listing = "\n".join(f"line {i}" for i in range(100))
    assert clip_listing(listing, 10_000) == listing
    clipped = clip_listing(listing, 100)
    assert clipped.startswith("line 0\nline 1\n") and clipped.endswith("more not shown)")
    assert len(clipped) <= 100


def test_a_shape_halves_the_messages_then_the_text_of_one() -> None:
    assert Shape(40).smaller(Transcript("x", 1, 30, 30)) == Shape(15)
    assert Shape(2).smaller(Transcript("x", 1, 2, 2)) == Shape(1)
    one = Transcript("y" * 1000, 5, 5, 1)
    assert Shape(1).smaller(one) == Shape(1, 500)
    assert Shape(1, 300).smaller(Transcript("y" * (2 * MESSAGE_MIN_CHARS - 1), 5, 5, 1)) is None


def test_the_reply_schema_is_strict_and_carries_the_contributors_keys() -> None:
    extra = {"type": "array", "items": {"type": "string"}}
    schema = reply_schema(["profile", "EVENT"], {"notes": extra})
    assert schema["required"] == ["memories", "notes"]
    assert schema["additionalProperties"] is False
    item = schema["properties"]["memories"]["items"]
    assert item["properties"]["category"]["enum"] == ["EVENT", "PROFILE"]
    assert item["required"] == ["content", "category", "supersedes_id"]
    assert response_format("json_schema", schema) == {
        "type": "json_schema",
        "json_schema": {"name": "reflection", "schema": schema, "strict": True},
    }
    assert response_format("json_object", schema) == {"type": "json_object", "schema": schema}
    assert response_format("none", schema) is None
