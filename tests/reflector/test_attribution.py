"""Attribution and the reflection window (ACE, issue 32): the reply cites the strategies
it applied (`[s12]`, removed before the user reads it), the reflector may tag only those
helpful or harmful, and it sees each strategy's last three verdicts, not its history."""

from __future__ import annotations

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.turn.citations import split_citations
from memory.strategies.strategy_store import DatabaseStrategyStore
from reflector.curation import existing_block
from reflector.playbook import StrategyCurator


def test_markers_are_split_from_the_reply() -> None:
    assert split_citations("Use numbered steps [s3]. Then check [s7][s3]") == (
        "Use numbered steps. Then check",
        (3, 7),
    )
    assert split_citations("no markers [x1] here") == ("no markers [x1] here", ())


async def test_the_model_cites_one_of_five_bullets_and_only_its_counter_moves(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    chat = runtime.store.get_or_create_chat("terminal", "cite")
    store = DatabaseStrategyStore(runtime.storage.database)
    ids = []
    for n in range(5):
        strategy = store.add(chat.id, "style", f"Observation number {n} about how answers land")
        store.tag(strategy, "helpful")
        store.tag(strategy, "helpful")
        ids.append(strategy)
    used = ids[2]
    fake_llm.add(FakeReply(f"Here are the steps, numbered. [s{used}]"))
    reply = await runtime.agent.handle(Inbound("terminal", "cite", "how do I set it up?"))
    assert reply is not None and reply.text == "Here are the steps, numbered."
    injected = str(fake_llm.requests[-1]["messages"])
    assert all(f"[s{strategy}]" in injected for strategy in ids)  # all five were shown
    assert runtime.store.history(chat.id)[-1].content == "Here are the steps, numbered."
    assert f"Cited: [id={used}]" in existing_block(store, chat.id)
    before = {strategy: store.get(strategy).scores for strategy in ids}  # type: ignore[union-attr]
    curator = StrategyCurator(store)
    every_tag = [{"op": "TAG", "id": strategy, "tag": "helpful"} for strategy in ids]
    summary = curator.apply(chat.id, every_tag, run_id=1)
    assert "1 tagged" in summary and "4 rejected" in summary
    moved = [s for s in ids if store.get(s).scores.helpful != before[s].helpful]  # type: ignore[union-attr]
    assert moved == [used]
    assert store.pending_citations(chat.id) == set()  # judged: the next pass starts afresh
    assert "Cited: none" in existing_block(store, chat.id)


async def test_the_reflector_sees_the_last_three_verdicts(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    chat = runtime.store.get_or_create_chat("terminal", "window")
    store = DatabaseStrategyStore(runtime.storage.database)
    strategy = store.add(chat.id, "tone", "Short answers land better with this user")
    for tag in ("helpful", "helpful", "harmful", "neutral", "harmful"):
        store.tag(strategy, tag)
    block = existing_block(store, chat.id)
    assert f"[id={strategy}] (DEMOTED, last: harmful, neutral, harmful) tone:" in block
    assert "helpful" not in block.split("\n")[0]  # older verdicts are out of the window


async def test_strategies_have_no_global_scope(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """A row with no chat (older versions could hold one) is never injected: what works with
    one chat's people does not carry to another's; global guidance is the global AGENTS.md."""
    store = DatabaseStrategyStore(runtime.storage.database)
    legacy = store.add(None, "tone", "Answers in Spanish land better with this user")
    store.tag(legacy, "helpful")
    store.tag(legacy, "helpful")
    fake_llm.add(FakeReply("ok"))
    await runtime.agent.handle(Inbound("terminal", "elsewhere", "hello"))
    assert "Spanish" not in str(fake_llm.requests[-1]["messages"])
