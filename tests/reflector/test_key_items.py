"""Key items before compaction (AceClaw, issue 32): the flush before a compaction hands the
reflector the errors, file paths and decisions found in tool results, not only the talk."""

from __future__ import annotations

import json
from typing import Any

from core.api import TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.events import Inbound
from core.storage.store import NewMessage
from reflector.extension import ReflectorExtension
from reflector.key_items import key_items
from reflector.reflection import Reflector

RESULT = (
    """deploy log
step 1 ok
Error: permission denied writing /etc/app/config.toml
We decided to keep the staging server on port 8080.
"""
    + "row ok\n" * 400
)


def test_key_items_are_errors_paths_and_decisions() -> None:
    items = key_items(RESULT)
    assert items == (
        "error: Error: permission denied writing /etc/app/config.toml; "
        "paths: /etc/app/config.toml; "
        "decision: We decided to keep the staging server on port 8080."
    )
    assert key_items('{"result": 1}') == ""


async def test_the_flush_before_compaction_reads_the_tool_results_key_items(
    reflector: Reflector, fake_llm: FakeOpenAIServer
) -> None:
    store = reflector.store
    chat = store.get_or_create_chat("terminal", "alice")
    call = {"id": "c1", "type": "function", "function": {"name": "deploy", "arguments": "{}"}}
    ids = store.append(
        chat.id,
        [
            NewMessage("user", "Deploy the staging server please", "alice"),
            NewMessage("assistant", "", tool_calls=[call]),
            NewMessage("tool", RESULT, tool_call_id="c1"),
            NewMessage("assistant", "The deploy stopped halfway."),
        ],
    )
    prompts: list[str] = []

    def responder(request: dict[str, Any]) -> FakeReply:
        prompts.append(json.dumps(request["messages"]))
        return FakeReply(content=json.dumps({"memories": []}))

    fake_llm.responder = responder
    extension = ReflectorExtension(reflector.config, reflector)
    turn = TurnContext(chat, Inbound("terminal", "alice", "hi"))
    assert await extension.before_compaction(turn, ids[-1])
    [prompt] = [p for p in prompts if "<new_messages>" in p]
    assert "[tool result key items]: error: Error: permission denied" in prompt
    assert "/etc/app/config.toml" in prompt and "port 8080" in prompt
    assert "row ok" not in prompt  # the rest of the result stays out
