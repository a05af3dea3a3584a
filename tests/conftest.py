"""Shared fixtures: a fake OpenAI server on loopback, a config on tmp_path, a runtime, and a
real PostgreSQL server on 127.0.0.1 (started once per session, only if a test asks).

`make test` runs the suite on pytest-xdist workers (`-n 4`): each worker has its own
PostgreSQL server and embedder, and all share one model cache, exported once per run (or
copied from the user's cache when `mnemo memory prepare` already made the export there).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from bots.runtime import Runtime, build_runtime
from core.bench import chaos
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.postgres import PostgresServer
from core.bench.startup import bench_env
from core.config import Config, StorageConfig, load_config
from core.mcp.bench import http_server, listening
from core.storage.db import Connection, connect
from core.storage.engine import Storage, open_storage
from memory.embeddings import Embedder, load_embedder
from memory.model_files import cache_root
from memory.onnx_embedder import MANIFEST, QUERY_FAILED
from tests.collection_share import import_from_own_share
from tests.onnx_steps import steps_made_once
from tests.pg_databases import MigratedDatabases
from tests.transport_origins import install as note_transport_origins
from tests.warm_mnemo import COLD, WarmMnemo

REPO = Path(__file__).resolve().parent.parent

RUN_CACHE = "MNEMO_TEST_RUN_CACHE"
# The slowest tests (whole `mnemo` processes, fleets, exports), handed out first on xdist
# workers so the run does not end waiting on one of them.
SLOWEST_FIRST = (
    "tests/e2e/",
    "tests/bots/test_durability.py",
    "tests/memory/test_onnx.py",
    "tests/memory/test_extension.py",
    "tests/memory/test_forgetting.py",
    "tests/reflector/test_cli.py",
    "tests/core/test_backup.py",
    # Each test starts a warm process of its own (~30 s of imports on a loaded machine): last,
    # they made the run's tail.
    "tests/test_warm_mnemo.py",
)


def run_cache() -> str:
    """The model cache of this test run, not the user's ~/.cache: made by the first process
    that loads this file (the only one, or xdist's controller, which removes it at exit);
    xdist workers and the `mnemo` subprocesses inherit it through the environment."""
    inherited = os.environ.get(RUN_CACHE)
    if inherited:
        return inherited
    made = tempfile.mkdtemp(prefix="mnemo-test-cache-")
    os.environ[RUN_CACHE] = made
    atexit.register(shutil.rmtree, made, ignore_errors=True)
    seed_exports(cache_root() / "onnx", Path(made) / "onnx")
    return made


def seed_exports(source: Path, target: Path) -> None:
    """Copy the user's finished ONNX exports (`mnemo memory prepare`'s) into the run's cache,
    so the run need not export again: only whole ones (every file the manifest lists, at its
    size), the manifest last. What is missing or half-made is exported once, as without."""
    for folder in sorted(source.glob("*/")) if source.is_dir() else []:
        try:
            sizes = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))["sizes"]
            copy = target / folder.name
            copy.mkdir(parents=True)
            for name, size in sizes.items():
                shutil.copyfile(folder / name, copy / name)
                if (copy / name).stat().st_size != size:
                    raise ValueError(f"{folder / name} changed while copied")
            if (folder / QUERY_FAILED).is_file():
                shutil.copyfile(folder / QUERY_FAILED, copy / QUERY_FAILED)
            shutil.copyfile(folder / MANIFEST, copy / MANIFEST)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            shutil.rmtree(target / folder.name, ignore_errors=True)


os.environ["MNEMO_CACHE_DIR"] = run_cache()
note_transport_origins()  # an unclosed transport's warning names the test that made it
MNEMO = [sys.executable, "-m", "bots.cli"]
_WARM: dict[str, WarmMnemo] = {}  # this process's warm processes by kind, made on first use
_WARM_LOCK = threading.Lock()
MCP_START_S = 60.0  # the HTTP test server's start, on a busy machine


def pytest_collection(session: pytest.Session) -> None:
    """On xdist workers, before collecting: import the test modules from this worker's share
    on, so that in a fresh clone each module is compiled once, not once per worker."""
    import_from_own_share(session.config)


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own, which it mends
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On xdist workers (each collects the same order): `SLOWEST_FIRST` first, and each
    `xdist_group` named in the test's id, where `--dist loadgroup` looks for it."""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        return
    items.sort(key=lambda item: not item.nodeid.startswith(SLOWEST_FIRST))
    if config.getoption("loadgroup", False):
        for item in items:
            name_group(item)


