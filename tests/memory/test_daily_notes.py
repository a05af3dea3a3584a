"""Daily notes (LiberClaw, issue 32): `write_memory` scope `today` appends to the chat's
`YYYY-MM-DD.md` beside its AGENTS.md under the notes' gate and group rules; today's and
yesterday's are injected in the dynamic part, older ones only found by search or read."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from memory.daily_notes import DailyNotes, today
from tests.memory.test_extension import memory_ext, system_text
from tests.memory.test_notes import GROUP, TAKEOVER, group_message


async def call_tool(
    runtime: Runtime, fake_llm: FakeOpenAIServer, message: Inbound, name: str, args: dict[str, Any]
) -> str:
    fake_llm.add(FakeReply(tool_calls=[tool_call(name, args, "call_1")]), FakeReply("done"))
    await runtime.agent.handle(message)
    results = [m for m in fake_llm.requests[-1]["messages"] if m.get("role") == "tool"]
    return str(results[-1]["content"])


def notes_of(runtime: Runtime, chat_id: str) -> DailyNotes:
    return DailyNotes(memory_ext(runtime).keeper.files, "terminal", chat_id)


async def test_today_is_appended_beside_agents_md_and_injected_in_the_dynamic_part(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    message = Inbound("terminal", "d1", "note that", "u1", "Alice")
    dentist = {"scope": "today", "content": "Booked the dentist for 9:30."}
    first = await call_tool(runtime, fake_llm, message, "write_memory", dentist)
    assert first.startswith(f"added to today's note ({today().isoformat()}.md")
    await call_tool(runtime, fake_llm, message, "write_memory",
                    {"scope": "today", "content": "Paid the plumber 80 euros."})  # fmt: skip
    notes = notes_of(runtime, "d1")
    assert notes.read(today()) == "Booked the dentist for 9:30.\nPaid the plumber 80 euros.\n"
    agents = memory_ext(runtime).keeper.files.scope("chat", "terminal", "d1").path
    assert notes.path(today()).rsplit("/", 1)[0] == agents.rsplit("/", 1)[0]
    notes.append(today() - timedelta(days=1), "Yesterday: called the bank.")
    notes.append(today() - timedelta(days=5), "Old: the garage code is on the fridge.")
    await runtime.agent.handle(Inbound("terminal", "d1", "what did I do?", "u1", "Alice"))
    request = fake_llm.requests[-1]
    prefix = request["messages"][0]["content"]
    system = system_text(request)
    assert "Booked the dentist" in system and "called the bank" in system
    assert "Booked the dentist" not in prefix  # dynamic part only, never the static prefix
    assert "garage code" not in system  # an older day is never injected whole


async def test_older_days_are_searchable_and_readable(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    notes = notes_of(runtime, "d2")
    old = today() - timedelta(days=9)
    notes.append(old, "The garage code is 4411.")
    notes.append(old, "Lunch with Rui.")
    message = Inbound("terminal", "d2", "what is the garage code?", "u1", "Alice")
    found = await call_tool(runtime, fake_llm, message, "structured_memory_search",
                            {"query": "garage code"})  # fmt: skip
    assert f"daily note {old.isoformat()}: The garage code is 4411." in found
    assert "Rui" not in found
    read = await call_tool(runtime, fake_llm, message, "read_memory",
                           {"scope": "today", "date": old.isoformat()})  # fmt: skip
    assert read == "The garage code is 4411.\nLunch with Rui.\n"
    bad = await call_tool(runtime, fake_llm, message, "read_memory",
                          {"scope": "today", "date": "last week"})  # fmt: skip
    assert bad == "error: date must be YYYY-MM-DD, not 'last week'"


async def test_daily_notes_follow_the_notes_gate_and_group_rules(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    member = group_message("@bot note it", "u2", "Mallory")
    refused = await call_tool(runtime, fake_llm, member, "write_memory",
                              {"scope": "today", "content": "We meet at 6."})  # fmt: skip
    assert "only an admin or the bot's owner" in refused
    admin = group_message("@bot note it", "u1", "Ada", sender_is_admin=True)
    takeover = await call_tool(runtime, fake_llm, admin, "write_memory",
                               {"scope": "today", "content": TAKEOVER})  # fmt: skip
    assert "reads like an instruction" in takeover
    saved = await call_tool(runtime, fake_llm, admin, "write_memory",
                            {"scope": "today", "content": "We meet at 6."})  # fmt: skip
    assert saved.startswith("added to today's note")
    assert notes_of(runtime, GROUP).read(today()) == "We meet at 6.\n"
    changes = memory_ext(runtime).keeper.store.note_changes(
        runtime.store.get_or_create_chat("terminal", GROUP).id, 10
    )
    assert [(c.scope, c.action) for c in changes][:2] == [("today", "append"), ("today", "refused")]
