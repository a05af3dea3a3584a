"""Small windows (issue 32): tool schemas within their own budget, a short static prompt, a
summary that scales with the window, old turns shortened in the request, and the longrun
figures on a 2,048-token window."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from click.testing import CliRunner

from bots.cli import cli
from bots.runtime import Runtime
from core.api import Inbound, Tool, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import Config
from core.context.pruning import prune_request
from core.context.report import context_report
from core.context.request import MEMORY_RULES, SHORT_MEMORY_RULES, static_prefix
from core.context.summary import SummaryBudget
from core.context.tool_offer import compact_schema, offer_tools
from core.model.tokens import TokenEstimator, ToolCost
from tests.core.support import light_runtime


async def _nothing(turn: TurnContext, args: dict[str, object]) -> str:
    return ""


def _tool(name: str, description: str, essential: bool = False) -> Tool:
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "what to look for, in a few words"},
            "limit": {"type": "integer", "description": "how many results at most"},
        },
        "required": ["query"],
    }
    return Tool(name, description, _nothing, parameters, essential=essential)


TOOLS = [
    _tool("search_memory", "Search remembered facts. Returns one line per fact found.", True),
    _tool("weather_forecast", "The weather forecast for a city. Uses an online service."),
    _tool("stock_price", "The latest price of a stock ticker. Delayed by 15 minutes."),
    _tool("translate_text", "Translate a text into another language. Keeps formatting."),
]
# A server that counts the schemas as plain text, without a function-calling preamble.
ESTIMATOR = TokenEstimator(4.0, ToolCost(fixed=0.0))


def test_tools_within_their_budget_are_offered_as_written() -> None:
    offer = offer_tools(TOOLS, 10_000, ESTIMATOR, "hello")
    assert offer.schemas == [tool.schema() for tool in TOOLS]
    assert not offer.compacted and not offer.left_out


def test_over_budget_descriptions_are_compacted_before_any_tool_is_left_out() -> None:
    full = len(json.dumps([tool.schema() for tool in TOOLS])) // 4
    offer = offer_tools(TOOLS, full - 20, ESTIMATOR, "hello")
    assert offer.compacted and offer.names == [tool.name for tool in TOOLS]
    schema = compact_schema(TOOLS[1])["function"]
    assert schema["description"] == "The weather forecast for a city."
    assert schema["parameters"]["properties"] == {"query": {"type": "string"}}  # optional gone


def test_a_small_budget_offers_essential_relevant_and_recent_tools_and_says_why() -> None:
    offer = offer_tools(
        TOOLS, 170, ESTIMATOR, "What is the weather in Porto tomorrow?", ["translate_text"]
    )
    assert offer.names == ["search_memory", "weather_forecast", "translate_text"]
    assert offer.left_out == {
        "stock_price": "small window: not relevant to the message and not used recently"
    }
    tight = offer_tools(TOOLS, 60, ESTIMATOR, "weather please")
    assert tight.names == ["search_memory"]  # the essential tool even over budget
    assert tight.left_out["weather_forecast"] == "relevant, but over the tool budget"


def test_the_static_prompt_is_short_on_a_small_window() -> None:
    config = Config()
    full = static_prefix(config, ["read_memory"], date(2026, 1, 2))
    short = static_prefix(config, ["read_memory"], date(2026, 1, 2), short=True)
    assert MEMORY_RULES in full and "Tools available: read_memory." in full
    assert SHORT_MEMORY_RULES in short and "Tools available" not in short
    assert len(short) < len(full) * 0.7


def test_the_summary_length_scales_with_the_window() -> None:
    config = Config()
    small, large = SummaryBudget.of(2_048, config), SummaryBudget.of(131_072, config)
    assert 100 <= small.words <= 160
    assert large.words == 750


def test_a_small_window_shortens_old_turns_in_steps() -> None:
    messages: list[dict[str, object]] = [{"role": "system", "content": "prefix"}]
    for n in range(6):
        messages += [
            {"role": "user", "content": f"question {n} " + "u" * 600},
            {"role": "assistant", "content": f"answer {n} " + "a" * 300},
        ]
    pruned, stats = prune_request(messages, 2, small_window=True)
    assert stats.texts_shortened == 8  # turns 0-3: the tail is 2 turns (4 before it)
    assert pruned[1]["content"].endswith("[shortened: 531 chars]")  # type: ignore[union-attr]
    assert pruned[-1] == messages[-1] and pruned[0] == messages[0]
    one_more = messages + [{"role": "user", "content": "question 6 " + "u" * 600}]
    again, _ = prune_request(one_more, 2, small_window=True)
    assert again[: len(pruned)] == pruned  # the shortened part did not move: cache-stable
    _, big = prune_request(messages, 2)
    assert big.texts_shortened == 0  # a large window never shortens chat texts


@pytest.fixture
def small_runtime(config: Config) -> Iterator[Runtime]:
    config.llm.context_window = 2_048
    rt = light_runtime(config)
    yield rt
    rt.close()


async def test_context_shows_the_tools_a_small_window_left_out(
    small_runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    extra = [_tool(f"unrelated_tool_{n}", "Does something unrelated " * 8) for n in range(6)]
    for tool in extra:
        small_runtime.extensions.tools.register(tool)
    await small_runtime.agent.handle(Inbound("terminal", "small", "hello there"))
    chat = small_runtime.store.find_chat("terminal", "small")
    assert chat is not None
    turn = TurnContext(chat, Inbound("terminal", "small", "and now?"))
    report = context_report(small_runtime.planner, chat, [])
    assert report.tools_compacted and "unrelated_tool_0" in report.tools_left_out
    assert report.tools_tokens <= int(report.effective_window * 0.2)
    text = (await small_runtime.agent.handle(Inbound("terminal", "small", "/context"))).text
    assert "left out: unrelated_tool_0 (small window: not relevant" in text
    assert turn.chat.id == chat.id


def longrun_figures(turns: int, window: int) -> dict[str, Any]:
    """`mnemo bench longrun --json` with ~680-character messages, no tools, every plugin."""
    args = ["bench", "longrun", "--turns", str(turns), "--window", str(window)]
    args += ["--message-chars", "680", "--tool-every", "0", "--plugins", "all", "--json"]
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    figures: dict[str, Any] = json.loads(result.stdout[result.stdout.index("{") :])
    return figures


def test_longrun_on_a_2048_window_meets_the_small_window_targets() -> None:
    figures = longrun_figures(turns=24, window=2048)
    assert figures["requests_over_window"] == 0 and figures["lost_messages"] == 0
    assert figures["error_replies"] == 0
    assert figures["fixed_share"] <= 0.40
    assert figures["compactions_per_100_turns"] <= 12.5  # at most one per 8 turns


def test_longrun_on_a_4096_window_compacts_at_most_once_in_20_turns() -> None:
    """Recall takes a share of a 4,096 window too, so it cannot fill it every few turns."""
    figures = longrun_figures(turns=40, window=4096)
    assert figures["requests_over_window"] == 0 and figures["lost_messages"] == 0
    assert figures["compactions"] >= 1
    assert figures["compactions_per_100_turns"] <= 5.0
