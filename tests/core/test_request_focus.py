"""Request focus (AceClaw, issue 32), `/context KEY` with its evidence, and the session's
peak context use."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.api import ContextSection, Extension, Inbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from core.context.focus import MAX_BOOST, focus_boost, focus_sections, focus_terms
from core.storage.store import NewMessage
from tests.core.support import light_runtime

LISBON = "Trip notes: the Lisbon flat is booked; the ferry to Barreiro runs hourly. " * 11
GARDEN = "Garden notes: tomatoes need staking, the hose leaks at the tap, buy mulch. " * 11


def test_focus_terms_are_names_paths_and_plan_words() -> None:
    terms = focus_terms("Can you check deploy/run.sh before Ana flies to Lisbon? Budget too.")
    assert {"deploy/run.sh", "ana", "lisbon"} <= terms.names
    assert "budget" in terms.words and "before" not in terms.words
    assert "can" not in terms.names  # a sentence's first word is no name


def test_the_boost_is_capped() -> None:
    terms = focus_terms("We meet Ana, Tom, Priya and Luis in Lisbon about the invoice")
    points, matched = focus_boost("Ana Tom Priya Luis Lisbon invoice", terms)
    assert points == MAX_BOOST and len(matched) == 6
    assert focus_boost("nothing in common", terms) == (0, [])


def test_only_unprotected_sections_that_mention_the_focus_are_raised() -> None:
    sections = [
        ContextSection("notes", "AGENTS.md", LISBON, 45),
        ContextSection("rules", "AGENTS.md", "Lisbon rules", 90, protected=True),
        ContextSection("garden", "AGENTS.md", GARDEN, 50),
    ]
    focused = focus_sections(sections, "What do I still need for the Lisbon ferry?")
    assert [section.priority for section in focused] == [55, 90, 50]
    assert focused[0].reason == "focus +10 (lisbon, ferry)"
    assert [section.key for section in focused] == ["notes", "rules", "garden"]  # same order


class Notes(Extension):
    name = "notes"

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        return [
            ContextSection("trip", "AGENTS.md", LISBON, 45, scope="chat", reason="chat notes"),
            ContextSection("garden", "AGENTS.md", GARDEN, 50, scope="chat"),
        ]


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    config.context.dynamic_total_max_chars = 1_000
    rt = light_runtime(config)
    rt.extensions.add(Notes())
    yield rt
    rt.close()


async def _plan(runtime: Runtime, text: str) -> tuple[list[str], str]:
    """(the sections the budget kept, the static prefix), the newest message being `text`."""
    chat = runtime.store.get_or_create_chat("terminal", text[:10])
    runtime.store.append(chat.id, [NewMessage("user", text)])
    turn = TurnContext(chat, Inbound("terminal", text[:10], text))
    plan = runtime.planner.plan(chat, await runtime.extensions.context_sections(turn), tools=True)
    return [meta.key for meta in plan.sections if meta.included], plan.messages[0]["content"]


async def test_the_focus_decides_which_section_the_budget_keeps(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    kept, prefix = await _plan(runtime, "What do I still need for the Lisbon ferry?")
    assert kept == ["trip"]  # priority 45 + 10 beats the garden's 50
    unfocused, other_prefix = await _plan(runtime, "hello, how are you doing")
    assert unfocused == ["garden"]
    assert prefix == other_prefix  # the static prefix never depends on the focus


async def test_context_key_shows_one_section_in_full_with_its_evidence(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await runtime.agent.handle(Inbound("terminal", "key", "What about the Lisbon ferry?"))
    reply = await runtime.agent.handle(Inbound("terminal", "key", "/context trip"))
    assert reply is not None
    text = reply.text
    assert "source: AGENTS.md" in text and "scope: chat" in text
    assert "reason: chat notes; focus +10 (lisbon, ferry)" in text and "budget: included" in text
    assert LISBON.strip() in text  # the full text, not the budgeted one
    garden = (await runtime.agent.handle(Inbound("terminal", "key", "/context garden"))).text
    assert "budget: dropped by the budget" in garden and GARDEN.strip() in garden
    missing = (await runtime.agent.handle(Inbound("terminal", "key", "/context nope"))).text
    assert missing == "No section 'nope' in the next request. Sections: trip, garden."


async def test_context_shows_the_session_peak_beside_the_current_use(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await runtime.agent.handle(Inbound("terminal", "peak", "x " * 2_000))
    await runtime.agent.handle(Inbound("terminal", "peak", "short"))
    chat = runtime.store.find_chat("terminal", "peak")
    assert chat is not None
    peak = runtime.store.peak_prompt_tokens(chat.id, "turn")
    assert peak > 1_000
    text = (await runtime.agent.handle(Inbound("terminal", "peak", "/context"))).text
    assert f"peak: ~{peak} tokens" in text