def name_group(item: pytest.Item) -> None:
    """Append `@group` to the id of a test marked `xdist_group`, as pytest-xdist 3.8 does by
    setting `item._nodeid`: pytest 9 reads `item._id` instead, so without this the mark is
    ignored and the group's tests are spread over every worker."""
    names = {
        str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
        for mark in item.iter_markers("xdist_group")
    }
    suffix = "@" + "_".join(sorted(names))
    if not names or item.nodeid.endswith(suffix):
        return
    if hasattr(item, "_id"):
        from _pytest.nodeid import NodeId

        item._id = NodeId.parse(item.nodeid + suffix)
    else:
        item._nodeid = item.nodeid + suffix


@pytest.fixture(scope="session", autouse="PYTEST_XDIST_WORKER" in os.environ)
def embedder() -> Embedder:
    """The bundled all-MiniLM-L6-v2, loaded once per process. Its first load exports it to
    ONNX in the run's cache (unless `seed_exports` copied the export there); a lock makes the
    other workers wait for that one export. On
    xdist workers it is loaded before the first test, so no test, nor a `mnemo` process it
    starts, makes the export again beside it."""
    with open(Path(os.environ["MNEMO_CACHE_DIR"]) / "export.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with steps_made_once():  # an export made here is the run's one (`tests/onnx_steps.py`)
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


@pytest.fixture(scope="session")
def blank_databases(postgres_server: PostgresServer) -> Iterator[MigratedDatabases]:
    """Empty databases, each emptied again after a test and handed to the next
    (`tests/pg_databases.py`): a `createdb` and a `dropdb` cost ~0.5 CPU-s a test."""
    databases = MigratedDatabases(postgres_server, "template1", blank=True)
    yield databases
    databases.close()


@pytest.fixture
def fresh_postgres_url(
    postgres_server: PostgresServer, blank_databases: MigratedDatabases
) -> Iterator[str]:
    """An empty database of the test's own on the session's server (nobody else connected),
    given back afterwards: what a new database from `createdb` gives."""
    name = blank_databases.take()
    yield postgres_server.url(name)
    blank_databases.give_back(name)


@pytest.fixture(scope="session")
def postgres_template(postgres_server: PostgresServer) -> str:
    """A database migrated once per session, for `migrated_postgres_url` to copy: copying
    it takes a fraction of the time that running every migration again does."""
    name = "mnemo_template"
    open_storage(StorageConfig(url=postgres_server.create_database(name))).close()
    return name


@pytest.fixture(scope="session")
def migrated_databases(
    postgres_server: PostgresServer, postgres_template: str
) -> Iterator[MigratedDatabases]:
    """Copies of the template, each put back in the template's state after a test and
    handed to the next (`tests/pg_databases.py`): a new database costs ~10 times more."""
    databases = MigratedDatabases(postgres_server, postgres_template)
    yield databases
    databases.close()


@pytest.fixture
def migrated_postgres_url(
    postgres_server: PostgresServer, migrated_databases: MigratedDatabases
) -> Iterator[str]:
    """A migrated database of the test's own, in the state a fresh copy of the session's
    template has (nobody else connected), given back afterwards: what opening
    `fresh_postgres_url` gives, without migrating again."""
    name = migrated_databases.take()
    yield postgres_server.url(name)
    migrated_databases.give_back(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """`[storage] url` for each engine: a test using it runs once on SQLite, once on PostgreSQL
    (a migrated database: the migrations' own tests use `fresh_postgres_url`)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'data' / 'mnemo.db'}"
    return str(request.getfixturevalue("migrated_postgres_url"))


@pytest.fixture(params=["sqlite", "postgresql"])
def blank_storage_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """`storage_url` with nothing in it yet, on each engine: for the tests that migrate an
    old deployment's database part of the way themselves."""
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
    """Run the real `mnemo` CLI in a process of its own on the same data dir."""
    return run_cli(["--config", str(config_path), *args], mnemo_env(), config_path.parent,
                   stdin, timeout)  # fmt: skip


def run_cli(
    args: list[str], env: dict[str, str], cwd: Path, stdin: str = "", timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`python -m bots.cli ARGS` in a process of its own, with this environment, working
    directory and stdin: forked from this test process's warm `mnemo` (`tests/warm_mnemo.py`),
    or started cold when MNEMO_TEST_COLD is set; either way what `subprocess.run(…,
    capture_output=True, text=True)` returns."""
    command = [*MNEMO, *args]
    if os.environ.get(COLD):
        return subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=timeout, env=env,
            cwd=cwd,
        )  # fmt: skip
    return warm().run(command, args, env, cwd, stdin, timeout)


def warm(kind: str = "mnemo") -> WarmMnemo:
    """This process's warm `mnemo` (or, `kind` "mcp", warm test MCP server), made on first use."""
    with _WARM_LOCK:  # tests run commands from several threads at once
        if kind not in _WARM:
            _WARM[kind] = WarmMnemo(REPO, mnemo_env(), kind)
            atexit.register(_WARM[kind].stop)
    return _WARM[kind]


MCP_SERVER = "core.bench.fakes.mcp_server"
WARM_EXEC = str(REPO / "tests" / "warm_exec.py")


def mcp_server_command(*args: str) -> tuple[str, list[str]]:
    """The command and arguments of the test MCP server (`python -m MCP_SERVER ARGS`) for a
    config's stdio server: forked from the warm MCP process through `tests/warm_exec.py`, or
    started cold when MNEMO_TEST_COLD is set."""
    if os.environ.get(COLD):
        return sys.executable, ["-m", MCP_SERVER, *args]
    server = warm("mcp")
    server.start()
    return sys.executable, ["-I", "-S", WARM_EXEC, server.socket_path, MCP_SERVER, *args]


@contextlib.contextmanager
def mcp_http_server(
    port: int, *flags: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """`core.mcp.bench.http_server` (the test MCP server over streamable HTTP on `port` until
    the block ends) with the server forked from the warm MCP process, unless
    MNEMO_TEST_COLD is set."""
    if os.environ.get(COLD):
        with http_server(port, *flags, env=env) as cold:
            yield cold
        return
    args = ["http", str(port), *flags]
    command = [sys.executable, "-m", MCP_SERVER, *args]
    with open(os.devnull, "rb") as devnull:
        stdio = (devnull.fileno(), devnull.fileno(), devnull.fileno())
        environment = dict(os.environ if env is None else env)
        process = warm("mcp").start_process(
            command, args, environment, REPO, stdio, False, module=MCP_SERVER
        )
    try:
        deadline = time.monotonic() + MCP_START_S
        while not listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the HTTP test server did not start")
            time.sleep(0.05)
        yield process  # type: ignore[misc]
    finally:
        process.terminate()
        process.wait(10)


def start_mnemo(args: list[str], config_path: Path, cwd: Path) -> subprocess.Popen[str]:
    """Start a long-running `mnemo` command (e.g. `run`); the caller stops it. Its stdout and
    stderr are text pipes; it is forked from the warm `mnemo` (a `WarmProcess`, used as the
    `Popen` it stands for), or started cold when MNEMO_TEST_COLD is set."""
    command = [*MNEMO, "--config", str(config_path), *args]
    if os.environ.get(COLD):
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=mnemo_env(), cwd=cwd,
        )  # fmt: skip
    with open(os.devnull, "rb") as devnull:
        stdio = (devnull.fileno(), subprocess.PIPE, subprocess.PIPE)
        started = warm().start_process(command, command[3:], mnemo_env(), cwd, stdio, text=True)
    return started  # type: ignore[return-value]


def launch_mnemo(config: Path, command: str, log: Path, work: Path) -> subprocess.Popen[bytes]:
    """`core.bench.chaos.launch_mnemo` (`mnemo --config CONFIG COMMAND` in `work`, stderr
    appended to `log`, as the benches start it), forked from the warm `mnemo` unless
    MNEMO_TEST_COLD is set: for the chaos and fleet tests, whose subject is not the start."""
    if os.environ.get(COLD):
        return chaos.launch_mnemo(config, command, log, work)
    args = ["--config", str(config), command]
    with open(os.devnull, "rb") as devnull, log.open("ab") as stderr:
        stdio = (devnull.fileno(), devnull.fileno(), stderr.fileno())
        started = warm().start_process([*MNEMO, *args], args, bench_env(None), work, stdio, False)
    return started  # type: ignore[return-value]
