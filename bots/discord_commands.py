"""Discord's slash commands: the core's chat commands (`Extensions.command_list()`, the one
table every channel reads) as a discord.py `app_commands.CommandTree`, and the replies to
the interactions they bring.

Each `core.api.Command` becomes `/name` with its description, and its `option` (if any)
becomes one string option with its description, required or not, autocompleted by the
option's `suggest`. Running one sends `/name args` through the core like a typed command;
the reply answers the interaction (ephemeral for `private` commands), deferred (Discord's
"thinking…") when the core takes longer than Discord's 3-second window allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

import discord
from discord import app_commands

from bots.message_split import split_message
from core.api import Command

logger = logging.getLogger(__name__)

DISCORD_LIMIT = 2000
NAME = re.compile(r"^[-_a-z0-9]{1,32}$")  # what Discord accepts as a command's name
DESCRIPTION_CHARS = 100
CHOICE_CHARS = 100
MAX_CHOICES = 25
DEFER_AFTER_S = 2.0  # Discord drops an interaction not answered within 3 s
INTERACTION_PREFIX = "interaction:"

RunCommand = Callable[[discord.Interaction, Command, str], Awaitable[None]]
Suggest = Callable[[discord.Interaction, Command, str], list[tuple[str, str]]]


def _text(text: str, limit: int) -> str:
    text = " ".join(text.split()) or "…"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def slash_command(
    command: Command, run: RunCommand, suggest: Suggest
) -> app_commands.Command[Any, Any, Any]:
    """`/name` for `command`: its option as `text` (renamed to the option's name)."""
    option = command.option
    if option is None:

        async def bare(interaction: discord.Interaction) -> None:
            await run(interaction, command, "")

        return app_commands.Command(
            name=command.name,
            description=_text(command.description, DESCRIPTION_CHARS),
            callback=bare,
        )

    async def required(interaction: discord.Interaction, text: str) -> None:
        await run(interaction, command, text)

    async def optional(interaction: discord.Interaction, text: str = "") -> None:
        await run(interaction, command, text)

    callback: Any = required if option.required else optional
    callback = app_commands.rename(text=option.name)(callback)
    callback = app_commands.describe(text=_text(option.description, DESCRIPTION_CHARS))(callback)
    slash: app_commands.Command[Any, Any, Any] = app_commands.Command(
        name=command.name,
        description=_text(command.description, DESCRIPTION_CHARS),
        callback=callback,
    )
    if option.suggest is not None:

        async def complete(
            interaction: discord.Interaction, current: str
        ) -> list[app_commands.Choice[str]]:
            pairs = suggest(interaction, command, current)[:MAX_CHOICES]
            return [
                app_commands.Choice(name=_text(label, CHOICE_CHARS), value=value)
                for value, label in pairs
            ]

        slash.autocomplete("text")(complete)
    return slash


def build_tree(
    client: discord.Client, commands: list[Command], run: RunCommand, suggest: Suggest
) -> app_commands.CommandTree[Any]:
    """The tree of every command whose name Discord accepts (others stay `!name` only)."""
    tree: app_commands.CommandTree[Any] = app_commands.CommandTree(client)
    for command in commands:
        if not NAME.fullmatch(command.name):
            logger.warning("/%s is not a valid Discord command name; it is not a slash command",
                           command.name)  # fmt: skip
            continue
        tree.add_command(slash_command(command, run, suggest))
    return tree


async def sync_tree(tree: app_commands.CommandTree[Any], guild_id: int | None) -> None:
    """Register the commands with Discord: in one guild (at once) or globally. A failure
    (the bot was invited without the `applications.commands` scope) is logged; messages
    keep working."""
    guild = discord.Object(id=guild_id) if guild_id is not None else None
    if guild is not None:
        tree.copy_global_to(guild=guild)
    try:
        synced = await tree.sync(guild=guild)
    except discord.HTTPException as exc:
        logger.error("syncing the slash commands failed (%s); invite the bot with the"
                     " applications.commands scope", exc)  # fmt: skip
        return
    where = f"guild {guild_id}" if guild_id is not None else "every guild and DM (global)"
    logger.info("synced %d slash commands for %s", len(synced), where)


class InteractionReply:
    """Answering one interaction: at once when the core is quick, else deferred first."""

    def __init__(
        self, interaction: discord.Interaction, ephemeral: bool, defer_after_s: float
    ) -> None:
        self.interaction = interaction
        self.ephemeral = ephemeral
        self.defer_after_s = defer_after_s
        self._lock = asyncio.Lock()

    async def defer_after(self) -> None:
        """Show "thinking…" if no answer went out within `defer_after_s`."""
        await asyncio.sleep(self.defer_after_s)
        async with self._lock:
            if not self.interaction.response.is_done():
                await self.interaction.response.defer(ephemeral=self.ephemeral, thinking=True)

    async def send(self, text: str) -> None:
        """The reply in parts of at most 2,000 characters: the first answers the
        interaction (or its deferral), the rest follow."""
        async with self._lock:
            for part in split_message(text, DISCORD_LIMIT):
                if self.interaction.response.is_done():
                    await self.interaction.followup.send(part, ephemeral=self.ephemeral)
                else:
                    await self.interaction.response.send_message(part, ephemeral=self.ephemeral)

    async def answered_by(self, work: Awaitable[None]) -> None:
        """Run `work` (which sends the reply) with the deferral timer beside it."""
        deferral = asyncio.create_task(self.defer_after())
        try:
            await work
        finally:
            deferral.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await deferral
