"""What each page shows: chats and their search, the conversation with compactions marked,
memories ranked as a turn ranks them, strategies, reflector runs with their failures, the
next request section by section, the pictures and health. Reading changes nothing."""

from __future__ import annotations

import re
from typing import Any

from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, echo_responder, tool_call
from core.context.summary import SUMMARY_MARKER
from memory.stores import strategy_store
from reflector.extension import ReflectorExtension
from reflector.store import ChatRun
from tests.bots.web.conftest import ON_BOTH_ENGINES, Site, say, written_rows
from tests.bots.web.test_security import pages_of

pytestmark = ON_BOTH_ENGINES

SUMMARY = (
    "## Goal\nTalk about cats.\n## Constraints and preferences\nShort.\n## Progress\nSome."
    "\n## Key decisions\nNone.\n## Next steps\nGo on.\n## Critical context\nMiso naps a lot."
)


def summaries_and_echo(request: dict[str, Any]) -> FakeReply:
    if request["messages"][0]["content"].startswith(SUMMARY_MARKER):
        return FakeReply(SUMMARY)
    return echo_responder(request)


async def test_the_chats_page_lists_and_searches_chats(site: Site) -> None:
    await site.login()
    page = await site.client.get("/")
    assert (
        f'href="/chats/{site.ann.id}"' in page.text and f'href="/chats/{site.bob.id}"' in page.text
    )
    assert "low" in page.text  # pressure
    for query in ("bob", "terminal:bo", str(site.bob.id)):
        found = await site.client.get("/", params={"q": query})
        assert f'href="/chats/{site.bob.id}"' in found.text, query
        assert f'href="/chats/{site.ann.id}"' not in found.text, query
    none = await site.client.get("/", params={"q": "100%_"})
    assert "No chat matches" in none.text


async def test_recall_ranks_with_the_bots_own_ranker(site: Site) -> None:
    await site.login()
    question = "where does my sister live?"
    page = await site.client.get(f"/chats/{site.ann.id}/memories", params={"q": question})
    recall = page.text.split("<h2>Memories")[0]
    shown = [int(i) for i in re.findall(r'<td><a href="/chats/\d+/memories/(\d+)">#', recall)]
    ranked = [item.memory.id for item in site.keeper.rank(site.ann.id, question, 20)]
    assert shown == ranked and ranked  # the recall table lists exactly the ranking
    assert "[PROFILE] my sister lives in Porto" in page.text  # the injected block


async def test_the_conversation_marks_compactions_and_the_summary(
    site: Site, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = summaries_and_echo
    for n in range(10):
        await say(site.runtime, "ann", f"turn {n} about Miso: " + "w" * 200, "Ann")
    reply = await site.runtime.dispatcher(Inbound("terminal", "ann", "/compact", "u-ann", "Ann"))
    assert reply is not None and reply.text.startswith("Compacted")
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}")
    assert "compaction #1 (command, summarised)" in page.text
    assert "compacted (#1)" in page.text and "Miso naps a lot." in page.text
    assert "the current session starts here" in page.text


async def test_strategies_and_reflector_runs_with_their_failures(site: Site) -> None:
    strategies = strategy_store(site.runtime.storage)
    strategy = strategies.add(site.ann.id, "style", "Short answers land better with Ann")
    strategies.tag(strategy, "helpful")
    strategies.tag(strategy, "helpful")
    [reflector] = [e for e in site.runtime.extensions if isinstance(e, ReflectorExtension)]
    runs = reflector.reflector.runs
    runs.record(ChatRun(site.ann.id, ok=True, status="done", messages_seen=4, added=2))
    runs.record(
        ChatRun(site.ann.id, ok=False, status="failed", error="the model timed out after 60 s")
    )
    runs.record(ChatRun(site.bob.id, ok=False, status="failed", error="Bob's own failure"))
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}/strategies")
    assert "Short answers land better with Ann" in page.text and "PROMOTED" in page.text
    page = await site.client.get(f"/chats/{site.ann.id}/reflector")
    assert "the model timed out after 60 s" in page.text and "failed" in page.text
    assert "Bob" not in page.text and page.text.count("<svg") >= 2


async def test_the_context_page_shows_each_section_and_its_share(site: Site) -> None:
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}/context")
    assert 'class="sharebar"' in page.text
    for part in ("static prefix", "history", "memories", "kept for the answer"):
        assert part in page.text, part
    assert "[PROFILE] my cat is called Miso" in page.text and "Felix" not in page.text


async def test_the_pictures_and_health(site: Site) -> None:
    await site.login()
    pictures = await site.client.get("/pictures")
    assert pictures.text.count("<svg") >= 5
    assert ">turn<" in pictures.text  # the usage kind in the legend
    assert site.runtime.config.llm.model in pictures.text or "fake-model" in pictures.text
    health = await site.client.get("/health")
    for line in ("database", "embedding model", "memory ranking", "context window", "queue"):
        assert line.lower() in health.text.lower(), line


