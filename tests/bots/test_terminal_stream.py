"""The terminal prints a reply as it grows and ends the line with the final text."""

from __future__ import annotations

import io

from bots.terminal import TerminalChannel
from core.api import Outbound, streams


def reply(text: str) -> Outbound:
    return Outbound("terminal", "local", text, reply_to="7")


async def test_tokens_print_as_they_arrive_and_the_final_text_ends_the_line() -> None:
    out = io.StringIO()
    channel = TerminalChannel(stdin=io.StringIO(), stdout=out, interactive=True)
    assert streams(channel)
    await channel.show_partial(reply("Hel"))
    assert out.getvalue() == "mnemo> Hel"
    await channel.show_partial(reply("Hello wor"))
    await channel.send(reply("Hello world"))
    assert out.getvalue() == "mnemo> Hello world\n"


async def test_a_final_text_that_differs_from_the_partial_follows_in_full() -> None:
    out = io.StringIO()
    channel = TerminalChannel(stdin=io.StringIO(), stdout=out, interactive=False)
    await channel.show_partial(reply("Let me look"))
    await channel.show_partial(reply("Found"))  # a new answer after a tool call
    await channel.send(reply("Nothing found."))
    assert out.getvalue() == "Let me look\nFound\nNothing found.\n"


async def test_streaming_off_is_no_streaming_channel() -> None:
    channel = TerminalChannel(stdin=io.StringIO(), stdout=io.StringIO(), streaming=False)
    assert not streams(channel)
