"""Discord slash commands and intents, with the wire payloads: the real discord.py client
logs in and connects to the fake Discord API (REST and gateway) on 127.0.0.1."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import discord
import pytest
import yarl
from discord.gateway import DiscordWebSocket

from bots.discord_bot import DiscordChannel
from bots.runtime import Runtime, build_runtime
from core.api import Inbound
from core.bench.fakes.fake_discord_api import INTENT_MESSAGE_CONTENT, Call, FakeDiscordAPI
from core.bench.fakes.fake_discord_payloads import APP_ID, AUTOCOMPLETE, COMMAND, string_option
from core.bench.fakes.fake_openai import FakeOpenAIServer
from tests.conftest import make_config

TOKEN = "fake-bot-token"
EPHEMERAL = 64


@dataclass
class Wire:
    api: FakeDiscordAPI
    runtime: Runtime
    channel: DiscordChannel

    @property
    def world(self) -> Any:
        return self.api.world

    async def callback(self, payload: dict[str, Any]) -> Call:
        """Dispatch INTERACTION_CREATE; the bot's answer to it (its callback's body)."""
        self.api.dispatch("INTERACTION_CREATE", payload)
        path = f"/interactions/{payload['id']}/{payload['token']}/callback"
        [call] = await asyncio.to_thread(self.api.wait_for, "POST", path)
        return call

    def remember(self, chat_id: str, fact: str, channel: str = "discord") -> Any:
        inbound = Inbound(channel, chat_id, f"remember: {fact}", "1", "Alice")
        return self.runtime.dispatcher(inbound)


@pytest.fixture
async def wire(
    tmp_path: Path, fake_llm: FakeOpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Wire]:
    with FakeDiscordAPI(tokens={TOKEN}, content_intent=False) as api:
        # discord.py has no base-URL setting: point its two endpoints at the fake.
        monkeypatch.setattr(discord.http.Route, "BASE", api.base_url)
        monkeypatch.setattr(DiscordWebSocket, "DEFAULT_GATEWAY", yarl.URL(api.gateway_url))
        section = {"token": TOKEN, "streaming": False, "command_guild_id": api.world.guild_id}
        config = make_config(tmp_path / "data", fake_llm.base_url, discord=section)
        runtime = build_runtime(config)
        await runtime.start()
        commands = runtime.extensions.command_list()
        channel = DiscordChannel(config.discord, commands, runtime.store.find_chat)
        runtime.dispatcher.attach(channel)
        running = asyncio.create_task(channel.run(runtime.dispatcher))
        for _ in range(500):
            if channel.client.get_guild(api.world.guild_id) is not None or running.done():
                break
            await asyncio.sleep(0.02)
        assert channel.client.get_guild(api.world.guild_id) is not None, running
        yield Wire(api, runtime, channel)
        await runtime.dispatcher.stop()  # as `mnemo run` does: turns finish their sends first
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        runtime.close()


async def test_commands_are_synced_to_the_guild_with_descriptions_and_options(
    wire: Wire,
) -> None:
    path = f"/applications/{APP_ID}/guilds/{wire.world.guild_id}/commands"
    [sync] = wire.api.calls_to("PUT", path)
    synced = {command["name"]: command for command in sync.body}
    core = {command.name for command in wire.runtime.extensions.command_list()}
    assert set(synced) == core  # the one table: every chat command, nothing else
    assert all(command["description"] for command in synced.values())
    [option] = synced["forget"]["options"]
    assert option["name"] == "id" and option["description"]
    assert option["type"] == 3 and option["required"] and option["autocomplete"]
    assert not synced["memory"].get("options")
    [code] = synced["forgetme"]["options"]
    assert not code.get("required")
    assert wire.api.calls_to("PUT", f"/applications/{APP_ID}/commands") == []  # not global


async def test_forget_autocomplete_offers_this_chats_memories_only(wire: Wire) -> None:
    here = str(wire.world.channel_id)
    await wire.remember(here, "the cat is called Miso")
    await wire.remember(here, "the dog is called Rex")
    await wire.remember("42", "the other chat's secret", channel="telegram")
    payload = wire.world.interaction(AUTOCOMPLETE, "forget", [string_option("id", "", True)])
    call = await wire.callback(payload)
    assert call.body["type"] == 8  # APPLICATION_COMMAND_AUTOCOMPLETE_RESULT
    names = [choice["name"] for choice in call.body["data"]["choices"]]
    assert len(names) == 2 and any("Miso" in name for name in names)
    assert not any("secret" in name for name in names)
    typed = wire.world.interaction(AUTOCOMPLETE, "forget", [string_option("id", "mis", True)])
    [choice] = (await wire.callback(typed)).body["data"]["choices"]
    assert "Miso" in choice["name"] and choice["value"].isdigit()


async def test_memory_is_ephemeral_and_forget_by_id_answers_in_the_channel(wire: Wire) -> None:
    here = str(wire.world.channel_id)
    await wire.remember(here, "the cat is called Miso")
    memory = wire.world.interaction(COMMAND, "memory", [])
    call = await wire.callback(memory)
    assert call.body["type"] == 4  # CHANNEL_MESSAGE_WITH_SOURCE
    assert call.body["data"]["flags"] & EPHEMERAL
    assert "Miso" in call.body["data"]["content"]
    assert wire.channel.tree.get_command("forget") is not None
    [(memory_id, _)] = _suggestions(wire, here)
    forget = wire.world.interaction(COMMAND, "forget", [string_option("id", memory_id)])
    answer = await wire.callback(forget)
    assert answer.body["data"]["content"].startswith(f"Forgotten: #{memory_id}")
    assert not (answer.body["data"].get("flags") or 0) & EPHEMERAL
    assert _suggestions(wire, here) == []


def _suggestions(wire: Wire, chat_id: str) -> list[tuple[str, str]]:
    chat = wire.runtime.store.find_chat("discord", chat_id)
    command = wire.runtime.extensions.command("forget")
    assert chat is not None and command is not None and command.option is not None
    assert command.option.suggest is not None
    return command.option.suggest(chat, "")


async def test_a_refused_user_gets_an_ephemeral_refusal_and_no_suggestions(wire: Wire) -> None:
    wire.channel.config.allowed_user_ids = [int(wire.world.users["bob"]["id"])]
    await wire.remember(str(wire.world.channel_id), "the cat is called Miso")
    run = await wire.callback(wire.world.interaction(COMMAND, "memory", [], user="alice"))
    assert "allowed_user_ids" in run.body["data"]["content"]
    assert run.body["data"]["flags"] & EPHEMERAL
    typed = wire.world.interaction(AUTOCOMPLETE, "forget", [string_option("id", "", True)])
    assert (await wire.callback(typed)).body["data"]["choices"] == []


async def test_mentions_and_dms_are_answered_without_the_message_content_intent(
    wire: Wire,
) -> None:
    assert wire.api.identified_intents is not None
    assert not wire.api.identified_intents & INTENT_MESSAGE_CONTENT
    world = wire.world
    wire.api.send_message(world.user_message("alice", "chatter the bot cannot read"))
    mention = world.user_message("bob", f"<@{APP_ID}> what is the cat called?", mentions_bot=True)
    wire.api.send_message(mention)
    posts = f"/channels/{world.channel_id}/messages"
    [reply] = await asyncio.to_thread(wire.api.wait_for, "POST", posts)
    assert reply.body["content"] == "echo: [Bob]: what is the cat called?"
    stored = wire.runtime.store.find_chat("discord", str(world.channel_id))
    assert stored is not None
    contents = [m.content for m in wire.runtime.store.history(stored.id)]
    assert contents == ["what is the cat called?", reply.body["content"]]  # no blank chatter
    wire.api.send_message(world.user_message("alice", "hello in private", dm=True))
    dm_posts = f"/channels/{world.dm_channel_id}/messages"
    [dm_reply] = await asyncio.to_thread(wire.api.wait_for, "POST", dm_posts)
    assert dm_reply.body["content"] == "echo: hello in private"


async def test_a_slow_answer_is_deferred_then_followed_up_privately(wire: Wire) -> None:
    await wire.remember(str(wire.world.channel_id), "the cat is called Miso")
    wire.channel.defer_after_s = 0.0  # the core counts as slow at once
    payload = wire.world.interaction(COMMAND, "memory", [])
    deferral = await wire.callback(payload)
    assert deferral.body["type"] == 5  # DEFERRED_CHANNEL_MESSAGE_WITH_SOURCE ("thinking…")
    assert deferral.body["data"]["flags"] & EPHEMERAL
    follow = f"/webhooks/{APP_ID}/{payload['token']}"
    [follow_up] = await asyncio.to_thread(wire.api.wait_for, "POST", follow)
    assert "Miso" in follow_up.body["content"] and follow_up.body["flags"] & EPHEMERAL