async def test_reading_every_page_writes_nothing(site: Site) -> None:
    await site.login()
    strategies = strategy_store(site.runtime.storage)
    promoted = strategies.add(site.ann.id, "style", "Lists work for Ann")
    strategies.tag(promoted, "helpful")
    strategies.tag(promoted, "helpful")  # promoted: the context page reads it
    before = written_rows(site.runtime.storage)
    for path in pages_of(site):
        assert (await site.client.get(path)).status_code == 200, path
    assert written_rows(site.runtime.storage) == before
    site.keeper.store.touch(site.memory_id(site.ann, "Miso"))
    assert written_rows(site.runtime.storage) != before  # the check does see a write


async def test_a_message_the_model_never_answered_is_marked_unanswered(
    site: Site, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.add(FakeReply(status=500, error="the model server fell over"))
    await say(site.runtime, "ann", "are you there?", "Ann")
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}")
    assert page.text.count("unanswered: answered with an error") == 1
    [marked] = re.findall(r'<li class="msg user unanswered" id="m(\d+)">', page.text)
    asked = [m for m in site.runtime.store.history(site.ann.id) if m.content == "are you there?"]
    assert [int(marked)] == [m.id for m in asked]
    # Answered messages and `remember:` (answered without the model) carry no mark.
    assert page.text.count('class="tag unanswered"') == 1


async def test_health_and_the_runs_say_the_last_run_failed_and_why_facts_were_skipped(
    site: Site,
) -> None:
    [reflector] = [e for e in site.runtime.extensions if isinstance(e, ReflectorExtension)]
    run = ChatRun(site.ann.id, ok=True, status="done", messages_seen=4, added=1)
    run.skip("ungrounded", 2)
    run.skip("small talk")
    reflector.reflector.runs.record(run)
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}/reflector")
    assert "2 ungrounded, 1 small talk" in page.text
    health = await site.client.get("/health")
    assert "ok, 3 skipped (2 ungrounded, 1 small talk)" in health.text
    failed = ChatRun(site.ann.id, ok=False, status="failed", error="the GPU caught fire")
    reflector.reflector.runs.record(failed)
    health = await site.client.get("/health")
    row = re.search(r"<tr><td><span class=\"check (\w+)\">[^<]*</span></td><td>reflector</td>"
                    r"<td>([^<]*)</td>", health.text)  # fmt: skip
    assert row is not None and row.group(1) == "warn"
    assert "FAILED: the GPU caught fire" in row.group(2)


async def test_the_favicon_is_served_and_linked(site: Site) -> None:
    icon = await site.client.get("/favicon.ico")  # before logging in, as a browser asks
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg")
    assert (await site.client.get("/static/favicon.svg")).status_code == 200
    await site.login()
    page = await site.client.get("/")
    assert '<link rel="icon" href="/static/favicon.svg"' in page.text


async def test_the_context_page_counts_the_tool_schemas(site: Site) -> None:
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}/context")
    assert "tool schemas" in page.text and "the sum of the parts above" in page.text


def helper_and_parent(request: dict[str, Any]) -> FakeReply:
    """A parent that hands the question to a sub-agent once, and the sub-agent's answer."""
    messages = request["messages"]
    if str(messages[0]["content"]).startswith("You are a sub-agent of"):
        return FakeReply("The cat is called Miso.")
    if any(m["role"] == "tool" for m in messages):
        return FakeReply("Miso, says my helper.")
    if request.get("tools") and "helper" in str(messages[-1]["content"]):
        task = {"task": "Find the name of the cat.", "context": "notes say Miso"}
        return FakeReply(tool_calls=[tool_call("spawn_agent", task, "sp1")])
    return echo_responder(request)


async def test_sub_agent_runs_show_with_provenance_result_and_transcript(
    site: Site, fake_llm: FakeOpenAIServer
) -> None:
    fake_llm.responder = helper_and_parent
    await say(site.runtime, "ann", "ask a helper about my cat", "Ann")
    await site.login()
    page = await site.client.get(f"/chats/{site.ann.id}/subagents")
    assert "sub-agent run #1 for tool call sp1" in page.text
    assert "Find the name of the cat." in page.text and "notes say Miso" in page.text
    assert "[sub-agent run #1: done in 1 model call]" in page.text  # the parent's tool result
    assert "The cat is called Miso." in page.text and "<b>system</b>" in page.text
    other = await site.client.get(f"/chats/{site.bob.id}/subagents")
    assert "No sub-agent run in this chat yet." in other.text


async def test_the_header_links_to_the_chat_page_only_when_it_is_served(site: Site) -> None:
    """The dashboard without its chat channel (the `site` app is built without one) has no
    chat page, so its header offers none; with the channel, see `test_chat.py`."""
    await site.login()
    page = await site.client.get("/")
    assert page.status_code == 200 and 'href="/tasks"' in page.text
    assert 'href="/chat"' not in page.text
    assert (await site.client.get("/chat")).status_code == 404
