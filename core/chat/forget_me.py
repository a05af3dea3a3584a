"""`/forgetme`: a chat deletes everything Mnemo keeps about it, after a confirmation.

`/forgetme` lists what would go and gives a four-digit code; `/forgetme CODE` within
CONFIRM_MINUTES deletes it all (`core.chat.data.forget_chat`). The code is derived from the
chat and the time, so there is no state to lose and every bot process serving the chat
accepts it; it guards against a slip or a pasted command, not against the chat itself.

In a group, the chat's data is every member's messages and the group's memories, so only a
group listed in `[agent] control_chats` may delete it this way; for any other, the reply
names the command an operator runs instead (`mnemo chat delete`).
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from core.api import Chat, Command, CommandOption, TurnContext
from core.chat.data import KEPT, chat_inventory, describe, forget_chat
from core.storage.store import SessionStore
from core.turn.extensions import Extensions

CONFIRM_MINUTES = 5
_SLOT_S = CONFIRM_MINUTES * 60


def confirmation_code(chat: Chat, now: float) -> str:
    """The code `/forgetme` gives `chat` at `now` (it changes every CONFIRM_MINUTES)."""
    slot = int(now // _SLOT_S)
    digest = hashlib.sha256(f"forgetme:{chat.id}:{chat.key}:{slot}".encode()).hexdigest()
    return f"{int(digest[:12], 16) % 10_000:04d}"


def code_is_current(chat: Chat, code: str, now: float) -> bool:
    """Whether `code` was given at most CONFIRM_MINUTES ago (this slot or the one before)."""
    return code in (confirmation_code(chat, now), confirmation_code(chat, now - _SLOT_S))


def group_refusal(chat: Chat) -> str:
    return (
        "In a group, /forgetme would delete every member's messages and the group's"
        " memories, so it works only in a group listed in [agent] control_chats. The bot's"
        f" operator can delete this chat's data with `mnemo chat delete {chat.key}`."
    )


class ForgetMe:
    """The `/forgetme` command of one bot."""

    def __init__(
        self, store: SessionStore, extensions: Extensions, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.extensions = extensions
        self.clock = clock

    def command(self) -> Command:
        return Command(
            "forgetme",
            "delete everything I keep about this chat (asks first)",
            self.handle,
            CommandOption("code", "the code I gave to confirm (leave out to get one)"),
        )

    async def handle(self, turn: TurnContext, args: str) -> str:
        chat = turn.chat
        in_group = chat.kind != "private" or turn.inbound.chat_kind != "private"
        if in_group and not turn.is_control_chat:
            return group_refusal(chat)
        code = args.strip()
        now = self.clock()
        if not code:
            return self.ask(chat, now)
        if not code_is_current(chat, code, now):
            return (
                "That is not the code I gave, or it has expired; nothing was deleted."
                " Send /forgetme for a new one."
            )
        gone = forget_chat(self.store, self.extensions, chat)
        return (
            f"Deleted everything I kept about this chat:\n{describe(gone)}\n"
            "I remember nothing of it now; a new message starts afresh."
        )

    def ask(self, chat: Chat, now: float) -> str:
        kept = chat_inventory(self.extensions, chat)
        return (
            "This deletes everything I keep about this chat, for good:\n"
            f"{describe(kept)}\n"
            "(messages of every session, memories and notes of this chat, learned"
            " strategies, compaction archives, stored tool results, the reflector's progress)\n"
            f"{KEPT}\n\n"
            f"To delete it, send /forgetme {confirmation_code(chat, now)} within"
            f" {CONFIRM_MINUTES} minutes. Otherwise nothing happens."
        )
