"""`mnemo bench tools`: what one MCP call costs on top of the tool's own work, over stdio and
streamable HTTP, against the test server (`core.bench.fakes.mcp_server`, the SDK's own
`MCPServer`); and `mnemo chat`'s start-up with MCP servers configured: the time to the first
reply and to the end of the process.

Over HTTP the call is split into what the server and HTTP cost (a bare POST of the same
`tools/call`, no MCP client) and what the client adds; the same call through the SDK's own
client (`ClientSession`, its default HTTP client) shows what Mnemo's client changes. CPU
time per call (client process, server process) is given next to wall time: on a busy
machine wall time mostly measures the wait for a core.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import click

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.startup import bench_env, measure, write_config
from core.config import McpServerConfig
from core.mcp.connection import McpServer

REPO = Path(__file__).resolve().parents[2]
SERVER = ["-m", "core.bench.fakes.mcp_server"]
START_S = 120.0
WARM_UP_CALLS = 10
BATCH = 10  # calls per client per turn
Call = Callable[[], Awaitable[object]]


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(p95, 3)}


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a process so far (None where /proc is missing)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Timings:
    """One client's samples (ms) and the CPU its calls took here and in the server (s)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self.client_cpu = 0.0
        self.server_cpu: float | None = 0.0

    def figures(self) -> dict[str, Any]:
        calls = len(self.samples)
        found: dict[str, Any] = percentiles(self.samples)
        found["client_cpu_ms"] = round(self.client_cpu * 1000 / calls, 3)
        if self.server_cpu is not None:
            found["server_cpu_ms"] = round(self.server_cpu * 1000 / calls, 3)
        return found


async def time_batch(call: Call, count: int, into: Timings, server_pid: int | None) -> None:
    cpu, server_cpu = time.process_time(), process_cpu_s(server_pid) if server_pid else None
    for _ in range(count):
        started = time.perf_counter()
        await call()
        into.samples.append((time.perf_counter() - started) * 1000)
    into.client_cpu += time.process_time() - cpu
    after = process_cpu_s(server_pid) if server_pid else None
    if server_cpu is None or after is None or into.server_cpu is None:
        into.server_cpu = None
    else:
        into.server_cpu += after - server_cpu


async def time_interleaved(
    clients: dict[str, Call], calls: int, server_pid: int | None
) -> dict[str, dict[str, Any]]:
    """`calls` calls per client, in turns of BATCH, so a change in the machine's load
    falls on every client alike; each client warmed up first."""
    timings = {name: Timings() for name in clients}
    for call in clients.values():
        for _ in range(WARM_UP_CALLS):
            await call()
    for start in range(0, calls, BATCH):
        for name, call in clients.items():
            await time_batch(call, min(BATCH, calls - start), timings[name], server_pid)
    return {name: timing.figures() for name, timing in timings.items()}


@contextlib.asynccontextmanager
async def mnemo_client(config: McpServerConfig) -> AsyncIterator[tuple[Call, float]]:
    """Mnemo's client of the server, up: its `echo` call and how long it took to come up."""
    server = McpServer(config)
    began = time.perf_counter()
    task = asyncio.create_task(server.run())
    try:
        while server.state != "up":
            if time.perf_counter() - began > START_S:
                raise click.ClickException(f"{config.name}: {server.last_error or 'no start'}")
            await asyncio.sleep(0.01)
        up_s = time.perf_counter() - began
        echo = next(tool for tool in server.tools if tool.remote_name == "echo")
        yield (lambda: server.call(echo, {"text": "x"})), up_s
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def stdio_child_pid() -> int | None:
    """The stdio server's process: this process's newest child (Linux)."""
    try:
        children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split()
    except OSError:
        return None
    return int(children[-1]) if children else None


@contextlib.asynccontextmanager
async def sdk_client(url: str) -> AsyncIterator[Call]:
    """The same call through the SDK's own client, as its docs use it."""
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as sdk:
        await sdk.initialize()
        yield lambda: sdk.call_tool("echo", {"text": "x"})


