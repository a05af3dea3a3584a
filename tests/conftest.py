"""Shared fixtures: a fake OpenAI server on loopback, a config on tmp_path, a runtime, and a
real PostgreSQL server on 127.0.0.1 (started once per session, only if a test asks)."""

from __future__ import annotations

import atexit
import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bots.runtime import Runtime, build_runtime
from core.config import Config, StorageConfig, load_config
from core.db import Connection, connect
from core.storage import Storage, open_storage
from core.testing.fake_openai import FakeOpenAIServer
from core.testing.postgres import PostgresServer
from memory.embeddings import Embedder, load_embedder

REPO = Path(__file__).resolve().parent.parent

# The exported ONNX model is cached per test session, not in the user's ~/.cache;
# subprocesses started by `run_mnemo` inherit it.
_CACHE = tempfile.mkdtemp(prefix="mnemo-test-cache-")
os.environ["MNEMO_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)
MNEMO = [sys.executable, "-m", "bots.cli"]
_DATABASE_NUMBERS = itertools.count(1)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The bundled all-MiniLM-L6-v2, loaded once for the whole session."""
    loaded = load_embedder()
    assert loaded is not None, "the bundled all-MiniLM-L6-v2 must load"
    return loaded


@pytest.fixture
def conn(tmp_path: Path) -> Iterator[Connection]:
    """A fresh, migrated database."""
    connection = connect(tmp_path / "mnemo.db")
    yield connection
    connection.close()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL 18 + pgvector server for the whole session, started on first use."""
    with PostgresServer() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """A database on the session's server (shared by the session: clean up what you create)."""
    return postgres_server.create_database("mnemo_test")


@pytest.fixture
def fresh_postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """An empty database of the test's own on the session's server, dropped afterwards."""
    name = f"test_{next(_DATABASE_NUMBERS)}"
    yield postgres_server.create_database(name)
    postgres_server.drop_database(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """`[storage] url` for each engine: a test using it runs once on SQLite, once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'mnemo.db'}"
    return str(request.getfixturevalue("fresh_postgres_url"))


@pytest.fixture
def storage(storage_url: str) -> Iterator[Storage]:
    """A migrated database of each engine (the store contract tests run on both)."""
    opened = open_storage(StorageConfig(url=storage_url))
    yield opened
    opened.close()


@pytest.fixture
def fake_llm() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as server:
        yield server


def make_config(data_dir: Path, base_url: str, **sections: dict[str, object]) -> Config:
    """A Config for tests: data under `data_dir`, the model at `base_url`, no retries."""
    config = load_config(None, env={})
    config.storage.data_dir = data_dir
    config.llm.base_url = base_url
    config.llm.max_retries = 0
    config.llm.timeout_s = 5
    for section, values in sections.items():
        for key, value in values.items():
            setattr(getattr(config, section), key, value)
    return config


@pytest.fixture
def config(tmp_path: Path, fake_llm: FakeOpenAIServer) -> Config:
    return make_config(tmp_path / "data", fake_llm.base_url)


@pytest.fixture
async def runtime(config: Config) -> AsyncIterator[Runtime]:
    """Every plugin, started (the embedding model loaded), on a fresh database."""
    rt = build_runtime(config)
    await rt.start()
    yield rt
    rt.close()


def write_config(path: Path, base_url: str, data_dir: Path, extra: str = "") -> Path:
    path.write_text(
        f'[llm]\nbase_url = "{base_url}"\nmax_retries = 0\ntimeout_s = 5\n'
        f'[storage]\ndata_dir = "{data_dir}"\n{extra}',
        encoding="utf-8",
    )
    return path


def mnemo_env() -> dict[str, str]:
    """The environment for a `mnemo` subprocess: no secrets or config from the caller's shell."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "TELEGRAM_", "DISCORD_")) and k != "MNEMO_CONFIG"
    }
    inherited = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *inherited])  # this checkout first
    return env


def run_mnemo(
    args: list[str], config_path: Path, stdin: str = "", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run the real `mnemo` CLI in a subprocess (a new process on the same data dir)."""
    return subprocess.run(
        [*MNEMO, "--config", str(config_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=mnemo_env(),
        cwd=config_path.parent,
    )


def start_mnemo(args: list[str], config_path: Path, cwd: Path) -> subprocess.Popen[str]:
    """Start a long-running `mnemo` command (e.g. `run`); the caller stops it."""
    return subprocess.Popen(
        [*MNEMO, "--config", str(config_path), *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=mnemo_env(),
        cwd=cwd,
    )
