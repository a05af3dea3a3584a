"""Sub-agents end to end with the fake model server: the child's request holds none of the
parent's memory, notes or instructions; a refused tool the child asks for is never run; the
child stops at its budgets (model calls, tokens, wall time), is cancelled with its parent,
waits for its chat's concurrency limit; its run is stored and shown with its provenance in
`/context` and `mnemo inspect`, and only its result enters the parent's history."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.api import Chat, Extension, Inbound, Tool, TurnContext
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.cli.runtime import inspect_chat
from core.config import Config
from core.subagents import plugin as subagents_plugin
from core.subagents.extension import SubagentsExtension
from core.subagents.run_store import SubagentRun
from memory import plugin as memory_plugin
from memory.extension import MemoryExtension
from memory.files import FileMemory
from tests.conftest import make_config

CHILD_MARK = "You are a sub-agent of"


class Desk(Extension):
    """A test extension: a tool with side effects and a read-only one, counting their runs."""

    name = "desk"

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.looked: list[str] = []

    def tools(self) -> list[Tool]:
        text = {"type": "object", "properties": {"text": {"type": "string"}}}
        return [
            Tool("send_note", "Send a note to the owner.", self.send, text),
            Tool("lookup", "Look a word up.", self.lookup, text, read_only=True),
            Tool("recall", "Recall facts.", self.lookup, text, read_only=True, reads_memory=True),
        ]

    async def send(self, turn: TurnContext, args: dict[str, Any]) -> str:
        self.sent.append(str(args.get("text")))
        return "sent"

    async def lookup(self, turn: TurnContext, args: dict[str, Any]) -> str:
        self.looked.append(str(args.get("text")))
        return f"definition of {args.get('text')}"


class DeskPlugin:
    def __init__(self, desk: Desk) -> None:
        self.desk = desk

    def register_commands(self, cli: object) -> None: ...

    def extension(self, host: object) -> Extension:
        return self.desk


@pytest.fixture
def desk() -> Desk:
    return Desk()


@pytest.fixture
def runtime(config: Config, desk: Desk) -> Iterator[Runtime]:
    rt = build_runtime(config, plugins=[default_plugin, DeskPlugin(desk), subagents_plugin])
    yield rt
    rt.close()


async def ask(runtime: Runtime, text: str, chat_id: str = "t") -> str:
    reply = await runtime.agent.handle(Inbound("terminal", chat_id, text))
    assert reply is not None and not reply.is_error
    return reply.text


def spawn(task: str, context: str = "", call_id: str = "s1") -> dict[str, Any]:
    args = {"task": task, **({"context": context} if context else {})}
    return tool_call("spawn_agent", args, call_id)


def is_child(request: dict[str, Any]) -> bool:
    return str(request["messages"][0]["content"]).startswith(CHILD_MARK)


def tool_names(request: dict[str, Any]) -> list[str]:
    return [tool["function"]["name"] for tool in request.get("tools") or []]


def results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def runs_of(runtime: Runtime, chat_id: str = "t") -> list[SubagentRun]:
    [extension] = [e for e in runtime.extensions if isinstance(e, SubagentsExtension)]
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None
    return list(reversed(extension.runs.recent(chat.id, 50)))


def lookup(text: str, call_id: str, completion_tokens: int = 5) -> FakeReply:
    """The child's model asks the `lookup` tool for `text`."""
    call = tool_call("lookup", {"text": text}, call_id)
    return FakeReply(tool_calls=[call], completion_tokens=completion_tokens)


@dataclass(frozen=True)
class Delegation:
    """One spawned child as the parent saw it: the parent's answer, the child's result (the
    tool result in the parent's last request) and the child's stored run."""

    answer: str
    result: str
    run: SubagentRun


async def delegate(
    runtime: Runtime, fake_llm: FakeOpenAIServer, task: str, child: Sequence[FakeReply], answer: str
) -> Delegation:
    """The parent spawns one child for `task`; the child's model gives the `child` replies
    (as many as it asks for), then the parent's model answers `answer`."""
    fake_llm.add(FakeReply(tool_calls=[spawn(task)]), *child, FakeReply(answer))
    said = await ask(runtime, "go")
    [run] = runs_of(runtime)
    return Delegation(said, results(fake_llm.requests[-1])["s1"], run)


