"""`subagent_runs` on either engine, one SQL text over `core.storage.database`: a child's
run is recorded as it starts (status `running`) and finished with its transcript and
result. Every method runs inside the caller's transaction when one is open, else alone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from core.storage.database import Database

COLUMNS = (
    "id, chat_id, parent_message_id, tool_call_id, task, context, inherited, tools, status,"
    " stop_reason, result, transcript, iterations, output_tokens, started_at, finished_at"
)


@dataclass(frozen=True)
class RunStart:
    """What a run is given as it starts."""

    chat_id: int
    parent_message_id: int | None
    tool_call_id: str
    task: str
    context: str
    inherited: dict[str, str]
    tools: list[str]


@dataclass(frozen=True)
class RunEnd:
    """How a run ended: `status` (done, partial, cancelled, failed) and why."""

    status: str
    stop_reason: str
    result: str
    transcript: list[dict[str, Any]]
    iterations: int
    output_tokens: int


@dataclass(frozen=True)
class SubagentRun(RunEnd, RunStart):
    """One stored run: what it was given (`RunStart`), how it ended (`RunEnd`; status
    `running` and empty results until it has), its id and times."""

    id: int
    started_at: str
    finished_at: str | None

    @property
    def provenance(self) -> str:
        """How the run is named wherever it is shown."""
        return f"sub-agent run #{self.id} for tool call {self.tool_call_id or '?'}"

    def to_dict(self) -> dict[str, Any]:
        """Every field, the id first (as the table's columns)."""
        return {name: getattr(self, name) for name in COLUMNS.split(", ")}


class DatabaseSubagentRunStore:
    """Records, finishes, lists and forgets a chat's sub-agent runs."""

    def __init__(self, db: Database) -> None:
        self.db = db

    def start(self, run: RunStart) -> int:
        """Record a run as it starts; its id (the N of "sub-agent run #N")."""
        [row] = self.db.write_returning(
            "INSERT INTO subagent_runs (chat_id, parent_message_id, tool_call_id, task,"
            " context, inherited, tools) VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING id",
            [
                (
                    run.chat_id,
                    run.parent_message_id,
                    run.tool_call_id,
                    run.task,
                    run.context,
                    json.dumps(run.inherited, sort_keys=True),
                    json.dumps(run.tools),
                )
            ],
        )
        return int(row[0])

    def finish(self, run_id: int, end: RunEnd) -> None:
        self.db.write(
            "UPDATE subagent_runs SET status = ?, stop_reason = ?, result = ?, transcript = ?,"
            " iterations = ?, output_tokens = ?, finished_at = mnemo_now() WHERE id = ?",
            (
                end.status,
                end.stop_reason,
                end.result,
                json.dumps(end.transcript, ensure_ascii=False),
                end.iterations,
                end.output_tokens,
                run_id,
            ),
        )

    def get(self, run_id: int) -> SubagentRun | None:
        row = self.db.read_one(f"SELECT {COLUMNS} FROM subagent_runs WHERE id = ?", (run_id,))
        return _run(row) if row else None

    def recent(self, chat_id: int, limit: int = 5) -> list[SubagentRun]:
        """The chat's newest runs, newest first."""
        rows = self.db.read(
            f"SELECT {COLUMNS} FROM subagent_runs WHERE chat_id = ? ORDER BY id DESC LIMIT ?",
            (chat_id, limit),
        )
        return [_run(row) for row in rows]

    def all(self, chat_id: int) -> list[SubagentRun]:
        """Every run of the chat, oldest first (export)."""
        rows = self.db.read(
            f"SELECT {COLUMNS} FROM subagent_runs WHERE chat_id = ? ORDER BY id", (chat_id,)
        )
        return [_run(row) for row in rows]

    def count(self, chat_id: int) -> int:
        row = self.db.read_one("SELECT count(*) FROM subagent_runs WHERE chat_id = ?", (chat_id,))
        return int(row[0]) if row else 0

    def forget_chat(self, chat_id: int) -> int:
        return self.db.write("DELETE FROM subagent_runs WHERE chat_id = ?", (chat_id,))


def _run(row: Any) -> SubagentRun:
    """A row selected as `COLUMNS` (both engines)."""
    return SubagentRun(
        id=int(row[0]),
        chat_id=int(row[1]),
        parent_message_id=int(row[2]) if row[2] is not None else None,
        tool_call_id=str(row[3]),
        task=str(row[4]),
        context=str(row[5]),
        inherited=json.loads(row[6] or "{}"),
        tools=json.loads(row[7] or "[]"),
        status=str(row[8]),
        stop_reason=str(row[9]),
        result=str(row[10]),
        transcript=json.loads(row[11] or "[]"),
        iterations=int(row[12]),
        output_tokens=int(row[13]),
        started_at=str(row[14]),
        finished_at=str(row[15]) if row[15] is not None else None,
    )
