"""A warm `mnemo` for the tests: `run_mnemo` without paying the command's imports each time.

A cold `python -m bots.cli …` spends most of its ~1 CPU-second importing (pydantic, numpy,
the stores, the plugins). Here one process per test process (`WarmMnemo`) imports all that
once, with no thread started and nothing opened, then forks a child for each command. The
child is a real process of its own: it takes the caller's stdin, stdout and stderr (passed
over a unix socket), environment, working directory and argv, runs `bots.cli` as `__main__`
as `python -m bots.cli` does, and exits as that would (atexit handlers, threads joined); the
warm process reports its exit status. A cold start is still tested where it is the subject
(`tests/e2e/test_startup.py`, `tests/bots/test_cli.py`), and `MNEMO_TEST_COLD=1` makes every
`run_mnemo` cold again.

The same warm process serves the test MCP server (`core.bench.fakes.mcp_server`, whose SDK
import costs ~1.6 CPU-s a start): a warm process of the `mcp` kind preloads the SDK instead
of the CLI. A server the product starts itself (a stdio server's command) is started through
`tests/warm_exec.py`, a stdlib-only stand-in for `python -m MODULE` that hands its stdin,
stdout and stderr to a child forked here and exits as that child does.

Run as `python -m tests.warm_mnemo SOCKET [KIND]` (by `WarmMnemo`, never by hand).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any

COLD = "MNEMO_TEST_COLD"
_READ_CHUNK = 65536
# What the commands import, loaded before the first fork. Not onnxruntime nor torch: their
# import starts native threads, and a child forked after it aborts at exit (the C++ runtime
# joins threads the child does not have); each child imports them itself when it needs them.
NOT_FORK_SAFE = ("onnxruntime", "torch")
PRELOAD = (
    "bots.cli",
    "bots.runtime",
    "bots.plugins",
    "core.config",
    "core.storage.engine",
    "core.storage.stores",
    "memory.keeper",
    "memory.onnx_embedder",
    "httpx",
    "psycopg",
)
# What the test MCP server imports, over stdio and over HTTP.
MCP_PRELOAD = (
    "core.bench.fakes.mcp_server",
    "mcp.server.stdio",
    "mcp.server.streamable_http",
    "uvicorn",
    "uvicorn.config",
    "uvicorn.server",
    "uvicorn.main",
    "uvicorn.lifespan.on",
    "uvicorn.loops.auto",
    "uvicorn.loops.asyncio",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.protocols.http.httptools_impl",
    "uvicorn.protocols.websockets.auto",
)
PRELOADS = {"mnemo": PRELOAD, "mcp": MCP_PRELOAD}


# -- the warm process -------------------------------------------------------------------------


def preload(kind: str = "mnemo") -> None:
    """Import what `kind`'s commands import: for `mnemo`, the CLI and every lazy command's
    module; for `mcp`, the test MCP server and what it serves with."""
    import importlib

    for name in PRELOADS[kind]:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    if kind == "mnemo":
        load_lazy_commands()
    unsafe = [name for name in NOT_FORK_SAFE if name in sys.modules]
    if threading.active_count() != 1 or unsafe:
        raise RuntimeError(f"preloading started threads: {threading.enumerate()} {unsafe}")


def load_lazy_commands() -> None:
    """Import every lazy command of `mnemo`, as running each would."""
    from bots.cli import cli
    from core.cli.lazy_group import LazyGroup

    groups = [cli]
    while groups:
        group = groups.pop()
        if isinstance(group, LazyGroup):
            for lazy in group.lazy_commands.values():
                command = lazy.load()
                if isinstance(command, LazyGroup):
                    groups.append(command)


def run_child(request: dict[str, object], fds: list[int]) -> None:
    """In the forked child: become `python -m MODULE ARGS` (MODULE: `bots.cli` unless the
    request names another), at the caller's niceness; exit as it would, never return."""
    import importlib.util
    import runpy

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(str(request["cwd"]))
    os.environ.clear()
    os.environ.update(request["env"])  # type: ignore[arg-type]
    niceness = int(request.get("nice", 0))  # type: ignore[call-overload]
    if niceness > os.getpriority(os.PRIO_PROCESS, 0):
        os.setpriority(os.PRIO_PROCESS, 0, niceness)
    module = str(request.get("module", "bots.cli"))
    spec = importlib.util.find_spec(module)
    sys.argv = [str(spec.origin if spec else module), *request["args"]]  # type: ignore[misc]
    sys.modules.pop(module, None)  # as in `python -m`: run as __main__, imported again if asked
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exit_code(exc.code)
    except BaseException:
        traceback.print_exc()
        code = 1
    exit_as_python_does(code)


