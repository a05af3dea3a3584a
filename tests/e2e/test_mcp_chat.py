"""`mnemo chat` with an MCP server configured: the chat runs the server in the background,
and once it is up the model calls its tool end to end. The chat is forked from the warm
`mnemo` and the server from the warm MCP process (`tests/warm_exec.py` stands for it), as
elsewhere in the suite; MNEMO_TEST_COLD=1 starts both cold."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from tests.conftest import MNEMO, mcp_server_command, mnemo_env, warm, write_config
from tests.warm_mnemo import COLD

REPO = Path(__file__).resolve().parents[2]
START_S = 90.0


def server_table() -> str:
    command, args = mcp_server_command("stdio")
    return (
        f'[[mcp.servers]]\nname = "t"\ncommand = {json.dumps(command)}\n'
        f"args = {json.dumps(args)}\n"
        f'env = {{ PYTHONPATH = "{REPO}" }}\nchats = ["terminal:*"]\n'
    )


def start_chat(config: Path, cwd: Path) -> tuple[Any, IO[str]]:
    """`mnemo --config CONFIG chat` (stdout a pipe, stderr dropped) and a pipe to its stdin:
    forked from the warm `mnemo`, or started cold when MNEMO_TEST_COLD is set."""
    command = [*MNEMO, "--config", str(config), "chat"]
    if os.environ.get(COLD):
        cold = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, env=mnemo_env(), cwd=cwd,
        )  # fmt: skip
        assert cold.stdin is not None
        return cold, cold.stdin
    read_end, write_end = os.pipe()
    with open(os.devnull, "wb") as devnull:
        stdio = (read_end, subprocess.PIPE, devnull.fileno())
        chat = warm().start_process(command, command[3:], mnemo_env(), cwd, stdio, text=True)
    os.close(read_end)  # the child has its own copy
    return chat, open(write_end, "w")  # noqa: SIM115


def read_lines(stream: object, into: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        into.put(line.rstrip("\n"))


def wait_for(lines: queue.Queue[str], text: str, seen: list[str], limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            seen.append(lines.get(timeout=0.2))
        except queue.Empty:
            continue
        if text in seen[-1]:
            return True
    return False


def test_mnemo_chat_runs_the_mcp_server_and_the_model_calls_its_tool(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    config.write_text(config.read_text(encoding="utf-8") + server_table(), encoding="utf-8")
    fake_llm.add(FakeReply(tool_calls=[tool_call("t__echo", {"text": "from mcp"}, "c1")]))
    fake_llm.add(FakeReply("echoed"))
    chat, stdin = start_chat(config, tmp_path)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(chat.stdout, lines), daemon=True).start()
    seen: list[str] = []
    try:
        deadline = time.monotonic() + START_S
        up = False
        while not up and time.monotonic() < deadline:
            stdin.write("/tools\n")
            stdin.flush()
            up = wait_for(lines, "MCP t: t__", seen, 2.0)
        assert up, seen
        stdin.write("say it through the tool\n")
        stdin.flush()
        assert wait_for(lines, "echoed", seen, 30), seen
    finally:
        stdin.close()
        chat.wait(30)
        if chat.stdout is not None:
            chat.stdout.close()
    results = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == ["from mcp"]
    assert chat.returncode == 0
