"""Writing AGENTS.md notes: who may, the gate the text passes, and the log of who did.

Notes reach every later request of their scope, so a write is held to more than a fact:
- the global and channel notes are written from a control chat only;
- in a group, only an admin (as the platform says, `Inbound.sender_is_admin`), anyone in
  a control chat or the bot's owner (a sender whose private chat is a control chat) may
  change the chat's notes; others get a refusal the model can relay;
- the text passes the gate's content test (`memory.quality.refused_content`: no
  instruction to the assistant, no secret, hidden characters seen through) and is stored
  without hidden characters;
- a write to scope `today` is appended to the chat's daily note under the same rules;
- every change, and every refused attempt, is logged (`NoteChange`) with the sender, the
  message that asked and the time; the dashboard shows the log on the chat's notes page.
"""

from __future__ import annotations

from dataclasses import dataclass

from core.api import TurnContext
from core.errors import ToolError
from memory.daily_notes import DailyNotes, today
from memory.files import FileMemory
from memory.hidden_text import visible_text
from memory.keeper import Access, MemoryKeeper, refusal_text
from memory.quality import refused_content
from memory.store import NoteChange

EXCERPT_CHARS = 200
TODAY = "today"  # the scope of the daily note (`memory.daily_notes`)
GROUP_REFUSAL = (
    "in a group only an admin or the bot's owner may change the notes (AGENTS.md);"
    " nothing was saved. Ask an admin, or ask me to remember a fact about you instead"
)


@dataclass(frozen=True)
class NoteWrite:
    """What the `write_memory` tool was asked to do."""

    scope: str
    content: str
    append: bool

    @property
    def action(self) -> str:
        if self.append:
            return "append"
        return "replace" if self.content.strip() else "clear"


def note_change(
    access: Access,
    turn: TurnContext,
    scope: str,
    action: str,
    *,
    chars_after: int = 0,
    excerpt: str = "",
    reason: str = "",
) -> NoteChange:
    """A log row for a change (or attempt) made through the tool in `turn`."""
    return NoteChange(
        chat_id=access.chat.id,
        scope=scope,
        action=action,
        via="tool",
        sender_id=access.sender_id,
        sender_name=access.sender_name,
        message_id=turn.inbound.message_id,
        user_message_id=turn.user_message_id,
        chars_after=chars_after,
        excerpt=excerpt,
        reason=reason,
    )


def refusal(access: Access, write: NoteWrite) -> str | None:
    """Why this sender may not make this write, or None when they may."""
    if write.scope not in ("chat", TODAY) and not access.control:
        return f"only a control chat may write the {write.scope} AGENTS.md"
    if access.group and not access.admin:
        return GROUP_REFUSAL
    refused = refused_content(write.content)
    return f"not saved: {refusal_text(refused)}" if refused else None


def write_notes(keeper: MemoryKeeper, turn: TurnContext, write: NoteWrite) -> str:
    """Make `write` if the sender may and the text passes the gate (else a ToolError saying
    why, for the model to relay); log it either way."""
    access = keeper.access(turn)
    why = refusal(access, write)
    if why is not None:
        change = note_change(access, turn, write.scope, "refused", reason=why[:300])
        keeper.store.record_note_change(change)
        raise ToolError(why)
    content = visible_text(write.content)
    files, chat = keeper.files, access.chat
    if write.scope == TODAY:
        return _write_today(keeper, turn, access, content)
    if write.append:
        old = files.read(write.scope, chat.channel, chat.external_chat_id).rstrip("\n")
        content = f"{old}\n{content}" if old else content
    _save(files, access, write.scope, content)
    excerpt = visible_text(write.content).strip()[:EXCERPT_CHARS]
    change = note_change(
        access, turn, write.scope, write.action, chars_after=len(content), excerpt=excerpt
    )
    keeper.store.record_note_change(change)
    return f"saved the {write.scope} AGENTS.md ({len(content)} chars)"


def _write_today(keeper: MemoryKeeper, turn: TurnContext, access: Access, text: str) -> str:
    """Append `text` to today's daily note of the chat (a journal: never replaced)."""
    chat = access.chat
    if not text.strip():
        raise ToolError("`content` must say what to add to today's note")
    day = today()
    try:
        length = DailyNotes(keeper.files, chat.channel, chat.external_chat_id).append(day, text)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
    excerpt = text.strip()[:EXCERPT_CHARS]
    change = note_change(access, turn, TODAY, "append", chars_after=length, excerpt=excerpt)
    keeper.store.record_note_change(change)
    return f"added to today's note ({day.isoformat()}.md, {length} chars)"


def _save(files: FileMemory, access: Access, scope: str, content: str) -> None:
    try:
        files.write(scope, access.chat.channel, access.chat.external_chat_id, content)
    except ValueError as exc:
        raise ToolError(str(exc)) from exc
