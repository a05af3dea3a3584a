"""Compaction: safe split, incremental summary, fallback, archive, overflow retry, triggers."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import Extension, Inbound, TurnContext
from core.bench.fakes.fake_openai import (
    FakeOpenAIServer,
    FakeReply,
    ServerTraits,
    echo_responder,
    tool_call,
)
from core.config import Config
from core.context.compaction import (
    AFTER_COMPACTION_SHARE,
    orphaned_tool_messages,
    split_for_compaction,
)
from core.context.summary import (
    SummaryBudget,
    continuation_request,
    fit_summary_request,
    is_summary_request,
    summarise,
    usable_summary,
)
from core.model.profile import effective_window, load_profile
from core.model.tokens import TokenEstimator, ToolCost
from core.storage.store import StoredMessage
from tests.conftest import make_config
from tests.core.support import light_runtime


@pytest.fixture
def runtime(config: Config, storage_url: str) -> Iterator[Runtime]:
    """No extensions, and a 4k window so that a few turns exceed the verbatim reserve; on
    each engine (`storage_url`, tests/core/conftest.py)."""
    config.llm.context_window = 4_096
    config.storage.url = storage_url
    rt = light_runtime(config)
    yield rt
    rt.close()


GOOD_SUMMARY = (
    "## Goal\nShip the report.\n## Constraints and preferences\nMetric units.\n"
    "## Progress\nDone: draft.\n## Key decisions\nUse SQLite.\n## Next steps\nReview.\n"
    "## Critical context\n/srv/report.md, port 8443"
)


def _message(index: int, role: str, **extra: Any) -> StoredMessage:
    return StoredMessage(
        id=index + 1,
        chat_id=1,
        role=role,
        sender="",
        content=extra.get("content", f"m{index}"),
        tool_calls=extra.get("tool_calls"),
        tool_call_id=extra.get("tool_call_id"),
        created_at="2026-01-01T00:00:00Z",
        token_estimate=0,
    )


def _tool_history(turns: int) -> list[StoredMessage]:
    history: list[StoredMessage] = []
    for n in range(turns):
        call = {"id": f"c{n}", "type": "function", "function": {"name": "t", "arguments": "{}"}}
        history += [
            _message(len(history), "user"),
            _message(len(history) + 1, "assistant", tool_calls=[call]),
            _message(len(history) + 2, "tool", tool_call_id=f"c{n}"),
            _message(len(history) + 3, "assistant"),
        ]
    return history


@pytest.mark.parametrize("keep_recent", [1, 2, 3, 4, 5, 6, 7, 9])
def test_split_never_separates_a_tool_call_from_its_result(keep_recent: int) -> None:
    history = _tool_history(3)
    old, recent = split_for_compaction(history, 0, keep_recent, TokenEstimator(4.0))
    assert old + recent == history
    assert recent[0].role == "user"
    assert len(recent) >= min(keep_recent, 8)  # moved earlier unless that would keep all
    for part in (old, recent):
        assert orphaned_tool_messages([m.to_openai() for m in part]) == []


def test_split_keeps_the_token_reserve_and_falls_forward_when_needed() -> None:
    history = _tool_history(4)
    estimator = TokenEstimator(4.0)
    per_turn = sum(estimator.message(m.to_openai()) for m in history[:4])
    old, recent = split_for_compaction(history, per_turn * 2, 1, estimator)
    assert len(recent) == 8 and recent[0].role == "user"
    # A single long turn: no user message before the candidate, so the split moves later.
    long_turn = [_message(0, "user")] + [_message(i, "assistant") for i in range(1, 9)]
    long_turn += [_message(9, "user"), _message(10, "assistant")]
    old, recent = split_for_compaction(long_turn, 0, 5, estimator)
    assert [m.id for m in recent] == [10, 11]
    assert split_for_compaction(long_turn[:5], 0, 2, estimator) == ([], long_turn[:5])


def test_split_keeps_no_more_than_the_room_but_always_the_newest_turn() -> None:
    history = _tool_history(4)
    estimator = TokenEstimator(4.0)
    per_turn = sum(estimator.message(m.to_openai()) for m in history[:4])
    old, recent = split_for_compaction(history, 0, 12, estimator, max_keep_tokens=per_turn * 2)
    assert len(recent) == 8 and old + recent == history  # keep_recent=12 only a preference
    old, recent = split_for_compaction(history, 0, 12, estimator, max_keep_tokens=0)
    assert recent == history[12:] and recent[0].role == "user"
    assert orphaned_tool_messages([m.to_openai() for m in recent]) == []


def test_summary_validation_rejects_errors_and_junk() -> None:
    assert usable_summary(GOOD_SUMMARY) == GOOD_SUMMARY
    assert usable_summary("<think>hmm</think>\n" + GOOD_SUMMARY) == GOOD_SUMMARY
    assert usable_summary("") is None
    assert usable_summary("Error: context_length_exceeded for this model, sorry about it") is None
    assert usable_summary("Sorry, I can't help with summarising this conversation today.") is None
    assert usable_summary("The user and the assistant talked about many things at length.") is None


def test_summary_request_drops_the_oldest_half_until_it_fits() -> None:
    old = [_message(i, "user", content=f"message {i} " + "x" * 400) for i in range(16)]
    estimator = TokenEstimator(4.0)
    messages, covered = fit_summary_request("earlier", old, estimator, 700)
    assert covered == 4
    assert estimator.request(messages) <= 700
    assert "[#13] user" in messages[1]["content"] and "[#12]" not in messages[1]["content"]
    assert messages[1]["content"].startswith("Previous summary:\nearlier")


def _read(runtime: Runtime, path: str) -> str:
    """An archive, by the path its compaction recorded (a file, or a row on PostgreSQL)."""
    text = runtime.agent.files.read_text(path)
    assert text is not None, f"no archive at {path}"
    return text


def _summary_responder(summaries: list[str]) -> Any:
    def respond(request: dict[str, Any]) -> FakeReply:
        if is_summary_request(request["messages"]):
            return FakeReply(content=summaries.pop(0) if summaries else GOOD_SUMMARY)
        return echo_responder(request)

    return respond


async def _chat(runtime: Runtime, chat_id: str, turns: int, size: int = 200) -> None:
    for n in range(turns):
        await runtime.agent.handle(Inbound("terminal", chat_id, f"turn {n}: " + "w" * size))


def set_summary(runtime: Runtime, summary: str) -> None:
    """Give chat 1's session a summary (no store method sets one outside a compaction)."""
    runtime.storage.database.write("UPDATE sessions SET summary = ? WHERE chat_id = 1", (summary,))


