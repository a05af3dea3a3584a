"""The terminal's own commands: `/exit` and `/quit` end the chat (as end of input and Ctrl-C
do) and never reach the model; `/help` lists them after the bot's commands. Scripted: the
channel on a pipe-like stdin, and `mnemo chat` itself with its stdin a pipe."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bots.terminal import TERMINAL_HELP, TerminalChannel
from core.api import Inbound, Outbound
from core.bench.fakes.fake_openai import FakeOpenAIServer
from tests.bots.test_first_run import REPO, mnemo, write_config


class Echo:
    """A handler that answers every message with its text and keeps what it was sent."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, inbound: Inbound) -> Outbound:
        self.seen.append(inbound.text)
        if inbound.text == "/help":
            return Outbound("terminal", inbound.chat_id, "Commands:\n/start - introduce the bot")
        return Outbound("terminal", inbound.chat_id, f"echo: {inbound.text}")


async def scripted(lines: str) -> tuple[list[str], str]:
    """What the handler was sent and what the terminal printed, for piped `lines`."""
    out = io.StringIO()
    echo = Echo()
    await TerminalChannel(stdin=io.StringIO(lines), stdout=out, interactive=False).run(echo)
    return echo.seen, out.getvalue()


@pytest.mark.parametrize("line", ["/exit", "/quit", "  /EXIT  ", "/quit now"])
async def test_exit_and_quit_end_the_chat_and_never_reach_the_model(line: str) -> None:
    seen, printed = await scripted(f"hello\n{line}\nafter\n")
    assert seen == ["hello"]
    assert printed == "echo: hello\n"


async def test_end_of_input_ends_the_chat_after_the_last_line() -> None:
    seen, printed = await scripted("one\ntwo")
    assert seen == ["one", "two"] and printed == "echo: one\necho: two\n"


async def test_help_lists_the_terminals_commands_after_the_bots() -> None:
    seen, printed = await scripted("/help\n")
    assert seen == ["/help"]
    assert printed == f"Commands:\n/start - introduce the bot\n\n{TERMINAL_HELP}\n"
    assert "/exit or /quit - end the chat (so do Ctrl-D and Ctrl-C)" in TERMINAL_HELP


def test_mnemo_chat_ends_at_exit_and_its_help_names_it(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        write_config(tmp_path, server.base_url, 'use = "off"')
        done = mnemo(tmp_path, "chat", stdin="hello\n/help\n/exit\nafter\n")
        sent = [str(m.get("content")) for r in server.requests for m in r["messages"]]
    assert done.returncode == 0, done.stderr
    assert "echo: hello" in done.stdout and "after" not in done.stdout
    assert "/help - list the commands" in done.stdout  # the bot's own list, then the terminal's
    assert done.stdout.index("/help - list the commands") < done.stdout.index(TERMINAL_HELP)
    assert not any("/exit" in text or "after" in text for text in sent)


def test_ctrl_c_ends_mnemo_chat_quietly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MNEMO_CONFIG"))}
    with FakeOpenAIServer() as server:
        write_config(tmp_path, server.base_url, 'use = "off"')
        chat = subprocess.Popen(
            [sys.executable, "-m", "bots.cli", "chat"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=tmp_path, env={**env, "PYTHONPATH": str(REPO)},
        )  # fmt: skip
        assert chat.stdin is not None and chat.stdout is not None
        chat.stdin.write("hello\n")
        chat.stdin.flush()
        assert chat.stdout.readline() == "echo: hello\n"  # the chat is up and waiting
        chat.send_signal(signal.SIGINT)
        out, err = chat.communicate(timeout=60)
    assert chat.returncode == 0, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert out == ""


def test_lines_typed_after_the_chat_ended_are_dropped_without_a_thread_error() -> None:
    """The reader thread outlives the chat's loop when input keeps coming (a script piping
    lines after /exit): it stops quietly instead of raising "Event loop is closed"."""
    read_end, write_end = os.pipe()
    stdin = os.fdopen(read_end, "r", encoding="utf-8")
    channel = TerminalChannel(stdin=stdin, stdout=io.StringIO(), interactive=False)
    loop = asyncio.new_event_loop()
    lines: asyncio.Queue[str | None] = asyncio.Queue()
    loop.close()  # the chat ended before the next line arrived
    errors: list[BaseException | None] = []
    default_hook = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value)
    try:
        reader = threading.Thread(target=channel._read_lines, args=(loop, lines))
        reader.start()
        os.write(write_end, b"one more line\n")
        os.close(write_end)
        reader.join(timeout=5)
    finally:
        threading.excepthook = default_hook
        stdin.close()
    assert not reader.is_alive()
    assert errors == []
