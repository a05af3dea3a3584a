"""`mnemo backup` copies a database that another connection keeps writing to, and
`mnemo restore` puts a copy back (refused while another process has the database open)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.cli.data import PG_BACKUP
from core.storage.database import SqliteDatabase
from core.storage.db import connect, open_copy
from core.storage.session_store import DatabaseSessionStore
from core.storage.store import NewMessage
from tests.conftest import run_mnemo, write_config


def pairs(path: Path) -> tuple[int, int, list[str]]:
    """(messages, highest id, integrity verdict) of a database file."""
    conn = open_copy(path)
    conn.execute("PRAGMA busy_timeout = 10000")  # the live database is being written to
    try:
        count, highest = conn.execute(
            "SELECT count(*), coalesce(max(id), 0) FROM messages"
        ).fetchone()
        verdict = [row[0] for row in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()
    return int(count), int(highest), verdict


def test_backup_while_another_connection_writes_is_consistent_and_restorable(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    data = tmp_path / "data"
    database = data / "mnemo.db"
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, data)
    setup = connect(database)
    chat = DatabaseSessionStore(SqliteDatabase(setup)).get_or_create_chat("terminal", "busy")
    setup.close()
    stop = threading.Event()

    def write() -> None:  # a question and its answer, always committed together
        writer = connect(database)
        store, n = DatabaseSessionStore(SqliteDatabase(writer)), 0
        while not stop.is_set():
            store.append(chat.id, [NewMessage("user", f"q{n} " * 50), NewMessage("assistant", "a")])
            n += 1
            time.sleep(0.001)
        writer.close()

    thread = threading.Thread(target=write)
    thread.start()
    try:
        while pairs(database)[0] < 200:
            time.sleep(0.05)
        copies = [tmp_path / f"copy{i}.db" for i in range(3)]
        said = []
        for copy in copies:
            result = run_mnemo(["backup", str(copy)], config)
            assert result.returncode == 0, result.stderr
            assert f"wrote {copy}" in result.stdout and "integrity ok" in result.stdout
            said.append(result.stdout)
    finally:
        stop.set()
        thread.join()
    counts = []
    for copy, output in zip(copies, said, strict=True):
        count, highest, verdict = pairs(copy)
        assert verdict == ["ok"] and count % 2 == 0 and count == highest  # no torn commit
        assert f"messages {count:,}" in output
        assert not copy.with_name(copy.name + "-wal").exists()  # one self-contained file
        counts.append(count)
    assert counts == sorted(counts) and counts[0] < pairs(database)[0]

    held = connect(database)  # e.g. a bot still running
    refused = run_mnemo(["restore", str(copies[0]), "--yes"], config)
    assert refused.returncode != 0 and "in use by another process" in refused.stderr
    assert pairs(database)[0] > counts[0]
    held.close()
    restored = run_mnemo(["restore", str(copies[0]), "--yes"], config)
    assert restored.returncode == 0, restored.stderr
    assert f"messages {counts[0]:,}" in restored.stdout
    [safety] = data.glob("mnemo.db.before-restore-*")
    assert pairs(safety)[0] > counts[0]  # what the restore replaced is kept
    conn = connect(database)  # a restart opens the restored database as usual
    store = DatabaseSessionStore(SqliteDatabase(conn))
    assert store.count_messages(chat.id) == counts[0]
    assert store.messages_between(chat.id, 0, 1)[0].content.startswith("q0 ")
    conn.close()


def test_backup_refuses_to_overwrite_and_names_a_file_in_a_directory(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    data = tmp_path / "data"
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, data)
    missing = run_mnemo(["backup", str(tmp_path / "x.db")], config)
    assert missing.returncode != 0 and "no database at" in missing.stderr
    connect(data / "mnemo.db").close()
    target = tmp_path / "taken.db"
    target.write_text("something else", encoding="utf-8")
    taken = run_mnemo(["backup", str(target)], config)
    assert taken.returncode != 0 and "exists" in taken.stderr
    assert target.read_text(encoding="utf-8") == "something else"
    folder = tmp_path / "backups"
    folder.mkdir()
    assert run_mnemo(["backup", str(folder)], config).returncode == 0
    [made] = folder.glob("mnemo-*.db")
    assert pairs(made)[2] == ["ok"]
    not_mnemo = run_mnemo(["restore", str(target), "--yes"], config)
    assert not_mnemo.returncode != 0 and "Error:" in not_mnemo.stderr


def test_on_postgresql_backup_and_restore_point_to_pg_dump(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    """Nothing is opened or written: the URL need not even answer."""
    url = 'url = "postgresql://mnemo@127.0.0.1:1/mnemo"'
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data", url)
    for args in (["backup", str(tmp_path / "x.db")], ["restore", str(tmp_path / "x.db"), "--yes"]):
        result = run_mnemo(args, config)
        assert result.returncode != 0
        assert result.stderr.strip().splitlines() == [f"Error: {PG_BACKUP}"]
    assert list(tmp_path.iterdir()) == [tmp_path / "config.toml"]


def test_restore_refuses_junk_and_the_live_database_in_one_line(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    data = tmp_path / "data"
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, data)
    connect(data / "mnemo.db").close()
    junk = tmp_path / "junk.db"
    junk.write_bytes(bytes(range(256)) * 64)
    refused = run_mnemo(["restore", str(junk), "--yes"], config, timeout=60)
    assert refused.returncode != 0 and "Traceback" not in refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"Error: {junk} is not a readable SQLite database (file is not a database)"
    ]
    before = (data / "mnemo.db").read_bytes()
    for path in (data / "mnemo.db", Path("data/mnemo.db")):  # as given, and from the cwd
        itself = run_mnemo(["restore", str(path), "--yes"], config, timeout=30)
        assert itself.returncode != 0 and "Traceback" not in itself.stderr
        assert itself.stderr.strip().splitlines() == [
            "Error: the backup to restore is the database itself; name a backup file"
        ]
    assert (data / "mnemo.db").read_bytes() == before
    assert not list(data.glob("mnemo.db.before-restore-*"))
