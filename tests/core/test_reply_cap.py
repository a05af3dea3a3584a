"""`[agent] max_reply_chars`: a huge model reply is cut, with a note, before it is sent or kept."""

from __future__ import annotations

from bots.runtime import Runtime
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.text import cap_reply
from tests.core.test_turn import inbound, stored

MEGABYTE = 1_048_576


async def test_a_huge_reply_is_cut_with_a_note_and_kept_as_sent(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    words = ("lorem ipsum dolor sit amet " * (MEGABYTE // 27 + 1))[:MEGABYTE]
    fake_llm.add(FakeReply(words))
    reply = await runtime.dispatcher(inbound("write a megabyte"))
    assert reply is not None
    limit = runtime.config.agent.max_reply_chars
    assert limit == 12_000  # the default
    assert len(reply.text) <= limit
    head, _, note = reply.text.rpartition("\n\n")
    assert note == f"… [reply cut at {len(head):,} of 1,048,576 characters]"
    assert len(head) > limit * 0.9 and words.startswith(head)
    assert stored(runtime)[-1] == ("assistant", reply.text)  # the history keeps what was sent


async def test_a_command_reply_is_capped_too(runtime: Runtime) -> None:
    full = await runtime.dispatcher(inbound("/help"))
    assert full is not None and len(full.text) > 200
    runtime.config.agent.max_reply_chars = 200
    capped = await runtime.dispatcher(inbound("/help"))
    assert capped is not None and len(capped.text) <= 200
    assert capped.text.endswith(f" of {len(full.text)} characters]")


def test_cap_keeps_short_text_and_closes_an_open_code_fence() -> None:
    assert cap_reply("short", 500) == "short"
    code = "Here:\n```python\n" + "value = 1\n" * 500 + "```\n"
    capped = cap_reply(code, 600)
    assert len(capped) <= 600
    body = capped.rpartition("\n\n…")[0]
    assert body.endswith("value = 1\n```") and body.count("```") == 2
    assert cap_reply(capped, 600) == capped  # capping twice changes nothing
