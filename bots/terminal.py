"""The terminal channel: a local conversation on stdin/stdout.

Interactive (stdin is a terminal): a prompt per message. Scripted (stdin is a pipe or
file): one message per line, each reply printed on stdout, exit at end of input. With
streaming on (`[terminal] streaming`, the default) a reply is printed as it grows; its
final text ends the line (or, when it differs from what was printed, follows in full).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
from collections.abc import AsyncIterator
from typing import TextIO

from core.api import Handler, Inbound, Outbound

PROMPT = "you> "


class TerminalChannel:
    name = "terminal"

    def __init__(
        self,
        chat_id: str = "local",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        interactive: bool | None = None,
        streaming: bool = True,
    ) -> None:
        self.chat_id = chat_id
        self.streaming = streaming
        self._printed: dict[str, str] = {}  # reply_to → the partial text printed so far
        self.stdin = stdin or sys.stdin
        self.stdout = stdout or sys.stdout
        self.interactive = self.stdin.isatty() if interactive is None else interactive

    async def run(self, handler: Handler) -> None:
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        loop = asyncio.get_running_loop()
        # A daemon thread, not asyncio.to_thread: a blocked readline must not hold up shutdown.
        reader = threading.Thread(target=self._read_lines, args=(loop, lines), daemon=True)
        reader.start()
        while True:
            if self.interactive:
                self._write(PROMPT, newline=False)
            line = await lines.get()
            if line is None:
                return
            text = line.rstrip("\n")
            if not text.strip():
                continue
            inbound = Inbound(self.name, self.chat_id, text, sender_id="local", sender_name="you")
            reply = await handler(inbound)
            if reply is not None:
                await self.send(reply)

    def _read_lines(
        self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]
    ) -> None:
        try:
            for line in self.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except (OSError, ValueError):
            pass
        finally:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                loop.call_soon_threadsafe(lines.put_nowait, None)

    @contextlib.asynccontextmanager
    async def typing(self, chat_id: str) -> AsyncIterator[None]:
        """No indicator: the terminal waits for each reply anyway."""
        yield

    async def show_partial(self, message: Outbound) -> None:
        """Print what `message` adds to the partial reply printed so far."""
        printed = self._printed.get(message.reply_to)
        if printed is None:
            self._write(self._prefix, newline=False)
            printed = ""
        elif not message.text.startswith(printed):  # a new answer (after a tool call)
            self._write("\n" + self._prefix, newline=False)
            printed = ""
        self._write(message.text[len(printed) :], newline=False)
        self._printed[message.reply_to] = message.text

    async def send(self, message: Outbound) -> None:
        printed = self._printed.pop(message.reply_to, None)
        if printed is not None and message.text.startswith(printed):
            self._write(message.text[len(printed) :])
            return
        if printed is not None:
            self._write("")  # end the partial line; the final text follows whole
        self._write(self._prefix + message.text)

    @property
    def _prefix(self) -> str:
        return "mnemo> " if self.interactive else ""

    def _write(self, text: str, newline: bool = True) -> None:
        self.stdout.write(text + ("\n" if newline else ""))
        self.stdout.flush()
