"""`mnemo chat` with an MCP server configured: the chat runs the server in the background,
and once it is up the model calls its tool end to end."""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from tests.conftest import MNEMO, mnemo_env, write_config

REPO = Path(__file__).resolve().parents[2]
START_S = 90.0


def server_table() -> str:
    return (
        f'[[mcp.servers]]\nname = "t"\ncommand = "{sys.executable}"\n'
        'args = ["-m", "core.bench.fakes.mcp_server", "stdio"]\n'
        f'env = {{ PYTHONPATH = "{REPO}" }}\nchats = ["terminal:*"]\n'
    )


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
    chat = subprocess.Popen(
        [*MNEMO, "--config", str(config), "chat"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=mnemo_env(),
        cwd=tmp_path,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=read_lines, args=(chat.stdout, lines), daemon=True).start()
    seen: list[str] = []
    assert chat.stdin is not None
    try:
        deadline = time.monotonic() + START_S
        up = False
        while not up and time.monotonic() < deadline:
            chat.stdin.write("/tools\n")
            chat.stdin.flush()
            up = wait_for(lines, "MCP t: t__", seen, 2.0)
        assert up, seen
        chat.stdin.write("say it through the tool\n")
        chat.stdin.flush()
        assert wait_for(lines, "echoed", seen, 30), seen
    finally:
        chat.stdin.close()
        chat.wait(30)
        if chat.stdout is not None:
            chat.stdout.close()
    results = [m for m in fake_llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in results] == ["from mcp"]
    assert chat.returncode == 0