def everything(request: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in request["messages"])


async def test_the_child_gets_none_of_the_parents_memory_notes_instructions_or_history(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = make_config(tmp_path / "data", fake_llm.base_url)
    config.agent.instructions = "OWNER-INSTRUCTION: always answer in verse."
    runtime = build_runtime(config, plugins=[default_plugin, memory_plugin, subagents_plugin])
    await runtime.start()
    try:
        chat = runtime.store.get_or_create_chat("terminal", "c1")
        FileMemory(runtime.agent.files).write("global", "terminal", "c1", "OWNER-NOTE: cat Miso")
        [memory] = [e for e in runtime.extensions if isinstance(e, MemoryExtension)]
        memory.keeper.store.add(chat.id, "The user's dog is called Rex", "PROFILE", source="t")
        fake_llm.add(FakeReply("noted"))
        await ask(runtime, "PREVIOUS-TURN: my dog is called Rex", chat_id="c1")
        fake_llm.add(
            FakeReply(tool_calls=[spawn("Compare two teas.", "CTX-PASSED: green vs black")]),
            FakeReply("Green has less caffeine."),
            FakeReply("Here is the comparison."),
        )
        assert await ask(runtime, "what is my dog called? compare teas", "c1") == (
            "Here is the comparison."
        )
        parent, child, after = fake_llm.requests[1:]
        for secret in ("OWNER-INSTRUCTION", "OWNER-NOTE", "dog is called Rex", "PREVIOUS-TURN"):
            assert secret in everything(parent), secret
            assert secret not in everything(child), secret
        assert [m["role"] for m in child["messages"]] == ["system", "user"]
        system = child["messages"][0]["content"]
        assert "Compare two teas." in system and "CTX-PASSED: green vs black" in system
        assert "no preamble" in system and "cannot start sub-agents" in system
        offered = tool_names(child)
        assert "get_current_time" in offered and "spawn_agent" not in offered
        for refused in ("write_memory", "structured_memory_add", "read_memory"):
            assert refused in tool_names(parent) and refused not in offered
        assert results(after)["s1"] == "[sub-agent run #1: done in 1 model call]\n" + (
            "Green has less caffeine."
        )
    finally:
        runtime.close()


async def test_a_refused_tool_the_child_asks_for_is_never_run(
    runtime: Runtime, fake_llm: FakeOpenAIServer, desk: Desk
) -> None:
    child_calls = [
        tool_call("send_note", {"text": "leak"}, "k1"),
        tool_call("spawn_agent", {"task": "recurse"}, "k2"),
        tool_call("lookup", {"text": "oolong"}, "k3"),
    ]
    fake_llm.add(
        FakeReply(tool_calls=[spawn("Define oolong.")]),
        FakeReply(tool_calls=child_calls),
        FakeReply("Oolong is a partly oxidised tea."),
        FakeReply("Done."),
    )
    assert await ask(runtime, "define oolong") == "Done."
    first_child, second_child = fake_llm.requests[1:3]
    assert tool_names(first_child) == ["get_current_time", "read_tool_result", "lookup"]
    assert "send_note" in tool_names(fake_llm.requests[0])  # the parent has it
    assert desk.sent == [] and desk.looked == ["oolong"]
    got = results(second_child)
    refusal = "a sub-agent may use read-only tools only (no writes, sending or spawning)"
    assert got["k1"] == f"error: tool 'send_note' is not available: {refusal}"
    assert got["k2"] == f"error: tool 'spawn_agent' is not available: {refusal}"
    assert got["k3"] == "definition of oolong"
    assert results(fake_llm.requests[3])["s1"].endswith("Oolong is a partly oxidised tea.")


async def test_allow_tools_adds_a_tool_but_never_spawning(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer, desk: Desk
) -> None:
    config.subagents.allow_tools = ["send_note", "spawn_agent"]
    sending = FakeReply(tool_calls=[tool_call("send_note", {"text": "hi"}, "k1")])
    await delegate(runtime, fake_llm, "Send a note.", [sending, FakeReply("sent it")], "ok")
    assert "send_note" in tool_names(fake_llm.requests[1])
    assert "spawn_agent" not in tool_names(fake_llm.requests[1])
    assert desk.sent == ["hi"]


async def test_the_child_stops_at_its_budget_of_model_calls_with_a_marked_partial_result(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config.subagents.max_iterations = 2
    child = [lookup("a", "k1"), lookup("b", "k2")]
    done = await delegate(runtime, fake_llm, "Look up forever.", child, "I answered.")
    assert len(fake_llm.requests) == 4  # parent, two child calls, parent
    assert done.result.startswith(
        "[sub-agent run #1: PARTIAL RESULT, stopped after 2 model calls: its budget of"
        " 2 model calls is spent]"
    )
    assert "What it found so far:\nlookup: definition of a\nlookup: definition of b" in done.result
    assert (done.run.status, done.run.iterations) == ("partial", 2)


async def test_the_child_stops_at_its_token_budget(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config.subagents.max_tokens = 100
    child = [lookup("a", "k1", completion_tokens=70), lookup("b", "k2", completion_tokens=40)]
    done = await delegate(runtime, fake_llm, "Think hard.", child, "ok")
    assert fake_llm.requests[1]["max_tokens"] == 100
    assert fake_llm.requests[2]["max_tokens"] == 30  # what is left of the child's budget
    assert "PARTIAL RESULT" in done.result
    assert "its budget of 100 output tokens is spent" in done.result
    assert (done.run.status, done.run.output_tokens) == ("partial", 110)


async def test_the_child_stops_at_its_wall_time(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config.subagents.wall_time_s = 0.5
    child = [lookup("a", "k1"), FakeReply("too late", delay_s=3)]
    started = time.monotonic()
    done = await delegate(runtime, fake_llm, "Be slow.", child, "The helper ran out of time.")
    assert done.answer == "The helper ran out of time."
    assert time.monotonic() - started < 2.5
    assert done.result.startswith(
        "[sub-agent run #1: PARTIAL RESULT, stopped after 1 model call: its wall time of"
        " 0.5 s ran out]"
    )
    assert "lookup: definition of a" in done.result
    assert done.run.status == "partial" and "wall time" in done.run.stop_reason


async def test_the_child_is_cancelled_with_its_parent(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    child_asked = threading.Event()

    def respond(request: dict[str, Any]) -> FakeReply:
        if not is_child(request):
            return FakeReply(tool_calls=[spawn("Take long.")])
        child_asked.set()
        return FakeReply("late", delay_s=3)

    fake_llm.responder = respond
    turn = asyncio.create_task(ask(runtime, "go"))
    assert await asyncio.to_thread(child_asked.wait, 5)
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await turn
    [run] = runs_of(runtime)
    assert (run.status, run.stop_reason) == ("cancelled", "the parent turn was cancelled")
    assert run.finished_at is not None


async def test_the_chats_concurrency_limit_holds_children_back(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    running, most = 0, 0
    lock = threading.Lock()

    def respond(request: dict[str, Any]) -> FakeReply:
        nonlocal running, most
        if not is_child(request):
            if any(m["role"] == "tool" for m in request["messages"]):
                return FakeReply("all three done")
            return FakeReply(tool_calls=[spawn(f"Task {n}.", call_id=f"s{n}") for n in range(3)])
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.3)
        with lock:
            running -= 1
        return FakeReply("child done")

    fake_llm.responder = respond
    assert config.subagents.max_concurrent == 2
    assert await ask(runtime, "three at once") == "all three done"
    assert most == 2
    assert [run.status for run in runs_of(runtime)] == ["done", "done", "done"]
    assert all(r.startswith("[sub-agent run #") for r in results(fake_llm.requests[-1]).values())


async def test_the_run_is_stored_and_shown_with_its_provenance(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(
        FakeReply(tool_calls=[spawn("Define tea.", "CTX")]),
        FakeReply(tool_calls=[tool_call("lookup", {"text": "tea"}, "k1")]),
        FakeReply("Tea is a drink."),
        FakeReply("Tea is a drink, says my helper."),
    )
    await ask(runtime, "what is tea?")
    [run] = runs_of(runtime)
    chat = runtime.store.find_chat("terminal", "t")
    assert chat is not None
    history = runtime.store.history(chat.id)
    user = next(m for m in history if m.role == "user")
    assert (run.tool_call_id, run.parent_message_id, run.status) == ("s1", user.id, "done")
    assert (run.task, run.context) == ("Define tea.", "CTX")
    assert run.inherited["history"] == "none" and run.inherited["memory"] == "none"
    assert [m["role"] for m in run.transcript] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    # Only the child's result entered the parent's history, as the tool result.
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2].tool_call_id == "s1" and history[2].content == run.result
    assert "definition of tea" not in "\n".join(m.content for m in history)
    assert runtime.extensions.chat_data(chat)["sub-agent runs"] == 1
    line = f"sub-agent run #1 for tool call s1 (parent message #{user.id}): done, 2 model calls"
    assert line in await ask(runtime, "/context")
    report = await inspect_chat(runtime, "terminal:t")
    assert line in report.render() and any(line in note for note in report.to_dict()["notes"])


async def test_inheritance_is_explicit_per_field(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply("hello"))
    await ask(runtime, "PREVIOUS-TURN: hello")
    fake_llm.add(FakeReply(tool_calls=[spawn("One.")]), FakeReply("a"), FakeReply("b"))
    await ask(runtime, "first")
    default_child = fake_llm.requests[2]
    assert "PREVIOUS-TURN" not in everything(default_child)
    assert "recall" not in tool_names(default_child)  # memory = "none"
    config.subagents.history = "recent"
    config.subagents.history_messages = 2
    config.subagents.memory = "tools"
    fake_llm.add(
        FakeReply(tool_calls=[spawn("Two.", call_id="s2")]), FakeReply("c"), FakeReply("d")
    )
    await ask(runtime, "second")
    child = fake_llm.requests[5]
    system = child["messages"][0]["content"]
    assert "Recent conversation (inherited):\nassistant: b\nuser: second" in system
    assert "PREVIOUS-TURN" not in system  # only the last two texts
    assert "recall" in tool_names(child)
    newest = runs_of(runtime)[-1]
    assert newest.inherited["history"] == "recent 2" and newest.inherited["memory"] == "tools"


async def test_a_spawn_without_a_task_is_a_tool_error_and_no_run(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("spawn_agent", {"task": "  "}, "s1")]),
        FakeReply("I could not."),
    )
    assert await ask(runtime, "spawn nothing") == "I could not."
    assert results(fake_llm.requests[1])["s1"] == "error: task must not be empty"
    assert runs_of(runtime) == []


class OtherChatsShelf:
    """A tool source (like an MCP server) open to another chat only."""

    def tools_for(self, chat: Chat) -> list[Tool]:
        if chat.key != "terminal:other":
            return []
        return [Tool("shelf_read", "Read the shelf.", shelf_read, read_only=True)]

    def why_missing(self, chat: Chat, name: str) -> str:
        return "the shelf is not open to this chat" if name == "shelf_read" else ""


async def shelf_read(turn: TurnContext, args: dict[str, Any]) -> str:
    raise AssertionError("never run from chat t")


async def test_the_child_never_has_more_rights_than_its_parent_chat(
    config: Config, runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    config.subagents.allow_tools = ["shelf_read"]
    runtime.extensions.tools.add_source(OtherChatsShelf())
    reading = FakeReply(tool_calls=[tool_call("shelf_read", {}, "k1")])
    await delegate(runtime, fake_llm, "Read the shelf.", [reading, FakeReply("I cannot.")], "ok")
    assert "shelf_read" not in tool_names(fake_llm.requests[1])
    assert results(fake_llm.requests[2])["k1"] == (
        "error: tool 'shelf_read' is not available: the shelf is not open to this chat"
    )


async def test_a_failing_model_call_of_the_child_is_a_tool_error(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(
        FakeReply(tool_calls=[spawn("Fail.")]),
        FakeReply(status=500, error="boom"),
        FakeReply("The helper failed."),
    )
    assert await ask(runtime, "go") == "The helper failed."
    result = results(fake_llm.requests[2])["s1"]
    assert result.startswith("error: sub-agent run #1 failed: ")
    [run] = runs_of(runtime)
    assert run.status == "failed" and run.result == result
