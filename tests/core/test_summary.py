"""Summaries are judged by their structure: six headings, in order, each filled; never cut."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.config import Config
from core.context.summary import HEADINGS, usable_summary, well_structured
from tests.core.support import light_runtime

GOOD = (
    "## Goal\nShip the report.\n## Constraints and preferences\nnone\n"
    "## Progress\n- Done: draft.\n### Blocked\nnone\n## Key decisions\nUse SQLite.\n"
    "## Next steps\nReview.\n## Critical context\n/srv/report.md, port 8443"
)


def with_section(heading: str, body: str) -> str:
    """GOOD with the body under `heading` replaced."""
    lines = GOOD.split("\n")
    start = lines.index(f"## {heading}")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return "\n".join([*lines[: start + 1], *([body] if body else []), *lines[end:]])


def test_a_complete_summary_passes_in_several_heading_styles() -> None:
    assert usable_summary(GOOD) == GOOD
    bold = "\n".join(f"**{h}:**\nsomething about {h.lower()}" for h in HEADINGS)
    assert usable_summary(bold) == bold
    numbered = "\n".join(f"### {n}. {h}\nnone" for n, h in enumerate(HEADINGS, 1))
    assert usable_summary(numbered) == numbered
    assert usable_summary(f"Here is the updated summary:\n\n{GOOD}") == GOOD


@pytest.mark.parametrize(
    "text",
    [
        "The goal was good progress on key decisions, next steps and the critical context.",
        GOOD.replace("## Key decisions\nUse SQLite.\n", ""),  # a heading missing
        GOOD.replace("## Goal", "## Aim"),
        with_section("Next steps", ""),  # a heading with nothing under it
        with_section("Critical context", "- "),
        GOOD + "\n## Goal\nAnother goal.",  # a heading twice
        "## Constraints and preferences\nnone\n## Goal\nShip.\n"  # out of order
        + GOOD[GOOD.index("## Progress") :],
        "Goal: ship. Constraints and preferences: none. Progress: done. Key decisions: none."
        " Next steps: none. Critical context: none.",  # headings run into one line
    ],
)
def test_anything_without_the_full_structure_is_rejected(text: str) -> None:
    assert not well_structured(text)
    assert usable_summary(text) is None


def test_a_cut_summary_is_rejected_even_when_well_formed() -> None:
    assert usable_summary(GOOD, finish_reason="length") is None
    assert usable_summary(GOOD, finish_reason="stop") == GOOD


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    config.llm.context_window = 4_096
    rt = light_runtime(config)
    yield rt
    rt.close()


@pytest.mark.parametrize(
    "reply",
    [
        FakeReply(GOOD, finish_reason="length"),
        FakeReply("## Goal\nShip it.\n## Progress\nGood progress so far, next steps soon."),
    ],
)
async def test_compaction_falls_back_on_a_cut_or_unstructured_summary(
    runtime: Runtime, fake_llm: FakeOpenAIServer, reply: FakeReply
) -> None:
    for n in range(8):
        await runtime.agent.handle(Inbound("terminal", "s", f"turn {n}: " + "w" * 200))
    fake_llm.add(reply)
    result = await runtime.agent.handle(Inbound("terminal", "s", "/compact"))
    assert result is not None and "Summarising failed" in result.text
    assert runtime.store.session(1).summary is None
    status, error = runtime.conn.execute("SELECT status, error FROM compactions").fetchone()
    assert status == "fallback" and "unusable summary" in error
    assert ("cut at the output limit" in error) == (reply.finish_reason == "length")
    summary_request = fake_llm.requests[-1]
    assert summary_request["max_tokens"] == 1_024  # what a 4,096 window leaves the answer
