"""The objects of the fake Discord world, as the gateway and REST payloads spell them:
the bot, one guild with one text channel, two members, a DM channel, and builders for
messages and interactions (application commands and autocomplete)."""

from __future__ import annotations

import itertools
from typing import Any

APP_ID = 1130000000000000001  # the application's id is its bot user's id
TIMESTAMP = "2026-01-01T00:00:00+00:00"
COMMAND, AUTOCOMPLETE = 2, 4
STRING = 3


def bot_user() -> dict[str, Any]:
    return {"id": str(APP_ID), "username": "mnemo-bot", "discriminator": "0",
            "global_name": None, "avatar": None, "bot": True}  # fmt: skip


def app_info() -> dict[str, Any]:
    """`GET /oauth2/applications/@me`: what discord.py reads at login."""
    owner = {"id": "1150000000000000009", "username": "owner", "discriminator": "0",
             "avatar": None}  # fmt: skip
    return {"id": str(APP_ID), "name": "Mnemo", "description": "", "icon": None,
            "bot_public": False, "bot_require_code_grant": False, "owner": owner,
            "verify_key": "00", "flags": 0, "summary": ""}  # fmt: skip


class DiscordWorld:
    """Ids and payloads of the guild, its channel, its members and a DM."""

    def __init__(self) -> None:
        self.guild_id = 1140000000000000001
        self.channel_id = 1140000000000000002
        self.dm_channel_id = 1160000000000000001
        self.users = {
            "alice": {"id": "1150000000000000001", "username": "alice", "discriminator": "0",
                      "global_name": "Alice", "avatar": None},
            "bob": {"id": "1150000000000000002", "username": "bob", "discriminator": "0",
                    "global_name": "Bob", "avatar": None},
        }  # fmt: skip
        self._ids = itertools.count(1180000000000000001)

    def next_id(self) -> str:
        return str(next(self._ids))

    def ready(self) -> dict[str, Any]:
        return {"v": 10, "user": bot_user(), "guilds": [{"id": str(self.guild_id),
                "unavailable": True}], "session_id": "fake-session", "resume_gateway_url":
                "ws://127.0.0.1:1", "application": {"id": str(APP_ID), "flags": 0},
                "private_channels": [], "relationships": []}  # fmt: skip

    def text_channel(self) -> dict[str, Any]:
        return {"id": str(self.channel_id), "type": 0, "guild_id": str(self.guild_id),
                "name": "general", "position": 0, "permission_overwrites": [], "nsfw": False,
                "parent_id": None, "topic": None, "last_message_id": None,
                "rate_limit_per_user": 0}  # fmt: skip

    def member(self, name: str, permissions: str = "0") -> dict[str, Any]:
        return {"user": self.users[name], "roles": [], "joined_at": TIMESTAMP, "deaf": False,
                "mute": False, "flags": 0, "nick": None, "permissions": permissions}  # fmt: skip

    def guild(self) -> dict[str, Any]:
        everyone = {"id": str(self.guild_id), "name": "@everyone", "permissions": "68608",
                    "position": 0, "color": 0, "hoist": False, "managed": False,
                    "mentionable": False, "flags": 0}  # fmt: skip
        return {"id": str(self.guild_id), "name": "Test guild", "icon": None,
                "owner_id": self.users["alice"]["id"], "roles": [everyone], "emojis": [],
                "stickers": [], "features": [], "member_count": 3, "large": False,
                "unavailable": False, "channels": [self.text_channel()], "threads": [],
                "members": [], "voice_states": [], "presences": [], "stage_instances": [],
                "guild_scheduled_events": [], "verification_level": 0,
                "default_message_notifications": 0, "explicit_content_filter": 0,
                "mfa_level": 0, "premium_tier": 0, "preferred_locale": "en-US",
                "nsfw_level": 0, "system_channel_flags": 0, "joined_at": TIMESTAMP}  # fmt: skip

    def message(
        self, message_id: str, channel_id: str, content: str, author: dict[str, Any]
    ) -> dict[str, Any]:
        return {"id": message_id, "channel_id": channel_id, "author": author,
                "content": content, "timestamp": TIMESTAMP, "edited_timestamp": None,
                "tts": False, "mention_everyone": False, "mentions": [], "mention_roles": [],
                "attachments": [], "embeds": [], "pinned": False, "type": 0}  # fmt: skip

    def user_message(
        self, author: str, content: str, *, dm: bool = False, mentions_bot: bool = False
    ) -> dict[str, Any]:
        """MESSAGE_CREATE from `author` in the guild's channel (or the DM)."""
        channel = self.dm_channel_id if dm else self.channel_id
        data = self.message(self.next_id(), str(channel), content, self.users[author])
        if mentions_bot:
            data["mentions"] = [bot_user()]
        if not dm:
            data["guild_id"] = str(self.guild_id)
            data["member"] = {k: v for k, v in self.member(author).items() if k != "user"}
        return data

    def interaction(
        self,
        kind: int,
        command: str,
        options: list[dict[str, Any]],
        *,
        user: str = "alice",
        dm: bool = False,
    ) -> dict[str, Any]:
        """INTERACTION_CREATE: `/command` run (COMMAND) or being typed (AUTOCOMPLETE)."""
        interaction_id = self.next_id()
        data = {"id": interaction_id, "application_id": str(APP_ID), "type": kind,
                "token": f"token-{interaction_id}", "version": 1, "app_permissions": "0",
                "locale": "en-US", "entitlements": [], "authorizing_integration_owners": {},
                "attachment_size_limit": 10_485_760,
                "data": {"id": "1", "name": command, "type": 1, "options": options}}  # fmt: skip
        if dm:
            data["channel_id"] = str(self.dm_channel_id)
            data["channel"] = {"id": str(self.dm_channel_id), "type": 1,
                               "recipients": [self.users[user]]}  # fmt: skip
            data["user"] = self.users[user]
            data["context"] = 1
        else:
            data.update(guild_id=str(self.guild_id), channel_id=str(self.channel_id),
                        channel=self.text_channel(), member=self.member(user),
                        guild_locale="en-US", context=0)  # fmt: skip
        return data


def string_option(name: str, value: str, focused: bool = False) -> dict[str, Any]:
    option: dict[str, Any] = {"name": name, "type": STRING, "value": value}
    if focused:
        option["focused"] = True
    return option
