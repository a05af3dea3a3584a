"""What keeps a model server's KV cache serving a small-window chat (issue 32): the
pruned history is the same in a turn's follow-up requests, old blocks lose their
recalled lines, a cut reply's continuation neither shortens the message it answers nor
compacts, and a summary too big to continue the whole request continues its start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import ContextSection, Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.context.plan import PruneBoundary, RequestPlan, RequestPlanner
from core.context.pruning import Fill, prune_request
from core.context.request import render_dynamic
from core.context.summary import SummaryBudget, is_summary_request, old_part, summarise
from core.model.tokens import TokenEstimator, ToolCost
from core.storage.store import StoredMessage
from core.turn.agent import CONTINUE_REQUEST
from tests.core.support import light_runtime

ESTIMATOR = TokenEstimator(4.0, ToolCost(fixed=0.0))  # as the fake server counts
GOOD_SUMMARY = (
    "## Goal\nHelp.\n## Constraints and preferences\nnone\n## Progress\nDone: talked.\n"
    "## Key decisions\nnone\n## Next steps\nGo on.\n## Critical context\nnone"
)


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


def _block(*sections: tuple[str, str]) -> dict[str, Any]:
    rendered = render_dynamic([ContextSection(key, key, text) for key, text in sections])
    return {"role": "system", "content": rendered}


def _chat(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "prefix"}]
    for n in range(turns):
        messages.append(_block(("memories", f"fact {n}"), ("recalled", f"earlier text {n}")))
        messages.append({"role": "user", "content": f"question {n} " + "u" * 600})
        messages.append({"role": "assistant", "content": f"answer {n} " + "a" * 300})
    return messages


def test_old_blocks_lose_their_recalled_lines_on_a_small_window() -> None:
    messages = _chat(3)
    messages.insert(4, _block(("recalled", "only recalled lines")))
    pruned, stats = prune_request(messages, 1, small_window=True)
    blocks = [m["content"] for m in pruned if m["role"] == "system"][1:]
    assert len(blocks) == 3  # the block of recalled lines alone is gone
    assert "<memories" in blocks[0] and "<recalled" not in blocks[0]
    assert "<memories" in blocks[1] and "<recalled" not in blocks[1]
    assert blocks[2] == messages[-3]["content"]  # the protected turn keeps its whole block
    assert stats.texts_shortened == 4 + 3
    large, _ = prune_request(messages, 1, small_window=False)
    assert [m for m in large if m["role"] == "system"] == [
        m for m in messages if m["role"] == "system"
    ]


def _planner(config: Config) -> RequestPlanner:
    return RequestPlanner(config=config, store=None, tools=None, model="m")  # type: ignore[arg-type]


def _plan(messages: list[dict[str, Any]], window: int) -> RequestPlan:
    return RequestPlan(
        messages, None, [], ESTIMATOR, window, {}, boundary=PruneBoundary(1, (0, 0), Fill())
    )


def test_a_continuation_prunes_the_history_as_its_turn_did_and_keeps_the_question(
    config: Config,
) -> None:
    planner = _planner(config)
    turn = _chat(4) + [{"role": "user", "content": "the question " + "q" * 600}]
    first = planner.pruned(_plan(turn, 1_400), None)
    assert first.prune.texts_shortened  # over the prune threshold: old turns shortened
    pending = [{"role": "assistant", "content": "part " + "p" * 500}, dict(CONTINUE_REQUEST)]
    follow = planner.pruned(_plan(turn + pending, 1_400), None, len(pending))
    assert follow.messages[: len(first.messages)] == first.messages  # the cache still serves it
    assert follow.messages[-3]["content"] == turn[-1]["content"]  # the question is whole
    assert follow.messages[-2:] == pending


def _stored(index: int, role: str, content: str) -> StoredMessage:
    return StoredMessage(
        index + 1, 1, role, "", content, None, None, "2026-01-01T00:00:00+00:00", 0
    )


def test_old_part_ends_before_the_first_kept_message_and_its_block() -> None:
    conversation = _chat(3) + [{"role": "user", "content": "newest"}]
    head = old_part(conversation, 2)  # the first turn is old
    assert head == conversation[:4]
    assert old_part(conversation, 7) == []


@pytest.mark.parametrize("window", [1_900, 3_900])
def test_the_pruned_part_changes_once_per_fill_so_each_request_starts_with_the_last(
    config: Config, window: int
) -> None:
    """Between moves of the boundary a request starts with the whole previous one; a
    move (a prefix break) comes only when the request would pass the prune level, and
    it makes room for several turns."""
    planner = _planner(config)
    previous: list[dict[str, Any]] = []
    moves: list[int] = []
    for turns in range(1, 60):
        messages = _chat(turns) + [_block(("memories", "new")), {"role": "user", "content": "q"}]
        plan = planner.pruned(_plan(messages, window), None)
        if plan.tokens > window * config.context.compaction_threshold:
            break  # the request compacts here
        kept = max(0, len(previous) - 2)  # all but the previous turn's block and question
        if plan.messages[:kept] != previous[:kept]:
            moves.append(turns)
        planner.keep_boundary(plan)  # sent
        previous = plan.messages
    assert moves, "the boundary never moved"
    assert len(moves) < 2 or moves[1] - moves[0] >= 3, moves  # a fill between them
    assert len(moves) <= 1 + turns // 3, moves  # steps of turns would move every other turn
    assert turns > 6  # the moves made room for more turns than the window holds whole


@pytest.mark.parametrize("prompt_tokens", [1_000, 10_000])
async def test_a_summary_continues_only_the_start_it_summarises(
    runtime: Runtime, fake_llm: FakeOpenAIServer, prompt_tokens: int
) -> None:
    """The server cached the previous request; the kept messages stay in the chat, so the
    summary request is the part it summarises and the instruction, whether the whole
    request would fit or not."""
    fake_llm.add(FakeReply(GOOD_SUMMARY))
    chat = runtime.store.get_or_create_chat("terminal", "s")
    old = [_stored(0, "user", "old question"), _stored(1, "assistant", "old answer")]
    conversation: list[dict[str, Any]] = [
        {"role": "system", "content": "prefix"},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        _block(("memories", "a fact")),
        {"role": "user", "content": "recent " * 1_500},
    ]
    budget = SummaryBudget(prompt_tokens=prompt_tokens, answer_tokens=300, words=150)
    outcome = await summarise(
        runtime.llm, runtime.store, chat.id, None, old, ESTIMATOR, budget, conversation
    )
    assert outcome.summary == GOOD_SUMMARY
    [request] = fake_llm.requests
    messages = request["messages"]
    assert messages[:3] == conversation[:3]  # the start of the cached request
    assert messages[3]["role"] == "user" and "running summary" in messages[3]["content"]
    assert len(messages) == 4 and "recent" not in str(messages)


async def test_a_cut_reply_is_continued_without_compacting_below_the_window(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config = runtime.config
    config.llm.context_window = 2_000
    config.llm.max_output_tokens = 200

    def responder(request: dict[str, Any]) -> FakeReply:
        messages = request["messages"]
        if is_summary_request(messages):
            return FakeReply(GOOD_SUMMARY)
        if messages[-1] == CONTINUE_REQUEST:
            return FakeReply("done.")
        if str(messages[-1]["content"]).startswith("big"):
            return FakeReply("w " * 400, finish_reason="length")
        return FakeReply("ok")

    fake_llm.responder = responder
    await runtime.agent.handle(Inbound("terminal", "c", "hello"))
    reply = await runtime.agent.handle(Inbound("terminal", "c", "big " + "b " * 2_120))
    assert reply is not None and reply.text.endswith("done.")
    continuation = fake_llm.requests[-1]["messages"]
    assert continuation[-1] == CONTINUE_REQUEST
    usable = 2_000 - 200
    threshold = usable * config.context.compaction_threshold
    assert threshold < ESTIMATOR.request(continuation) < usable
    assert not any(is_summary_request(r["messages"]) for r in fake_llm.requests)
