"""The reflector on small local servers: window-sized batches, splits on overflow and cut
replies, the structured-output fallback, and skipping a batch that keeps failing."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, ServerTraits, prompt_tokens_of
from core.config import Config
from core.model.profile import load_profile
from core.storage.store import NewMessage
from reflector.reflection import Reflector

MODEL = "llama3.2"  # the default [llm] model: not a hosted model, so its window is unknown


def long_chat(reflector: Reflector, count: int, chars: int = 300) -> tuple[int, list[int]]:
    chat = reflector.store.get_or_create_chat("terminal", "alice")
    filler = "I keep telling you about my week and my plans for the garden. " * (chars // 60)
    messages = [
        NewMessage("user" if i % 2 == 0 else "assistant", f"{i}: {filler}", "alice")
        for i in range(count)
    ]
    return chat.id, reflector.store.append(chat.id, messages)


def no_facts(request: dict[str, Any]) -> FakeReply:
    return FakeReply(content='{"memories": []}')


def new_messages(request: dict[str, Any]) -> str:
    return str(request["messages"][1]["content"]).split("<new_messages>")[1]


async def test_a_long_chat_on_a_2048_window_is_reflected_to_the_end_without_a_refusal(
    config: Config, reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.traits = ServerTraits(n_ctx=2048)
    fake_llm.responder = no_facts
    config.llm.context_window = 2048
    chat_id, ids = long_chat(reflector, 120)
    report = await reflector.run_pass()
    assert fake_llm.refused == []
    assert len(report.runs) > 3 and all(run.ok for run in report.runs)
    assert reflector.cursor.position(chat_id) == ids[-1]
    assert sum(run.messages_seen for run in report.runs) == 120
    for request in fake_llm.requests:
        assert request["max_tokens"] == 512  # a quarter of the window
        assert prompt_tokens_of(request) + request["max_tokens"] <= 2048
    assert (await reflector.run_pass()).runs == []


async def test_an_overflow_teaches_the_window_and_the_batch_is_split(
    config: Config, reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.traits = ServerTraits(n_ctx=2048)
    fake_llm.responder = no_facts
    chat_id, ids = long_chat(reflector, 120)
    report = await reflector.run_pass()
    assert len(fake_llm.refused) == 1 and "maximum context length is 2048" in fake_llm.refused[0][1]
    profile = load_profile(reflector.store, MODEL)
    assert (profile.window, profile.window_source) == (2048, "overflow error")
    first_sent, retried = fake_llm.requests[0], fake_llm.requests[1]
    assert first_sent["max_tokens"] == 1024 and retried["max_tokens"] == 512
    sent = new_messages(first_sent).count("[alice]: ")
    assert 1 <= new_messages(retried).count("[alice]: ") <= sent // 2
    assert all(run.ok for run in report.runs)
    assert reflector.cursor.position(chat_id) == ids[-1]


async def test_with_a_configured_window_too_large_splitting_alone_makes_progress(
    config: Config, reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.traits = ServerTraits(n_ctx=2048)
    fake_llm.responder = no_facts
    config.llm.context_window = 4096  # wrong, and the config wins: nothing is learned
    chat_id, ids = long_chat(reflector, 60)
    report = await reflector.run_pass()
    assert fake_llm.refused and all(run.ok for run in report.runs)
    assert reflector.cursor.position(chat_id) == ids[-1]
    assert load_profile(reflector.store, MODEL).window is None


async def test_structured_output_falls_back_and_the_working_form_is_remembered(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.traits = ServerTraits(no_json_schema=True)  # llama-cpp-python
    chat_id, _ = long_chat(reflector, 2, chars=60)
    body = {"memories": [{"content": "Alice plans a garden.", "category": "PROFILE"}]}
    fake_llm.responder = lambda request: FakeReply(content=json.dumps(body))
    [run] = (await reflector.run_pass()).runs
    assert run.ok and run.added == 1
    refused, accepted = fake_llm.requests
    assert refused["response_format"]["type"] == "json_schema"
    assert refused["response_format"]["json_schema"]["strict"] is True
    schema = refused["response_format"]["json_schema"]["schema"]
    assert accepted["response_format"] == {"type": "json_object", "schema": schema}
    assert load_profile(reflector.store, MODEL).structured == "json_object"

    reflector.store.append(chat_id, [NewMessage("user", "And I bought seeds.", "alice")])
    [run] = (await reflector.run_pass()).runs
    assert run.ok
    assert fake_llm.requests[-1]["response_format"]["type"] == "json_object"  # asked first
    assert len(fake_llm.requests) == 3


async def test_a_server_without_structured_output_gets_the_prompt_and_the_parser(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.traits = ServerTraits(no_json_schema=True)
    long_chat(reflector, 2, chars=60)
    fake_llm.add(
        FakeReply(status=400, error="'response_format' of type json_object is not supported"),
        FakeReply(content='Sure! ```json\n{"memories": []}\n```'),
    )
    [run] = (await reflector.run_pass()).runs
    assert run.ok
    assert [r.get("response_format", {}).get("type") for r in fake_llm.requests] == [
        "json_schema",
        "json_object",
        None,
    ]
    assert load_profile(reflector.store, MODEL).structured == "none"
    long_chat(reflector, 1, chars=60)
    fake_llm.responder = no_facts
    await reflector.run_pass()
    assert "response_format" not in fake_llm.requests[-1] and len(fake_llm.requests) == 4


async def test_a_server_that_takes_json_schema_is_remembered_too(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    long_chat(reflector, 2, chars=60)
    fake_llm.responder = no_facts
    [run] = (await reflector.run_pass()).runs
    assert run.ok and len(fake_llm.requests) == 1
    assert load_profile(reflector.store, MODEL).structured == "json_schema"


async def test_a_cut_reply_is_truncation_and_retried_smaller_not_repaired(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    chat_id, ids = long_chat(reflector, 8, chars=60)
    cut = '{"memories": [{"content": "Alice keeps telling'
    fake_llm.add(FakeReply(content=cut, finish_reason="length"))
    fake_llm.responder = no_facts
    runs = (await reflector.run_pass()).runs
    assert all(run.ok for run in runs) and reflector.cursor.position(chat_id) == ids[-1]
    first, second = fake_llm.requests[0], fake_llm.requests[1]
    assert "could not be used" not in json.dumps(second)  # no repair prompt
    assert new_messages(first).count("[alice]") == 8 and new_messages(second).count("[alice]") == 4
    assert [run.messages_seen for run in runs] == [4, 4]


async def test_a_reply_cut_even_for_one_message_fails_as_cut(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    chat_id, _ = long_chat(reflector, 1, chars=60)
    fake_llm.responder = lambda request: FakeReply(content='{"memories": [', finish_reason="length")
    [run] = (await reflector.run_pass()).runs
    assert not run.ok and run.status == "failed" and run.batch_failed
    assert "the reply was cut at max_tokens (1024 tokens)" in (run.error or "")
    assert "attempt 1 of 3" in (run.error or "")
    assert len(fake_llm.requests) == 1 and reflector.cursor.position(chat_id) == 0


async def test_a_batch_that_keeps_failing_is_skipped_after_max_attempts(
    reflector: Reflector, fake_llm: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    chat_id, ids = long_chat(reflector, 4, chars=60)
    fake_llm.responder = lambda request: FakeReply(content="I am a tiny model, no JSON today.")
    seen: list[tuple[str, int]] = []
    for _ in range(2):
        [run] = (await reflector.run_pass()).runs
        seen.append((run.status, run.messages_seen))
        assert reflector.cursor.position(chat_id) == 0
    # The first pass already halves the batch (4, 2, then 1 message, each asked and then
    # repaired once); the second starts from what failed last.
    assert len(fake_llm.requests) == 6 + 2
    assert seen == [("failed", 1), ("failed", 1)]
    with caplog.at_level(logging.WARNING, logger="reflector.reflection"):
        report = await reflector.run_pass()
    skipped, next_batch = report.runs  # the pass goes on past the skipped message
    assert (skipped.status, skipped.messages_seen, skipped.last_message_id) == (
        "skipped",
        1,
        ids[0],
    )
    assert next_batch.status == "failed" and next_batch.first_message_id == ids[1]
    assert not report.ok
    assert report.lines()[0].startswith("WARNING: ") and "SKIPPED" in report.lines()[0]
    assert "skipped after 3 failed attempts" in (skipped.error or "")
    assert "no JSON object" in (skipped.error or "")
    assert any("SKIPPED" in record.getMessage() for record in caplog.records)
    assert reflector.cursor.position(chat_id) == ids[0]
    [_, row, *_] = reflector.runs.recent(chat_id)
    assert (row.status, row.first_message_id, row.last_message_id) == ("skipped", ids[0], ids[0])
    assert reflector.store.count_messages(chat_id) == 4  # nothing lost but the reflection

    fake_llm.responder = no_facts
    runs = (await reflector.run_pass()).runs
    assert all(run.ok for run in runs) and reflector.cursor.position(chat_id) == ids[-1]


async def test_outages_never_count_towards_a_skip(
    config: Config, reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    config.reflector.max_attempts = 1
    chat_id, _ = long_chat(reflector, 2, chars=60)
    for status in (503, 500, 429):
        fake_llm.add(FakeReply(status=status, error="overloaded"))
        [run] = (await reflector.run_pass()).runs
        assert run.status == "failed" and not run.batch_failed
    assert reflector.cursor.position(chat_id) == 0
    fake_llm.responder = lambda request: FakeReply(content="not json")
    runs = (await reflector.run_pass()).runs  # halved in the pass, then each message skipped
    assert [run.status for run in runs] == ["skipped", "skipped"]
    assert reflector.cursor.position(chat_id) > 0
