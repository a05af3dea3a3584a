"""ReflectorExtension: the scheduler as a background service, and a pass before compaction."""

from __future__ import annotations

import logging

from core.api import Chat, Check, Extension, Service, TurnContext
from core.config import Config
from reflector.reflection import Reflector
from reflector.scheduler import ReflectorService

logger = logging.getLogger(__name__)

RUNS = "reflector runs"


class ReflectorExtension(Extension):
    """Plugs the reflector into `mnemo run` (`[reflector] enabled` turns it off there)."""

    name = "reflector"

    def __init__(self, config: Config, reflector: Reflector) -> None:
        self.config = config
        self.reflector = reflector

    def services(self) -> list[Service]:
        if not self.config.reflector.enabled:
            return []
        return [ReflectorService(self.reflector, self.config.reflector.interval_mins)]

    async def before_compaction(self, turn: TurnContext, up_to: int) -> bool:
        """Save this chat's facts from its messages up to `up_to` before they are
        summarised away; True once the reflector has read them all (or runs elsewhere)."""
        if not self.config.reflector.enabled:
            return True
        chat_id = turn.chat.id
        runs = await self.reflector.reflect_pending(chat_id, up_to=up_to)
        for run in runs:
            logger.info("reflector before compaction: %s", run.summary())
        return self.reflector.cursor.position(chat_id) >= up_to

    async def checks(self) -> list[Check]:
        """The schedule and the last run as it ended: a failed or skipped last run is a
        warning with its reason, never "ok"."""
        if not self.config.reflector.enabled:
            return [Check("reflector", True, "disabled in this process ([reflector] enabled)")]
        recent = self.reflector.runs.recent(limit=1)
        detail = f"every {self.config.reflector.interval_mins:g} min, model {self.reflector.model}"
        if not recent:
            return [Check("reflector", True, f"{detail}; no run yet", fatal=False)]
        row = recent[0]
        last = f"last run #{row.id} {row.finished_at} (chat {row.chat_id}) {row.outcome}"
        return [Check("reflector", row.ok, f"{detail}; {last}", fatal=False)]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return {RUNS: self.reflector.runs.count(chat.id)}

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        """The chat's cursor, lease and run log; a pass still working on it loses its lease
        and stores nothing."""
        self.reflector.cursor.forget_chat(chat.id)
        self.reflector.leases.forget_chat(chat.id)
        return {RUNS: self.reflector.runs.forget_chat(chat.id)}
