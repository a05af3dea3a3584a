"""The Discord channel through dpytest's fake gateway and HTTP, with the real core."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import discord
import discord.ext.test as dpytest
import pytest

from bots.discord_bot import DiscordChannel
from bots.runtime import Runtime, build_runtime
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from tests.conftest import make_config


@dataclass
class Harness:
    runtime: Runtime
    channel: DiscordChannel
    client: discord.Client
    config: dpytest.RunnerConfig

    @property
    def bot_mention(self) -> str:
        assert self.client.user is not None
        return f"<@{self.client.user.id}>"

    def stored(self, chat_id: str) -> list[tuple[str, str, str]]:
        chat = self.runtime.store.find_chat("discord", chat_id)
        if chat is None:
            return []
        return [(m.role, m.sender, m.content) for m in self.runtime.store.history(chat.id)]


def sent_messages() -> list[discord.Message]:
    messages = []
    while not dpytest.sent_queue.empty():
        messages.append(dpytest.get_message())
    return messages


@pytest.fixture
async def dc_runtime(tmp_path: Path, fake_llm: FakeOpenAIServer) -> AsyncIterator[Runtime]:
    # Whole replies here (these tests read the messages sent); streaming: its own test below.
    discord_section = {"token": "unused", "streaming": False}
    config = make_config(tmp_path / "data", fake_llm.base_url, discord=discord_section)
    runtime = build_runtime(config)
    await runtime.start()
    yield runtime
    runtime.close()


@pytest.fixture
async def harness(dc_runtime: Runtime) -> AsyncIterator[Harness]:
    channel = DiscordChannel(dc_runtime.config.discord, dc_runtime.extensions.command_list())
    dc_runtime.dispatcher.attach(channel)  # as `mnemo run` does: replies go out through it
    client = channel.bind(dc_runtime.dispatcher)
    # dpytest keeps its fake members only in a member cache, which needs the members intent;
    # the bot itself does not (it only reads message authors).
    state = client._connection
    state._intents.members = True
    state.member_cache_flags = discord.MemberCacheFlags.from_intents(state._intents)
    dpytest.configure(client, members=["Alice", "Bob"])
    await client._async_setup_hook()  # what `async with client` does: bind it to this loop
    yield Harness(dc_runtime, channel, client, dpytest.get_config())
    await dpytest.empty_queue()


async def test_dm_is_answered_with_typing(harness: Harness) -> None:
    alice = harness.config.members[0]
    dm = await alice.create_dm()
    typing: list[object] = []
    dpytest.callbacks.set_callback(lambda channel: _record(typing, channel), "send_typing")
    await dpytest.message("hello from a DM", channel=dm, member=alice)
    [reply] = sent_messages()
    assert reply.content == "echo: hello from a DM"
    assert reply.reference is None  # no quoting in a DM
    assert typing
    assert harness.stored(str(dm.id)) == [
        ("user", "Alice", "hello from a DM"),  # a DM author is a User: no guild nick
        ("assistant", "", "echo: hello from a DM"),
    ]


async def _record(into: list[object], item: object) -> None:
    into.append(item)


async def test_guild_message_is_stored_and_mention_is_answered(
    harness: Harness, fake_llm: FakeOpenAIServer
) -> None:
    alice, bob = harness.config.members
    general = harness.config.channels[0]
    await dpytest.message("I adopted a cat named Miso", channel=general, member=alice)
    assert sent_messages() == []  # stored, not answered
    await dpytest.message(f"{harness.bot_mention} what is the cat called?", member=bob)
    [reply] = sent_messages()
    assert len(fake_llm.requests) == 1
    contents = [m["content"] for m in fake_llm.requests[0]["messages"]]
    assert f"[{alice.display_name}]: I adopted a cat named Miso" in contents
    assert f"[{bob.display_name}]: what is the cat called?" in contents
    assert reply.content == f"echo: [{bob.display_name}]: what is the cat called?"
    users = [row for row in harness.stored(str(general.id)) if row[0] == "user"]
    assert [row[1] for row in users] == [alice.display_name, bob.display_name]


async def test_ignored_messages(harness: Harness, fake_llm: FakeOpenAIServer) -> None:
    harness.channel.config.allowed_channel_ids = [harness.config.channels[0].id]
    harness.channel.config.allowed_user_ids = [harness.config.members[0].id]
    alice, bob = harness.config.members
    # Bob's talk in the group is stored as context; what he says to the bot is neither
    # answered nor stored (stored, it would be a question left for the model to answer).
    await dpytest.message("the meeting moved to Friday", member=bob)
    await dpytest.message(f"{harness.bot_mention} answer me", member=bob)
    # Bob's DM is refused once with his id, and costs no model call.
    dm = await bob.create_dm()
    await dpytest.message("let me in", channel=dm, member=bob)
    await dpytest.message("please", channel=dm, member=bob)
    [refusal] = sent_messages()
    assert str(bob.id) in refusal.content and "allowed_user_ids" in refusal.content
    assert fake_llm.requests == []
    assert harness.stored(str(dm.id)) == []
    general = harness.stored(str(harness.config.channels[0].id))
    assert [row[2] for row in general] == ["the meeting moved to Friday"]
    await dpytest.message("!reset", member=alice)  # a prefix command from an allowed user
    [reset] = sent_messages()
    assert reset.content.startswith("Started a new session")
    assert fake_llm.requests == []


async def test_long_reply_is_split_at_2000_keeping_code_blocks(
    harness: Harness, fake_llm: FakeOpenAIServer
) -> None:
    code = "```js\n" + "\n".join(f"console.log({i}); // line {i}" for i in range(150)) + "\n```"
    prose = "\n\n".join(f"Point {i}: " + "some words here " * 10 for i in range(8))
    fake_llm.add(FakeReply(content=f"{prose}\n\n{code}\n\nDone."))
    await dpytest.message(f"{harness.bot_mention} long please", member=0)
    parts = [message.content for message in sent_messages()]
    assert len(parts) >= 3
    assert all(len(part) <= 2000 for part in parts)
    for part in parts:
        assert part.count("```") % 2 == 0  # every code fence that opens also closes
    with_code = [part for part in parts if "console.log" in part]
    assert len(with_code) >= 2 and all(
        part.startswith("```js") or "```js" in part for part in with_code
    )
    joined = "\n".join(parts)
    assert "console.log(0);" in joined and "console.log(149);" in joined
    assert parts[-1].endswith("Done.")


async def test_attachment_is_stored_as_a_placeholder(harness: Harness) -> None:
    """A file that is neither an image nor audio (those: tests/bots/test_discord_media.py)."""
    dm = await harness.config.members[0].create_dm()
    await dpytest.message("look at this", channel=dm, member=0, attachments=["notes.pdf"])
    [reply] = sent_messages()
    assert reply.content == "echo: [file: notes.pdf] look at this"


async def test_thread_is_its_own_session(harness: Harness) -> None:
    general = harness.config.channels[0]
    alice = harness.config.members[0]
    thread_id = general.id + 10_000  # clear of the ids dpytest hands out
    harness.client._connection.parse_thread_create(
        {
            "id": str(thread_id),
            "guild_id": str(general.guild.id),
            "parent_id": str(general.id),
            "owner_id": str(alice.id),
            "name": "trip planning",
            "type": 11,
            "message_count": 0,
            "member_count": 1,
            "rate_limit_per_user": 0,
            "thread_metadata": {
                "archived": False,
                "auto_archive_duration": 1440,
                "archive_timestamp": "2026-01-01T00:00:00+00:00",
                "locked": False,
            },
        }
    )
    thread = general.guild.get_thread(thread_id)
    assert thread is not None
    await dpytest.message(f"{harness.bot_mention} in the thread", channel=thread, member=alice)
    [reply] = sent_messages()
    assert reply.channel.id == thread_id
    assert harness.stored(f"{general.id}:{thread_id}")[0][2] == "in the thread"
    assert harness.stored(str(general.id)) == []


async def test_the_client_runs_the_configured_shards(dc_runtime: Runtime) -> None:
    config = dc_runtime.config.discord
    commands = dc_runtime.extensions.command_list()
    plain = DiscordChannel(config, commands).client
    config.shard_count = 4
    config.shard_ids = [1, 3]
    sharded = DiscordChannel(config, commands).client
    config.shard_ids = []
    every = DiscordChannel(config, commands).client
    assert not isinstance(plain, discord.AutoShardedClient)
    assert isinstance(sharded, discord.AutoShardedClient)
    assert (sharded.shard_count, sharded.shard_ids) == (4, [1, 3])
    assert isinstance(every, discord.AutoShardedClient)
    assert (every.shard_count, every.shard_ids) == (4, None)  # discord.py: all four here


def test_a_shard_outside_the_count_is_refused_by_name(dc_runtime: Runtime) -> None:
    config = dc_runtime.config.discord
    config.shard_count = 2
    with pytest.raises(ValueError, match=r"shard_ids[\s\S]*\[2\] not in 0\.\.1"):
        config.shard_ids = [0, 2]


async def test_a_streamed_reply_is_one_message_edited_to_the_final_text(
    harness: Harness, fake_llm: FakeOpenAIServer
) -> None:
    harness.channel.streaming = True
    words = " ".join(f"word{i}" for i in range(20))
    fake_llm.add(FakeReply(content=words, tokens_per_s=40))
    alice = harness.config.members[0]
    dm = await alice.create_dm()
    await dpytest.message("count", channel=dm, member=alice)
    [first] = sent_messages()  # one message, then edits
    assert words.startswith(first.content) and first.content != words
    [latest] = [message async for message in dm.history(limit=1)]
    assert latest.id == first.id and latest.content == words
    assert harness.stored(str(dm.id))[-1][2] == words
