"""`mnemo bench tools`: what one MCP call costs on top of the tool's own work, over stdio and
streamable HTTP, against the test server (`core.bench.fakes.mcp_server`); and how long a server
takes to come up (in the background: a turn never waits for it)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from core.config import McpServerConfig
from core.mcp.connection import McpServer

REPO = Path(__file__).resolve().parents[2]
SERVER = ["-m", "core.bench.fakes.mcp_server"]
START_S = 120.0


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered), 3), "p95_ms": round(p95, 3)}


async def time_calls(config: McpServerConfig, calls: int) -> dict[str, Any]:
    """Start the server, wait until it is up, then time `calls` calls of `echo`."""
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
        for _ in range(5):  # warm up
            await server.call(echo, {"text": "warm"})
        samples = []
        for index in range(calls):
            started = time.perf_counter()
            await server.call(echo, {"text": f"call {index}"})
            samples.append((time.perf_counter() - started) * 1000)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    return {"up_s": round(up_s, 3), "calls": calls, **percentiles(samples)}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def http_server(port: int) -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, *SERVER, "http", str(port)],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(10)


async def bench(calls: int) -> dict[str, Any]:
    env = {"PYTHONPATH": str(REPO)}
    stdio = McpServerConfig(name="stdio", command=sys.executable, args=SERVER, env=env)
    result = {"stdio": await time_calls(stdio, calls)}
    with http_server(free_port()) as url:
        result["http"] = await time_calls(McpServerConfig(name="http", url=url), calls)
    return result


@click.command("tools")
@click.option("--calls", default=200, show_default=True, help="Calls timed per transport.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_tools(calls: int, as_json: bool) -> None:
    """The overhead of one MCP call (stdio, streamable HTTP): p50/p95 of a no-work tool."""
    result = asyncio.run(bench(calls))
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    for transport, figures in result.items():
        click.echo(
            f"{transport:6} up in {figures['up_s']:.2f} s (background); one call: "
            f"p50 {figures['p50_ms']:.2f} ms, p95 {figures['p95_ms']:.2f} ms "
            f"({figures['calls']} calls)"
        )
