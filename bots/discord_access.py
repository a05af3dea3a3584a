"""Who and where the Discord channel serves, and how its chats are keyed: the allowed
guilds, channels and users, a guild channel's or thread's chat id, moderators, and the
`Inbound` of a slash command (the same rules as a message that addresses the bot)."""

from __future__ import annotations

import discord

from bots.discord_commands import INTERACTION_PREFIX
from core.api import ChatKind, Inbound
from core.config import DiscordConfig

CHANNEL = "discord"


def place_allowed(config: DiscordConfig, guild_id: int | None, channel: object) -> bool:
    """Whether the guild and channel (a thread counts as its parent) are served."""
    guilds, channels = config.allowed_guild_ids, config.allowed_channel_ids
    if guilds and guild_id not in guilds:
        return False
    if not channels:
        return True
    channel_id = getattr(channel, "id", None)
    parent_id = channel.parent_id if isinstance(channel, discord.Thread) else None
    return channel_id in channels or parent_id in channels


def guild_chat_key(channel: object) -> tuple[str, ChatKind]:
    """A guild channel's chat id; a thread is keyed by its parent and itself."""
    if isinstance(channel, discord.Thread):
        return f"{channel.parent_id}:{channel.id}", "thread"
    return str(getattr(channel, "id", "")), "group"


def is_moderator(author: discord.User | discord.Member) -> bool:
    """A guild member who may manage others' messages (so may forget others' memories);
    read from the member's cached permissions, no API call."""
    return isinstance(author, discord.Member) and author.guild_permissions.manage_messages


def interaction_inbound(
    config: DiscordConfig, interaction: discord.Interaction, text: str
) -> Inbound | None:
    """The `Inbound` of a slash command, or None when the user or place is not served."""
    user, channel = interaction.user, interaction.channel
    users = config.allowed_user_ids
    if users and user.id not in users:
        return None
    chat_id, title = str(interaction.channel_id), ""
    kind: ChatKind = "private"
    if interaction.guild_id is not None:
        if not place_allowed(config, interaction.guild_id, channel):
            return None
        chat_id, kind = guild_chat_key(channel)
        guild_name = interaction.guild.name if interaction.guild else ""
        title = f"{guild_name} #{getattr(channel, 'name', '')}".strip()
    return Inbound(CHANNEL, chat_id, text, str(user.id), user.display_name, kind, title,
                   True, f"{INTERACTION_PREFIX}{interaction.id}",
                   is_moderator(user))  # fmt: skip
