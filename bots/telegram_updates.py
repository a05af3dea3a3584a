"""Reading getUpdates so that one update that cannot be parsed is skipped, not fatal.

python-telegram-bot parses a getUpdates answer as one batch: a single malformed update
(say, a message without `date`) fails the whole batch, the offset never moves, and the
same batch comes straight back, with a CRITICAL log line each time and no backoff.
`SkippingUpdatesRequest` is the transport under `Bot.get_updates` only (the builder's
`get_updates_request`); it tries each update on its own and replaces one that does not
parse with its bare `update_id`. The Application then sees an empty update (no handler
runs), polling moves the offset past it, and it is logged once. An answer that is not a
list of updates at all raises `TelegramError`, which the polling loop retries with its
backoff (1 s growing to 30 s), so a broken server cannot flood the log either.
"""

from __future__ import annotations

import logging
from typing import Any

from telegram import Update
from telegram.error import TelegramError
from telegram.request import HTTPXRequest

logger = logging.getLogger(__name__)

SHOWN_CHARS = 300  # of an unreadable answer, in the error


class SkippingUpdatesRequest(HTTPXRequest):
    """The getUpdates transport: every update in an answer parses, or is reduced to its id.

    It hooks `parse_json_payload`, the step python-telegram-bot documents for customising
    how an answer is read (`post` itself is final).
    """

    @staticmethod
    def parse_json_payload(payload: bytes) -> dict[str, Any]:
        answer: dict[str, Any] = HTTPXRequest.parse_json_payload(payload)
        if not answer.get("ok") or "result" not in answer:
            return answer  # an error answer: python-telegram-bot raises from it as usual
        updates = answer["result"]
        if not isinstance(updates, list):
            raise TelegramError(f"getUpdates answered {str(updates)[:SHOWN_CHARS]!r}, not a list")
        return {**answer, "result": [readable_update(raw) for raw in updates]}


def readable_update(raw: object) -> dict[str, Any]:
    """`raw` when python-telegram-bot can parse it, else `{"update_id": …}` (logged once:
    the next getUpdates confirms it, so it never comes back)."""
    if not isinstance(raw, dict) or not isinstance(raw.get("update_id"), int):
        shown = str(raw)[:SHOWN_CHARS]
        raise TelegramError(f"getUpdates answered an update without an update_id: {shown!r}")
    try:
        Update.de_json(raw, None)
    except Exception as exc:  # whatever a malformed field makes the parser raise
        logger.warning(
            "skipped update %d: it cannot be parsed (%s: %s); the others go on",
            raw["update_id"],
            type(exc).__name__,
            exc,
        )
        return {"update_id": raw["update_id"]}
    return raw
