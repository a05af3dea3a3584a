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

    async def before_compaction(self, turn: TurnContext) -> None:
        """Save this chat's facts before its history is summarised away."""
        if not self.config.reflector.enabled:
            return
        try:
            runs = await self.reflector.reflect_pending(turn.chat.id)
        except Exception:  # compaction must go on whatever happens here
            logger.exception("reflector pass before compaction failed for chat %s", turn.chat.id)
            return
        for run in runs:
            logger.info("reflector before compaction: %s", run.summary())

    async def checks(self) -> list[Check]:
        if not self.config.reflector.enabled:
            return [Check("reflector", True, "disabled in this process ([reflector] enabled)")]
        recent = self.reflector.runs.recent(limit=1)
        last = "no run yet"
        if recent:
            row = recent[0]
            outcome = "ok" if row.ok else f"{row.status.upper()}: {row.error}"
            last = f"last run {row.finished_at} {outcome}"
        detail = f"every {self.config.reflector.interval_mins:g} min, model {self.reflector.model}"
        return [Check("reflector", True, f"{detail}; {last}", fatal=False)]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        return {RUNS: self.reflector.runs.count(chat.id)}

    def forget_chat(self, chat: Chat) -> dict[str, int]:
        """The chat's cursor, lease and run log; a pass still working on it loses its lease
        and stores nothing."""
        self.reflector.cursor.forget_chat(chat.id)
        self.reflector.leases.forget_chat(chat.id)
        return {RUNS: self.reflector.runs.forget_chat(chat.id)}
