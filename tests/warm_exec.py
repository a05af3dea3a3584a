"""`python -I -S tests/warm_exec.py SOCKET MODULE ARGS…`: what `python -m MODULE ARGS…` does,
run by a child forked from the warm process listening on SOCKET (`tests/warm_mnemo.py`).

For a command the product starts itself (a stdio MCP server's): this process imports only
the standard library (~0.02 CPU-s against ~1.6 for the test MCP server's cold start), hands
its stdin, stdout and stderr, environment, working directory and niceness to the child, then
stands for it: the signals it gets are passed on, and it exits as the child did (the same
status, or killed by the same signal). Killed itself (SIGKILL), its child is killed too.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys

PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
             signal.SIGUSR2)  # fmt: skip


def read_line(connection: socket.socket) -> bytes:
    """One line from the warm process ("" when it closed the connection first)."""
    line = b""
    while not line.endswith(b"\n"):
        try:
            byte = connection.recv(1)
        except InterruptedError:
            continue
        if not byte:
            break
        line += byte
    return line


def main() -> None:
    path, module, *args = sys.argv[1:]
    child: list[int] = []
    pending: list[int] = []

    def pass_on(number: int, frame: object) -> None:
        if not child:
            pending.append(number)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(child[0], number)

    for number in PASSED_ON:
        signal.signal(number, pass_on)
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.connect(path)
    request = {
        "module": module,
        "args": args,
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "tied": True,
    }
    socket.send_fds(connection, [json.dumps(request).encode()], [0, 1, 2])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):  # the child's ends of the pipes are its own: no copy kept open here
        os.dup2(devnull, fd)
    child.append(int(read_line(connection)))
    for number in pending:
        pass_on(number, None)
    line = read_line(connection)
    code = int(line) if line.strip() else -signal.SIGKILL
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


if __name__ == "__main__":
    main()