def _summary_requests(server: FakeOpenAIServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if is_summary_request(r["messages"])]


def _window_of_6000(runtime: Runtime, fake_llm: FakeOpenAIServer) -> None:
    """A 6,000-token window with 1,000 kept for the answer; summaries that succeed."""
    runtime.config.llm.context_window = 6_000
    runtime.config.llm.max_output_tokens = 1_000
    fake_llm.responder = _summary_responder([])


def _every_request_fits_the_window_of_6000(fake_llm: FakeOpenAIServer) -> None:
    estimator = TokenEstimator(4.0, ToolCost(fixed=0.0))  # as the fake server counts
    for request in fake_llm.requests:
        assert orphaned_tool_messages(request["messages"]) == []
        assert estimator.request(request["messages"], request.get("tools")) <= 5_000


async def test_compact_command_summarises_marks_and_archives(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = _summary_responder([])
    await _chat(runtime, "c", 10)
    before = runtime.store.count_messages(1)
    reply = await runtime.agent.handle(Inbound("terminal", "c", "/compact"))
    assert reply is not None and reply.text.startswith("Compacted 14 messages")
    assert "## Goal" in reply.text and "tokens of history" in reply.text
    session = runtime.store.session(1)
    assert session.summary == GOOD_SUMMARY and session.compaction_count == 1
    assert runtime.store.count_messages(1) == before  # nothing deleted
    assert runtime.store.compacted_message_ids() == set(range(1, 15))
    [archive] = runtime.store.archive_paths()
    assert archive.startswith("terminal/c/archive/")  # named as the chat's files name it
    text = _read(runtime, archive)
    assert all(f"### #{n} ·" in text for n in range(1, 15))
    assert "turn 0: " + "w" * 200 in text
    await _chat(runtime, "c", 1)
    request = fake_llm.requests[-1]["messages"]
    assert request[1]["content"].endswith(GOOD_SUMMARY)
    assert request[2]["role"] == "user" and request[2]["content"].startswith("turn 7")


async def test_second_compaction_updates_the_previous_summary(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    second = GOOD_SUMMARY.replace("Review.", "Publish.")
    fake_llm.responder = _summary_responder([GOOD_SUMMARY, second])
    await _chat(runtime, "c", 8)
    await runtime.agent.handle(Inbound("terminal", "c", "/compact"))
    await _chat(runtime, "c", 8)
    await runtime.agent.handle(Inbound("terminal", "c", "/compact"))
    requests = _summary_requests(fake_llm)
    assert len(requests) == 2
    assert "Previous summary: none" in requests[0]["messages"][1]["content"]
    assert f"Previous summary:\n{GOOD_SUMMARY}" in requests[1]["messages"][1]["content"]
    assert "[#1] " not in requests[1]["messages"][1]["content"]  # only the new messages
    assert "[#11] user" in requests[1]["messages"][1]["content"]
    assert runtime.store.session(1).summary == second


@pytest.mark.parametrize(
    "bad_reply",
    [
        FakeReply(status=500, error="upstream exploded"),
        FakeReply(content="Sorry, I cannot summarise this conversation right now."),
        FakeReply(content=""),
    ],
)
async def test_failed_summary_falls_back_to_recent_only_and_keeps_the_old_summary(
    runtime: Runtime,
    fake_llm: FakeOpenAIServer,
    bad_reply: FakeReply,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await _chat(runtime, "f", 8)
    set_summary(runtime, "old summary")
    fake_llm.add(bad_reply)
    with caplog.at_level(logging.WARNING, logger="core.context.compaction"):
        reply = await runtime.agent.handle(Inbound("terminal", "f", "/compact"))
    assert reply is not None and "Summarising failed" in reply.text
    assert "no usable summary" in caplog.text
    session = runtime.store.session(1)
    assert session.summary == "old summary"
    [compaction] = runtime.store.compactions(1)
    assert compaction.status == "fallback" and compaction.error
    assert reply.text.endswith(
        f"archived at {runtime.agent.files.location(compaction.archive_path)}."
    )
    history = runtime.store.history(1)
    assert history[0].role == "user" and len(history) == 6
    assert runtime.store.count_messages(1) == 16


async def test_compact_with_short_history_says_so(runtime: Runtime) -> None:
    await _chat(runtime, "s", 2)
    reply = await runtime.agent.handle(Inbound("terminal", "s", "/compact"))
    assert reply is not None and reply.text.startswith("Nothing to compact yet")


async def test_overflow_error_compacts_and_retries_once(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = _summary_responder([])
    await _chat(runtime, "o", 8)
    overflow = FakeReply(status=400, error="This model's maximum context length is 8192 tokens")
    fake_llm.add(overflow)
    count = len(fake_llm.requests)
    reply = await runtime.agent.handle(Inbound("terminal", "o", "after the overflow"))
    assert reply is not None and reply.text == "echo: after the overflow"
    kinds = [
        "summary" if is_summary_request(r["messages"]) else "turn"
        for r in fake_llm.requests[count:]
    ]
    assert kinds == ["turn", "summary", "turn"]
    assert [c.trigger for c in runtime.store.compactions(1)] == ["overflow"]


async def test_second_overflow_gives_a_short_error_and_keeps_the_message(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = _summary_responder([])
    await _chat(runtime, "o", 8)
    overflow = FakeReply(status=400, error="context_length_exceeded")
    # Refused with tools, then with half of them, then without any.
    fake_llm.add(overflow, FakeReply(content=GOOD_SUMMARY), overflow, overflow)
    reply = await runtime.agent.handle(Inbound("terminal", "o", "still too big"))
    assert reply is not None and reply.is_error
    stored = runtime.store.history(1)[-1]
    assert (stored.role, stored.content) == ("user", "still too big")


class FlushRecorder(Extension):
    name = "flush"

    def __init__(self, server: FakeOpenAIServer) -> None:
        self.server = server
        self.calls: list[int] = []

    async def before_compaction(self, turn: TurnContext, up_to: int) -> bool:
        self.calls.append(len(self.server.requests))
        return True


async def test_threshold_compaction_flushes_memory_first_and_keeps_requests_in_window(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    _window_of_6000(runtime, fake_llm)
    recorder = FlushRecorder(fake_llm)
    runtime.extensions.add(recorder)
    for n in range(30):
        if n % 3 == 0:
            fake_llm.add(
                FakeReply(tool_calls=[tool_call("get_current_time", {}, f"call_{n}")]),
            )
        await runtime.agent.handle(Inbound("terminal", "t", f"turn {n}: " + "v" * 1_500))
    summaries = _summary_requests(fake_llm)
    assert summaries and len(recorder.calls) == len(summaries)
    for at in recorder.calls:  # the flush came right after the summary request
        assert is_summary_request(fake_llm.requests[at - 1]["messages"])
    _every_request_fits_the_window_of_6000(fake_llm)
    assert runtime.store.count_messages(1) == runtime.store.count_messages()


LONG = " ".join(f"word{i}" for i in range(64))  # ~450 chars, ~115 tokens


def _long_chat_responder(request: dict[str, Any]) -> FakeReply:
    if is_summary_request(request["messages"]):
        return FakeReply(content=GOOD_SUMMARY)
    return FakeReply(content="Noted. " + " ".join(f"reply{i}" for i in range(40)))


def _archived_ids(runtime: Runtime) -> set[int]:
    text = "".join(_read(runtime, path) for path in runtime.store.archive_paths())
    return {int(n) for n in re.findall(r"^### #(\d+) ·", text, re.MULTILINE)}


async def test_forty_long_turns_in_a_2048_window_compact_rarely_and_lose_nothing(
    tmp_path: Path, storage_url: str
) -> None:
    """The issue's run: a llama.cpp-sized window (2,048) that the config does not state."""
    with FakeOpenAIServer(_long_chat_responder, ServerTraits(n_ctx=2048)) as server:
        config = make_config(tmp_path / "data", server.base_url)
        config.storage.url = storage_url
        runtime = light_runtime(config)
        try:
            for n in range(40):
                reply = await runtime.agent.handle(Inbound("terminal", "l", f"{n}: {LONG}"))
                assert reply is not None and not reply.is_error, reply
            rows = [
                (c.trigger, c.messages_compacted, c.tokens_after)
                for c in runtime.store.compactions(1)
            ]
            compacted = runtime.store.compacted_message_ids()
            assert runtime.store.count_messages(1) == 80  # every message stored
            assert compacted and _archived_ids(runtime) == compacted
            profile = load_profile(runtime.store, runtime.llm.model)
        finally:
            runtime.close()
    assert (profile.window, profile.window_source) == (2048, "overflow error")
    usable = effective_window(2048, runtime.config.llm.max_output_tokens)
    target = usable * runtime.config.context.compaction_threshold * AFTER_COMPACTION_SHARE
    print(f"40 turns, 2,048 window: {len(rows)} compactions {rows}; {len(server.refused)} refused")
    assert 1 <= len(rows) <= 12  # without hysteresis: 36, each of 2 messages
    threshold = [(count, after) for trigger, count, after in rows if trigger == "threshold"]
    assert all(count >= 6 and after <= target for count, after in threshold)
    assert len(server.refused) <= 1  # the one overflow that states the window


async def test_threshold_summary_continues_the_chats_own_request(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """The summary request is the start of the chat's request, up to the end of the part
    being summarised, plus an instruction: a start of the turn request before it (a caching
    server evaluates only the instruction), without the kept messages."""
    fake_llm.responder = _summary_responder([])
    for n in range(40):
        await runtime.agent.handle(Inbound("terminal", "k", f"turn {n}: {LONG}"))
        if _summary_requests(fake_llm):
            break
    requests = fake_llm.requests
    at = next(i for i, r in enumerate(requests) if is_summary_request(r["messages"]))
    summary, previous = requests[at]["messages"], requests[at - 1]["messages"]
    assert not summary[0]["content"].startswith("You maintain")  # the chat's own prefix
    *head, last = summary
    assert head == previous[: len(head)] and len(head) > 2
    assert last["role"] == "user" and last["content"].startswith("You maintain")
    assert "## Critical context" in last["content"]
    newest = str(requests[at + 1]["messages"][-1]["content"])
    assert newest.startswith("turn ") and newest not in str(summary)
    assert runtime.store.session(1).summary == GOOD_SUMMARY


async def test_compact_command_asks_from_a_transcript(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = _summary_responder([])
    await _chat(runtime, "c", 8)
    await runtime.agent.handle(Inbound("terminal", "c", "/compact"))
    [request] = _summary_requests(fake_llm)
    assert request["messages"][0]["content"].startswith("You maintain")
    assert "New messages:\n[#1] user" in request["messages"][1]["content"]


async def test_continuation_that_does_not_fit_falls_back_to_a_transcript(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = _summary_responder([])
    chat = runtime.store.get_or_create_chat("terminal", "z")
    old = [_message(0, "user", content="x " * 400), _message(1, "assistant")]
    big = [{"role": "system", "content": "p"}, {"role": "user", "content": "y " * 8_000}]
    small = [{"role": "system", "content": "p"}, {"role": "user", "content": "y"}]
    budget = SummaryBudget.of(2_048, runtime.config)
    estimator = TokenEstimator(4.0)
    for conversation in (big, small):
        outcome = await summarise(
            runtime.llm, runtime.store, chat.id, None, old, estimator, budget, conversation
        )
        assert outcome.summary == GOOD_SUMMARY and outcome.messages_summarised == 2
    transcript, continued = (r["messages"] for r in fake_llm.requests)
    assert transcript[0]["content"].startswith("You maintain")
    assert continued[0]["content"] == "p" and continued[1]["content"].startswith("y\n\n---\n")


def test_continuation_appends_after_a_tool_result() -> None:
    conversation = [
        {"role": "system", "content": "p"},
        {"role": "user", "content": "hi"},
        {"role": "tool", "content": "42", "tool_call_id": "c1"},
    ]
    messages = continuation_request(conversation, None)
    assert messages[:3] == conversation and messages[3]["role"] == "user"
    assert conversation[1]["content"] == "hi"  # the caller's messages are not changed


def test_summary_gets_its_own_answer_room(config: Config) -> None:
    config.llm.max_output_tokens = 128  # would cut every summary
    budget = SummaryBudget.of(4_096, config)
    assert (budget.answer_tokens, budget.prompt_tokens) == (512, 4_096 - 512)
    # On a small window no more than the length rule needs (2 tokens a word), so that the
    # chat's own request, continued, still fits beside it (the server's cache serves it).
    small = SummaryBudget.of(2_048, config)
    assert (small.words, small.answer_tokens) == (153, 306)
    assert SummaryBudget.of(1_024, config).answer_tokens == 152  # at most a quarter: 256
    config.llm.max_output_tokens = 900
    assert SummaryBudget.of(4_096, config).answer_tokens == 900


def test_split_counts_the_context_blocks_kept_on_user_messages() -> None:
    """A user message's kept block is sent with it, so it counts toward what is kept."""
    estimator = TokenEstimator(4.0)
    plain = [_message(i, "user" if i % 2 == 0 else "assistant") for i in range(12)]
    with_blocks = [
        replace(m, context="<memories>" + "fact " * 200 + "</memories>") if m.role == "user" else m
        for m in plain
    ]
    assert split_for_compaction(plain, 400, 2, estimator)[0] == []
    old, recent = split_for_compaction(with_blocks, 400, 2, estimator)
    assert old and len(recent) < len(with_blocks)


class FailingFlush(Extension):
    """A memory flush that fails its first `failures` calls (the reflector on a batch a
    small model cannot answer), recording each call as (up_to, requests sent before)."""

    name = "failing-flush"

    def __init__(self, server: FakeOpenAIServer, failures: int) -> None:
        self.server = server
        self.failures = failures
        self.calls: list[tuple[int, int]] = []

    async def before_compaction(self, turn: TurnContext, up_to: int) -> bool:
        self.calls.append((up_to, len(self.server.requests)))
        return len(self.calls) > self.failures


def _flush_runtime(runtime: Runtime, fake_llm: FakeOpenAIServer, failures: int) -> FailingFlush:
    _window_of_6000(runtime, fake_llm)
    flush = FailingFlush(fake_llm, failures)
    runtime.extensions.add(flush)
    return flush


async def _chat_until_compacted(runtime: Runtime, chat_id: str) -> None:
    """Long turns in the chat (the first one) until it is compacted; fewer than 40."""
    turns = 0
    while not runtime.store.compactions(1):
        await runtime.agent.handle(Inbound("terminal", chat_id, f"turn {turns}: " + "v" * 1_200))
        turns += 1
        assert turns < 40, "never compacted"


async def test_a_failed_flush_holds_the_compaction_back_until_it_succeeds(
    runtime: Runtime, fake_llm: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    flush = _flush_runtime(runtime, fake_llm, failures=1)
    with caplog.at_level(logging.WARNING, logger="core.context.compaction"):
        await _chat_until_compacted(runtime, "f")
    [compaction] = runtime.store.compactions(1)
    assert len(flush.calls) == 2  # held back once, then the flush succeeded
    assert sum("held back (1 of 3)" in r.getMessage() for r in caplog.records) == 1
    assert not any("goes ahead" in r.getMessage() for r in caplog.records)
    # The retry flushed before summarising: a flush that fails again costs no summary.
    (_, before_retry) = flush.calls[1]
    assert is_summary_request(fake_llm.requests[before_retry]["messages"])
    assert len(_summary_requests(fake_llm)) == 2  # the held-back try's, and this one
    # The flush covered the compacted part, whatever it held back before.
    assert flush.calls[1][0] >= compaction.last_message_id


async def test_a_flush_that_keeps_failing_holds_back_at_most_three_times_then_warns(
    runtime: Runtime, fake_llm: FakeOpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    flush = _flush_runtime(runtime, fake_llm, failures=100)
    with caplog.at_level(logging.WARNING, logger="core.context.compaction"):
        await _chat_until_compacted(runtime, "g")
    messages = [r.getMessage() for r in caplog.records]
    held = [m for m in messages if "held back" in m and "goes ahead" not in m]
    [ahead] = [m for m in messages if "goes ahead" in m]
    assert 1 <= len(held) <= 3 and len(flush.calls) == len(held) + 1
    assert "may be lost" in ahead
    # Only the first try summarised before flushing; the later ones flushed first.
    assert len(_summary_requests(fake_llm)) == 2
    # Held back, yet every request stayed in the window.
    _every_request_fits_the_window_of_6000(fake_llm)