@contextlib.asynccontextmanager
async def bare_post(url: str) -> AsyncIterator[Call]:
    """A bare HTTP POST of `tools/call` on a kept-alive connection, its whole body read:
    what the server and HTTP cost with no MCP client."""
    import httpx2

    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    version = "2025-06-18"
    client_info = {"name": "mnemo-bench", "version": "1"}
    hello = {"protocolVersion": version, "capabilities": {}, "clientInfo": client_info}
    async with httpx2.AsyncClient() as client:
        opened = await client.post(url, json=rpc("initialize", hello), headers=headers)
        if "mcp-session-id" in opened.headers:
            headers["mcp-session-id"] = opened.headers["mcp-session-id"]
        headers["mcp-protocol-version"] = version
        ready = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await client.post(url, json=ready, headers=headers)
        call = rpc("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        yield lambda: client.post(url, json=call, headers=headers)


def rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def listening(port: int) -> bool:
    """Whether a server listens on 127.0.0.1:`port`. A connection whose kernel-chosen source
    port is `port` itself connects to itself (TCP simultaneous open) with no server there:
    that one does not count."""
    try:
        with socket.create_connection(("127.0.0.1", port), 1) as sock:
            return not self_connected(sock)
    except OSError:
        return False


def self_connected(sock: socket.socket) -> bool:
    return bool(sock.getsockname() == sock.getpeername())


@contextlib.contextmanager
def http_server(
    port: int, *flags: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """The test server over streamable HTTP on `port` (`env`: its environment, default this
    process's) until the block ends; `ClickException` if it does not start."""
    process = subprocess.Popen(
        [sys.executable, *SERVER, "http", str(port), *flags],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_S
        while not listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise click.ClickException("the HTTP test server did not start")
            time.sleep(0.05)
        yield process
    finally:
        process.terminate()
        process.wait(10)


async def stdio_figures(calls: int) -> dict[str, Any]:
    env = {"PYTHONPATH": str(REPO)}
    config = McpServerConfig(name="stdio", command=sys.executable, args=SERVER, env=env)
    async with mnemo_client(config) as (call, up_s):
        timed = await time_interleaved({"mnemo": call}, calls, stdio_child_pid())
    return {"up_s": round(up_s, 3), "calls": calls, **timed["mnemo"]}


async def http_figures(calls: int, *flags: str) -> dict[str, Any]:
    """Mnemo's call, the SDK's call and a bare POST against one HTTP server, interleaved."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with http_server(port, *flags) as process:
        async with (
            mnemo_client(McpServerConfig(name="http", url=url)) as (mnemo, up_s),
            sdk_client(url) as sdk,
            bare_post(url) as post,
        ):
            clients = {"mnemo": mnemo, "sdk_client": sdk, "bare_post": post}
            timed = await time_interleaved(clients, calls, process.pid)
    figures = {"up_s": round(up_s, 3), "calls": calls, **timed.pop("mnemo"), **timed}
    overhead = figures["p50_ms"] - figures["bare_post"]["p50_ms"]
    figures["client_overhead_p50_ms"] = round(overhead, 3)
    return figures


async def bench(calls: int) -> dict[str, Any]:
    return {
        "stdio": await stdio_figures(calls),
        "http": await http_figures(calls),  # the SDK's default server: an SSE stream per call
        "http_json": await http_figures(calls, "json"),  # json_response=True
    }


# `mnemo chat` start-up: `printf 'hello\\n' | mnemo chat` (warm, instant fake model) with no
# MCP server, two stdio servers, and one of them replaced by a server that never answers.
# Servers start in the background, so the first reply should come as fast in all three.
MUTE = "import time; time.sleep(120)"  # a server that never answers `initialize`


def server_table(name: str, args: list[str]) -> str:
    quoted = ", ".join(f'"{arg}"' for arg in args)
    return (
        f'[[mcp.servers]]\nname = "{name}"\ncommand = "{sys.executable}"\nargs = [{quoted}]\n'
        f'env = {{ PYTHONPATH = "{REPO}" }}\nchats = ["terminal:*"]\n'
    )


CASES = {
    "no_servers": "",
    "two_stdio_servers": server_table("a", ["-m", "core.bench.fakes.mcp_server", "stdio"])
    + server_table("b", ["-m", "core.bench.fakes.mcp_server", "stdio"]),
    "one_server_never_answers": server_table("a", ["-m", "core.bench.fakes.mcp_server", "stdio"])
    + server_table("mute", ["-c", MUTE]),
}


def chat_once(config: Path, env: dict[str, str]) -> tuple[float, float]:
    """One `mnemo chat` with one line: seconds to its first reply line, and to its end."""
    run = measure(["chat"], config, env, "hello\n")
    if run.returncode != 0 or not run.first_line.strip():
        raise click.ClickException(
            f"mnemo chat failed (exit {run.returncode}): {run.stderr[-400:]}"
        )
    return run.first_line_s, run.wall_s


def startup_figures(repeat: int) -> dict[str, Any]:
    """Median first reply and wall of `repeat` runs per case (one unmeasured run first)."""
    result: dict[str, Any] = {"repeat": repeat}
    with (
        FakeOpenAIServer() as model,
        tempfile.TemporaryDirectory(prefix="mnemo-bench-tools-") as tmp,
    ):
        env = bench_env(None)
        for case, tables in CASES.items():
            work = Path(tmp) / case
            work.mkdir()
            config = write_config(work / "config.toml", model.base_url, work / "data", tables)
            chat_once(config, env)  # the database is made, the caches are warm
            runs = [chat_once(config, env) for _ in range(repeat)]
            result[case] = {
                "first_reply_s": round(statistics.median(run[0] for run in runs), 2),
                "wall_s": round(statistics.median(run[1] for run in runs), 2),
            }
    return result


def startup_lines(result: dict[str, Any]) -> list[str]:
    return [
        f"mnemo chat, one line, warm, {case.replace('_', ' ')}: first reply "
        f"{result[case]['first_reply_s']:.2f} s, exit {result[case]['wall_s']:.2f} s "
        f"(median of {result['repeat']})"
        for case in CASES
    ]


def call_lines(result: dict[str, Any]) -> list[str]:
    lines = []
    for transport in ("stdio", "http", "http_json"):
        fig = result[transport]
        line = (
            f"{transport:9} up in {fig['up_s']:.2f} s (background); one call: p50 "
            f"{fig['p50_ms']:.2f} ms, p95 {fig['p95_ms']:.2f} ms; CPU per call: client "
            f"{fig['client_cpu_ms']:.2f} ms, server {fig.get('server_cpu_ms', float('nan')):.2f} ms"
        )
        lines.append(line)
        if "bare_post" in fig:
            sdk, post = fig["sdk_client"], fig["bare_post"]
            lines.append(
                f"{'':9} bare POST (server + HTTP) p50 {post['p50_ms']:.2f} ms; the SDK's own "
                f"client p50 {sdk['p50_ms']:.2f} ms, client CPU {sdk['client_cpu_ms']:.2f} ms"
            )
    return lines


@click.command("tools")
@click.option("--calls", default=200, show_default=True, help="Calls timed per transport.")
@click.option(
    "--repeat", default=3, show_default=True, help="`mnemo chat` runs per start-up case (0: none)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_tools(calls: int, repeat: int, as_json: bool) -> None:
    """The overhead of one MCP call (stdio, streamable HTTP) and chat start-up with servers."""
    load = os.getloadavg()[0]  # wall times on a busy machine are the wait for a core
    result = asyncio.run(bench(calls))
    result["startup"] = startup_figures(repeat) if repeat else {}
    result["load_average"] = [round(load, 1), round(os.getloadavg()[0], 1)]
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    before, after = result["load_average"]
    notes = [f"load average {before:.1f} before, {after:.1f} after (cores: {os.cpu_count()})"]
    started = startup_lines(result["startup"]) if repeat else []
    for line in [*call_lines(result), *started, *notes]:
        click.echo(line)
