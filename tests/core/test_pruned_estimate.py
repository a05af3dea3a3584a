"""The pruned estimate decides compaction (AceClaw, issue 32): when stubbing old tool
results brings the request under the compaction threshold, no compaction happens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.api import Inbound, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from tests.core.support import light_runtime
from tests.core.test_pruning import ReportTool, _script_tool_turns


@pytest.fixture
def runtime(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


async def test_pruning_alone_prevents_a_compaction_when_it_can(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config = runtime.config
    config.llm.context_window = 8_000
    config.llm.max_output_tokens = 1_000
    config.context.protect_turns = 1
    runtime.extensions.add(ReportTool(4_000))
    _script_tool_turns(fake_llm, 6)
    for n in range(6):
        await runtime.agent.handle(Inbound("terminal", "prune", f"report {n} please"))
    chat = runtime.store.find_chat("terminal", "prune")
    assert chat is not None
    turn = TurnContext(chat, Inbound("terminal", "prune", "and the next one?"))
    sections = await runtime.extensions.context_sections(turn)
    plan = runtime.planner.plan(chat, sections, tools=True)
    whole = plan.tokens + plan.estimator.chars(plan.prune.chars_removed)
    threshold = config.context.compaction_threshold
    # Whole, the tool results would pass the threshold; stubbed, the request is under it.
    assert whole / plan.window > threshold >= plan.share and plan.prune.tool_results_pruned
    assert runtime.store.session(chat.id).compaction_count == 0
    assert not any("running summary" in str(r["messages"][0]) for r in fake_llm.requests)