def exit_code(code: object) -> int:
    """The status `sys.exit(code)` gives a process (a message goes to stderr, status 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_as_python_does(code: int) -> None:
    """What the interpreter does at exit that a command can see (wait for its non-daemon
    threads, run its atexit handlers, flush stdout and stderr), then exit without tearing
    the ~700 modules down one by one, which costs a warm child more than its command."""
    try:
        threading._shutdown()  # type: ignore[attr-defined]
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
    finally:
        os._exit(code)


def serve(path: str) -> None:
    """Accept requests on the unix socket `path`; fork a child for each; report its status.
    A request marked `tied` (`tests/warm_exec.py`'s) ties the child to its caller: when the
    caller's connection ends first (the caller was killed), the child is killed too."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a warm process before this one that was killed
    listener.bind(path)
    listener.listen(16)
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    tied: dict[socket.socket, int] = {}  # a tied caller's connection -> its child's pid
    print("ready", flush=True)
    while True:
        readable, _, _ = select.select([sys.stdin, listener, *waiting, *tied], [], [])
        for ready in readable:
            if ready is sys.stdin:  # end of file: the test process is gone
                return
            if ready is listener:
                pidfd, pid, connection, is_tied = fork_for(listener, waiting)
                waiting[pidfd] = (pid, connection)
                if is_tied:
                    tied[connection] = pid
            elif isinstance(ready, socket.socket):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(tied.pop(ready), signal.SIGKILL)  # its caller is gone
            else:
                pid, connection = waiting.pop(ready)  # type: ignore[call-overload]
                tied.pop(connection, None)
                os.close(ready)  # type: ignore[arg-type]
                _, status = os.waitpid(pid, 0)
                with contextlib.suppress(OSError):
                    connection.sendall(f"{os.waitstatus_to_exitcode(status)}\n".encode())
                connection.close()


def fork_for(
    listener: socket.socket, waiting: dict[int, tuple[int, socket.socket]]
) -> tuple[int, int, socket.socket, bool]:
    """Accept one request and fork its child: the child's pidfd and pid, the caller's
    connection (told the pid), and whether the request is tied to its caller."""
    connection, _ = listener.accept()
    message, fds, _, _ = socket.recv_fds(connection, 1 << 20, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        listener.close()
        connection.close()
        for _, other in waiting.values():
            other.close()
        run_child(request, fds)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    return os.pidfd_open(pid), pid, connection, bool(request.get("tied"))


# -- the test side ----------------------------------------------------------------------------


class WarmMnemo:
    """The client: starts the warm process on first use and runs commands through it."""

    def __init__(self, repo: Path, env: dict[str, str], kind: str = "mnemo") -> None:
        self.repo = repo
        self.env = env
        self.kind = kind
        self.folder = Path(tempfile.mkdtemp(prefix="mnemo-warm-"))
        self.socket_path = str(self.folder / "warm.sock")
        self.process: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def start(self) -> None:
        with self.lock:
            if self.process is not None and self.process.poll() is None:
                return
            # It stops at the end of its stdin: when this process is gone, whichever thread
            # started it (PR_SET_PDEATHSIG would stop it with the thread).
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tests.warm_mnemo", self.socket_path, self.kind],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=self.env,
                cwd=self.repo,
            )
            assert self.process.stdout is not None
            if self.process.stdout.readline() != b"ready\n":
                raise RuntimeError("the warm mnemo process did not start")

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is not None:
            process.kill()
            process.wait()
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()
        with contextlib.suppress(OSError):
            os.unlink(self.socket_path)
            self.folder.rmdir()

    def start_process(
        self,
        command: list[str],
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        stdio: tuple[int, int, int],
        text: bool,
        module: str = "bots.cli",
    ) -> WarmProcess:
        """What `subprocess.Popen(command, env=env, cwd=cwd, …)` starts, `command` being
        `python -m MODULE ARGS`, forked from the warm process; `stdio` are the child's
        stdin, stdout and stderr (PIPE for a pipe this side reads, or a file descriptor the
        caller keeps)."""
        self.start()
        ends: list[int] = []  # the child's ends, closed here once it has them
        mine: list[int | None] = []
        for target, wanted in enumerate(stdio):
            if wanted == subprocess.PIPE:
                if target == 0:
                    raise ValueError("a warm process's stdin cannot be a pipe")
                read_end, write_end = os.pipe()
                ends.append(write_end)
                mine.append(read_end)
            else:
                ends.append(os.dup(wanted))
                mine.append(None)
        request = json.dumps({"args": args, "env": env, "cwd": str(cwd), "module": module})
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        connection.connect(self.socket_path)
        socket.send_fds(connection, [request.encode()], ends)
        for fd in ends:
            os.close(fd)
        pid = int(read_line(connection))
        files = [None if fd is None else open(fd, "r" if text else "rb") for fd in mine]  # noqa: SIM115
        return WarmProcess(command, pid, connection, files[1], files[2])

    def run(
        self,
        command: list[str],
        args: list[str],
        env: dict[str, str],
        cwd: Path,
        stdin: str,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        """What `subprocess.run(command, input=stdin, capture_output=True, text=True,
        timeout=timeout, env=env, cwd=cwd)` returns, `command` being `python -m bots.cli ARGS`."""
        self.start()
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        request = json.dumps({"args": args, "env": env, "cwd": str(cwd)}).encode()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
            connection.connect(self.socket_path)
            socket.send_fds(connection, [request], [stdin_r, stdout_w, stderr_w])
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
            with connection.makefile("rb") as replies:
                pid = int(replies.readline())
                deadline = time.monotonic() + timeout
                outputs = exchange(stdin_w, stdout_r, stderr_r, stdin.encode(), deadline)
                if outputs is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    replies.readline()
                    raise subprocess.TimeoutExpired(command, timeout)
                returncode = int(replies.readline())
        out, err = outputs
        return subprocess.CompletedProcess(command, returncode, text_of(out), text_of(err))


def read_line(connection: socket.socket) -> bytes:
    """One line from the warm process, read byte by byte: nothing after it is taken from the
    socket, so a later `select` on it still sees what comes next."""
    line = b""
    while not line.endswith(b"\n"):
        byte = connection.recv(1)
        if not byte:
            break
        line += byte
    return line


class WarmProcess:
    """A command forked from the warm process, used as the `subprocess.Popen` it stands for:
    `pid`, `returncode`, `poll`, `wait`, `send_signal`, `terminate`, `kill`, `communicate`,
    and `stdout`/`stderr` when they are pipes. Its exit status comes over `connection` (the
    warm process is its parent and reaps it)."""

    def __init__(
        self, args: list[str], pid: int, connection: socket.socket, stdout: Any, stderr: Any
    ) -> None:
        self.args = args
        self.pid = pid
        self.stdin = None
        self.stdout = stdout
        self.stderr = stderr
        self.returncode: int | None = None
        self._connection = connection
        self._readers: list[tuple[threading.Thread, list[Any]]] = []

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._connection], [], [], 0)[0]:
            self._ended()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            if not select.select([self._connection], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self._ended()
        assert self.returncode is not None
        return self.returncode

    def _ended(self) -> None:
        line = read_line(self._connection)
        self._connection.close()
        # no status: the warm process itself was killed, and the child with it
        self.returncode = int(line) if line.strip() else -signal.SIGKILL

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, input: Any = None, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr (the pipes) to their ends, then wait for the exit."""
        if not self._readers:
            for pipe in (self.stdout, self.stderr):
                got: list[Any] = []
                reader = threading.Thread(
                    target=lambda pipe=pipe, got=got: got.append(pipe.read() if pipe else None),
                    daemon=True,
                )
                reader.start()
                self._readers.append((reader, got))
        deadline = None if timeout is None else time.monotonic() + timeout
        for reader, _ in self._readers:
            reader.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
            if reader.is_alive():
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        for pipe in (self.stdout, self.stderr):
            if pipe is not None:
                pipe.close()
        return self._readers[0][1][0], self._readers[1][1][0]


def exchange(
    stdin_w: int, stdout_r: int, stderr_r: int, data: bytes, deadline: float
) -> tuple[bytes, bytes] | None:
    """Write `data` to the child's stdin and read its stdout and stderr to their ends, as
    `Popen.communicate` does; None when the deadline passes first."""
    outputs: dict[int, list[bytes]] = {stdout_r: [], stderr_r: []}
    reading = [stdout_r, stderr_r]
    writing = [stdin_w] if data else []
    if not data:
        os.close(stdin_w)
    try:
        while reading:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            readable, writable, _ = select.select(reading, writing, [], left)
            if writable:
                try:
                    data = data[os.write(stdin_w, data[:_READ_CHUNK]) :]
                except BrokenPipeError:  # the child is gone or closed its stdin
                    data = b""
                if not data:
                    writing = []
                    os.close(stdin_w)
            for fd in readable:
                chunk = os.read(fd, _READ_CHUNK)
                if chunk:
                    outputs[fd].append(chunk)
                else:
                    reading.remove(fd)
        return b"".join(outputs[stdout_r]), b"".join(outputs[stderr_r])
    finally:
        if writing:
            os.close(stdin_w)
        os.close(stdout_r)
        os.close(stderr_r)


def text_of(data: bytes) -> str:
    """Bytes as `text=True` gives them: the locale's encoding, universal newlines."""
    return io.TextIOWrapper(io.BytesIO(data), newline=None).read()


def main() -> None:
    os.environ.pop(COLD, None)
    preload(sys.argv[2] if len(sys.argv) > 2 else "mnemo")
    gc.freeze()  # the children do not touch (and so copy) the warm process's objects to collect
    serve(sys.argv[1])


if __name__ == "__main__":
    main()
