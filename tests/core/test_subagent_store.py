"""`subagent_runs` on both engines (`storage`, tests/conftest.py): a run recorded as it
starts, finished with its transcript, listed newest first, counted and forgotten per chat."""

from __future__ import annotations

from core.storage.engine import Storage
from core.storage.store import NewMessage
from core.storage.stores import session_store
from core.subagents.run_store import DatabaseSubagentRunStore, RunEnd, RunStart


def test_a_run_is_recorded_finished_listed_and_forgotten(storage: Storage) -> None:
    sessions = session_store(storage)
    runs = DatabaseSubagentRunStore(storage.database)
    chat = sessions.get_or_create_chat("telegram", "7")
    other = sessions.get_or_create_chat("telegram", "8")
    [message_id] = sessions.append(chat.id, [NewMessage("user", "compare teas")])
    policy = {"history": "none", "memory": "none"}
    first = runs.start(
        RunStart(chat.id, message_id, "call_1", "Compare.", "green, black", policy, ["lookup"])
    )
    started = runs.get(first)
    assert started is not None
    assert (started.status, started.finished_at, started.transcript) == ("running", None, [])
    transcript = [{"role": "system", "content": "You are a sub-agent …"}]
    runs.finish(first, RunEnd("partial", "wall time", "[sub-agent run #1 …]", transcript, 2, 90))
    second = runs.start(RunStart(chat.id, None, "call_2", "Again.", "", policy, []))
    runs.start(RunStart(other.id, None, "call_3", "Elsewhere.", "", policy, []))
    done = runs.get(first)
    assert done is not None and done.finished_at is not None
    assert (done.status, done.stop_reason, done.iterations, done.output_tokens) == (
        "partial", "wall time", 2, 90,
    )  # fmt: skip
    assert done.transcript == transcript and done.tools == ["lookup"]
    assert done.inherited == policy and done.parent_message_id == message_id
    assert done.provenance == f"sub-agent run #{first} for tool call call_1"
    assert [run.id for run in runs.recent(chat.id)] == [second, first]
    assert [run.id for run in runs.all(chat.id)] == [first, second]
    assert runs.count(chat.id) == 2 and runs.count(other.id) == 1
    assert runs.forget_chat(chat.id) == 2
    assert runs.count(chat.id) == 0 and runs.count(other.id) == 1
