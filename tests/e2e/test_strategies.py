"""End to end: the reflector proposes a strategy, tags it helpful twice, it reaches a request."""

from __future__ import annotations

import json
import re
from typing import Any

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from memory.strategies.lifecycle import PROMOTED, SHADOW
from memory.strategies.strategy_store import DatabaseStrategyStore
from reflector.extension import ReflectorExtension

STRATEGY = "Answers in Spanish land better with this user"


def reflector_of(runtime: Runtime) -> ReflectorExtension:
    return next(e for e in runtime.agent.extensions if isinstance(e, ReflectorExtension))


async def test_a_strategy_earns_its_place_and_reaches_a_request(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    operations: list[list[dict[str, Any]]] = []

    def responder(request: dict[str, Any]) -> FakeReply:
        prompt = json.dumps(request["messages"])
        if "<new_messages>" not in prompt:
            return FakeReply("De acuerdo.")
        listed = [int(n) for n in re.findall(r"\[id=(\d+)\] \((?:SHADOW|PROMOTED)", prompt)]
        if not listed:
            ops = [{"op": "ADD", "section": "language", "content": STRATEGY}]
        else:
            ops = [{"op": "TAG", "id": listed[0], "tag": "helpful"}]
        operations.append(ops)
        return FakeReply(json.dumps({"memories": [], "strategies": ops}))

    fake_llm.responder = responder
    reflector = reflector_of(runtime).reflector
    store = DatabaseStrategyStore(runtime.storage.database)

    async def turn_then_pass(text: str) -> list[dict[str, Any]]:
        await runtime.dispatcher(Inbound("terminal", "maria", text, sender_name="Maria"))
        turn_request: list[dict[str, Any]] = fake_llm.requests[-1]["messages"]
        report = await reflector.run_pass()
        assert report.ok, report.lines()
        return turn_request

    first = await turn_then_pass("Please answer in Spanish from now on, it is easier for me.")
    chat = runtime.store.find_chat("terminal", "maria")
    assert chat is not None
    [added] = store.for_chat(chat.id)
    assert added.content == STRATEGY and added.state == SHADOW
    assert "Learned strategies" not in json.dumps(first)

    second = await turn_then_pass("¡Gracias, así es perfecto!")
    assert STRATEGY not in json.dumps(second)  # SHADOW: observed, not injected
    tagged_once = store.get(added.id)
    assert tagged_once is not None and tagged_once.state == SHADOW

    await turn_then_pass("Muy bien, gracias otra vez.")
    promoted = store.get(added.id)
    assert promoted is not None and promoted.state == PROMOTED
    assert operations[1:] == [[{"op": "TAG", "id": added.id, "tag": "helpful"}]] * 2

    await runtime.dispatcher(Inbound("terminal", "maria", "¿Qué tiempo hace?", sender_name="Maria"))
    request = fake_llm.requests[-1]["messages"]
    dynamic = request[-2]
    assert dynamic["role"] == "system"
    assert f"- [s{added.id}] {STRATEGY} (helpful=2, harmful=0)" in dynamic["content"]
    kinds = [kind for kind, _, run_id, _ in store.events(added.id) if run_id is not None]
    assert kinds == ["ADD", "TAG", "TAG", "STATE"]
