"""Tool schemas at what the server makes of them: a function-calling preamble, a cost per
schema character, a template that repeats them in every system message (llama-cpp-python's
chatml-function-calling, rendered by the fake server), learned from `usage.prompt_tokens`;
and a request never sent over the window because of its tools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime
from core.api import ContextSection, Extension, Inbound, Tool, TurnContext
from core.bench.fakes.chat_formats import rendered_prompt_tokens
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, ServerTraits, tool_call
from core.config import Config
from core.errors import ContextOverflow
from core.model.calibration import estimator_for
from core.model.client import classify_error
from core.model.profile import load_profile
from core.model.tokens import (
    TokenEstimator,
    ToolCost,
    ToolSample,
    copies_reading,
    fit_tool_cost,
    next_tool_cost,
    overhead_tokens,
)
from tests.conftest import make_config
from tests.core.support import light_runtime

N_CTX = 2048
OVERFLOW = (
    "This model's maximum context length is 2048 tokens. However, you requested 2244 tokens "
    "(2116 in the messages, 128 in the completion). Please reduce the length of the messages "
    "or completion."
)


async def _nothing(turn: TurnContext, args: dict[str, object]) -> str:
    return "done"


def _tool(n: int) -> Tool:
    parameters = {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": f"what tool {n} looks for, in words"},
            "limit": {"type": "integer", "description": "how many results at most (10)"},
            "since": {"type": "string", "description": "an ISO date: only newer entries"},
        },
        "required": ["query"],
    }
    return Tool(f"lookup_{n}", f"Look up entries of kind {n}. Returns one per line.", _nothing,
                parameters)  # fmt: skip


class Remembered(Extension):
    """A new memory line each turn: every user message gets a context block, which a late
    system message carries."""

    name = "remembered"

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        said = turn.inbound.text[:40]
        return [ContextSection("memories", "memory", f"- the user once said: {said}", 40)]


@pytest.fixture
def llama_cpp() -> Iterator[FakeOpenAIServer]:
    """A fake llama-cpp-python server, `--chat_format chatml-function-calling --n_ctx 2048`."""
    traits = ServerTraits(n_ctx=N_CTX, chat_format="chatml-function-calling")
    with FakeOpenAIServer(traits=traits) as server:
        yield server


def _runtime(tmp_path: Path, server: FakeOpenAIServer, **context: object) -> Runtime:
    config: Config = make_config(tmp_path / "data", server.base_url, context=dict(context))
    config.llm.context_window = N_CTX
    config.llm.max_output_tokens = 128
    runtime = light_runtime(config)
    runtime.extensions.add(Remembered())
    for n in range(7):
        runtime.extensions.tools.register(_tool(n))
    return runtime


async def test_a_template_repeating_the_tools_never_overflows_a_chat(
    tmp_path: Path, llama_cpp: FakeOpenAIServer
) -> None:
    """Every late system message carries all the schemas again: on main the third turn's
    request was over the window (refused, and the turn an error) from then on."""
    runtime = _runtime(tmp_path, llama_cpp, tools_share=0.5)
    try:
        for turn in range(8):
            text = f"question {turn}: " + "tell me more about that " * 6
            reply = await runtime.agent.handle(Inbound("terminal", "tc", text))
            assert reply is not None and not reply.is_error, (turn, reply)
        profile = load_profile(runtime.store, runtime.config.llm.model)
    finally:
        runtime.close()
    assert profile.tools_per_system is True
    assert len(llama_cpp.refused) <= 1  # at most the request that showed the repetition
    last = llama_cpp.requests[-1]
    assert last["tools"] and [m["role"] for m in last["messages"]].count("system") == 1
    assert rendered_prompt_tokens(last) < N_CTX


async def test_the_tools_learned_cost_matches_the_server(
    tmp_path: Path, llama_cpp: FakeOpenAIServer
) -> None:
    runtime = _runtime(tmp_path, llama_cpp, tools_share=0.6)
    try:
        for turn in range(8):
            await runtime.agent.handle(Inbound("terminal", "lc", f"turn {turn} " + "words " * 40))
        estimator = estimator_for(runtime.store, runtime.config)
    finally:
        runtime.close()
    last = llama_cpp.requests[-1]
    served = rendered_prompt_tokens(last)
    estimate = estimator.request(last["messages"], last["tools"])
    assert abs(estimate - served) / served < 0.06, (estimate, served)
    bare = rendered_prompt_tokens({"messages": last["messages"]})
    tools = estimator.tools(last["tools"], last["messages"])
    assert abs(tools - (served - bare)) / (served - bare) < 0.15, (tools, served - bare)


def _request_with(tools: list[Tool]) -> dict[str, Any]:
    messages = [
        {"role": "system", "content": "You are Mnemo. " * 20},
        {"role": "user", "content": "Call the lookup tool for me."},
    ]
    schemas = [tool.schema() for tool in tools]
    return {"messages": messages, "tools": schemas, "tool_choice": "auto"}


@pytest.mark.parametrize("count", [1, 3, 9])
def test_the_default_tool_cost_is_not_below_a_rendered_block(count: int) -> None:
    """Before any answer: a preamble's worth more than the schemas' characters (main
    estimated one tool at a third of what llama-cpp-python's prompt spends on it)."""
    request = _request_with([_tool(n) for n in range(count)])
    rendered = rendered_prompt_tokens(request) - rendered_prompt_tokens(
        {"messages": request["messages"]}
    )
    default = TokenEstimator(4.0).tools(request["tools"], request["messages"])
    assert rendered <= default <= 1.6 * rendered


def _samples(
    per_message_char: float, fixed: float, per_char: float, sizes: list[int]
) -> list[ToolSample]:
    samples = []
    for index, message_chars in enumerate(range(1_000, 9_000, 1_000)):
        schema = sizes[index % len(sizes)]
        messages = message_chars // 300
        tokens = message_chars * per_message_char + fixed + per_char * schema
        samples.append(
            ToolSample(
                message_chars, messages, schema, 1, round(tokens) + overhead_tokens(messages)
            )
        )
    return samples


def test_fit_tool_cost_tells_the_preamble_from_the_schemas() -> None:
    samples = _samples(0.3, 150.0, 0.18, [700, 2600])
    per_message_char, fixed, per_char = fit_tool_cost(samples, 1 / 0.3)
    assert per_message_char == pytest.approx(0.3, rel=0.02)
    assert fixed == pytest.approx(150, abs=10)
    assert per_char == pytest.approx(0.18, rel=0.05)


def test_fit_tool_cost_with_one_offer_gets_its_total_right() -> None:
    per_message_char, fixed, per_char = fit_tool_cost(_samples(0.4, 0.0, 0.4, [700]), 2.5)
    assert per_message_char == pytest.approx(0.4, rel=0.02)
    assert fixed + per_char * 700 == pytest.approx(280, rel=0.03)


def test_one_reading_of_copies_does_not_overturn_what_the_requests_fit() -> None:
    """A request whose tools cost more than the fit said (a bigger offer, once) reads as
    if a template repeated them per system message; the kept requests, written once,
    fit better as they are, so nothing flips (a flip made every later request carry one
    system message). A template that does repeat them shows it in every request."""
    once = _samples(0.25, 150.0, 0.25, [700, 2600])
    cost = ToolCost(150.0, 0.25, False, tuple(once))
    outlier = ToolSample(3_000, 12, 7_000, 2, round(750 + 150 + 0.25 * 7_000))
    assert next_tool_cost(cost, outlier, True, 4.0).per_system is False
    repeated = [
        s._replace(
            systems=2 + index % 3,
            prompt_tokens=s.prompt_tokens + (1 + index % 3) * round(150 + 0.25 * s.schema_chars),
        )
        for index, s in enumerate(once)
    ]
    cost = ToolCost(150.0, 0.25, False, tuple(repeated[:-1]))
    assert next_tool_cost(cost, repeated[-1], True, 4.0).per_system is True


def test_copies_reading() -> None:
    assert copies_reading(1_600, 400, 400, 3) is True  # 400 + 3 x 400
    assert copies_reading(800, 400, 400, 3) is False
    assert copies_reading(800, 400, 400, 1) is None  # one system message: nothing to tell
    assert copies_reading(1_000, 400, 50, 2) is None  # too small to tell


def test_an_overflow_error_states_the_prompt_it_counted() -> None:
    error = classify_error(400, OVERFLOW)
    assert isinstance(error, ContextOverflow)
    assert (error.limit, error.prompt_tokens) == (2048, 2116)
    body = '{"error": {"code": 400, "type": "exceed_context_size_error", "n_prompt_tokens": 4100}}'
    llama_server = classify_error(400, "the request exceeds the available context size", body)
    assert isinstance(llama_server, ContextOverflow) and llama_server.prompt_tokens == 4100


async def test_tools_are_cut_to_the_room_the_messages_leave(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = make_config(tmp_path / "data", fake_llm.base_url, context={"tools_share": 1.0})
    config.llm.context_window = 1_024
    config.llm.max_output_tokens = 128
    runtime = light_runtime(config)
    for n in range(9):
        runtime.extensions.tools.register(_tool(n))
    try:
        ask = "please look up the entries of every kind " * 26  # ~1,100 chars, echoed
        await runtime.agent.handle(Inbound("terminal", "cut", ask))
        chat = runtime.store.find_chat("terminal", "cut")
        assert chat is not None
        plan = runtime.agent.planner.plan(chat, [], tools=True)
        estimator = estimator_for(runtime.store, runtime.config)
    finally:
        runtime.close()
    assert plan.tokens <= plan.window
    assert plan.tools and plan.tool_offer is not None and plan.tool_offer.left_out
    sent = fake_llm.requests[0]
    assert 0 < len(sent["tools"]) < 11  # the relevant ones, in the room left
    assert estimator.request(sent["messages"], sent["tools"]) <= plan.window


async def test_an_overflow_that_stays_is_answered_without_tools(
    runtime_light: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """llama-cpp-python's own loop of tool calls can fill the window whatever was sent: a
    second overflow with tools gets a request without them, not an error reply."""
    fake_llm.add(FakeReply(status=400, error=OVERFLOW), FakeReply(status=400, error=OVERFLOW))
    runtime_light.config.context.tools_share = 1.0  # tools stay after a halved budget
    reply = await runtime_light.agent.handle(Inbound("terminal", "ov", "hello there"))
    assert reply is not None and not reply.is_error and reply.text == "echo: hello there"
    assert [bool(r.get("tools")) for r in fake_llm.requests] == [True, True, False]


async def test_several_tool_calls_do_not_calibrate(
    runtime_light: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """llama-cpp-python reports, for several calls, the sum of each call's prompt."""
    calls = [tool_call("get_current_time", {}, f"c{n}") for n in range(3)]
    fake_llm.add(FakeReply(tool_calls=calls, prompt_tokens=9_000), FakeReply(content="ok"))
    await runtime_light.agent.handle(Inbound("terminal", "sc", "what time is it? " * 30))
    calibration = runtime_light.store.load_calibration(runtime_light.config.llm.model)
    assert calibration is None or calibration.chars_per_token > 3.5  # main: 2.95


@pytest.fixture
def runtime_light(config: Config) -> Iterator[Runtime]:
    rt = light_runtime(config)
    yield rt
    rt.close()


def test_tool_cost_copies() -> None:
    messages = [{"role": "system"}, {"role": "user"}, {"role": "system"}, {"role": "user"}]
    assert ToolCost(per_system=True).copies(messages) == 2
    assert ToolCost().copies(messages) == 1
