"""The terminal channel: a local conversation on stdin/stdout.

Interactive (stdin is a terminal): a prompt per message. Scripted (stdin is a pipe or
file): one message per line, each reply printed on stdout, exit at end of input. With
streaming on (`[terminal] streaming`, the default) a reply is printed as it grows; its
final text ends the line (or, when it differs from what was printed, follows in full).

`/image PATH [caption]` and `/voice PATH` send a file from disk with the message (and
`mnemo chat --image PATH` attaches one to the first message). `/exit` and `/quit` end the
chat here, as end of input (Ctrl-D) and Ctrl-C do; they never reach the model. `/help`
lists them after the bot's own commands.
"""

from __future__ import annotations

import asyncio
import contextlib
import mimetypes
import shlex
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO

from core.api import Attachment, Handler, Inbound, Outbound
from core.events import MediaKind

PROMPT = "you> "
FILE_COMMANDS: dict[str, MediaKind] = {"/image": "image", "/voice": "voice"}
END_COMMANDS = ("/exit", "/quit")
TERMINAL_HELP = (
    "In this terminal:\n"
    "/exit or /quit - end the chat (so do Ctrl-D and Ctrl-C)\n"
    "/image PATH [caption] - send an image from disk\n"
    "/voice PATH - send a voice message from disk"
)


class TerminalChannel:
    name = "terminal"

    def __init__(
        self,
        chat_id: str = "local",
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        interactive: bool | None = None,
        streaming: bool = True,
        image: Path | None = None,
    ) -> None:
        self.chat_id = chat_id
        self.image = image  # attached to the first message (`mnemo chat --image PATH`)
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
            try:
                line = await lines.get()
            except asyncio.CancelledError:  # Ctrl-C (or a stop): leave the prompt's line
                if self.interactive:
                    self._write("")
                raise
            if line is None:
                return
            text = line.rstrip("\n")
            command = text.strip().partition(" ")[0].lower()
            if command in END_COMMANDS:
                return
            if not text.strip():
                continue
            inbound = self._inbound(text)
            if inbound is None:
                continue
            reply = await handler(inbound)
            if reply is not None:
                await self.send(reply)
            if command == "/help":  # the bot's commands went out; the terminal's follow
                self._write(f"\n{TERMINAL_HELP}")

    def _inbound(self, text: str) -> Inbound | None:
        """The message for a line; a `/image PATH` or `/voice PATH` line carries the file
        (None, with the reason printed, when it cannot be read)."""
        attachments: tuple[Attachment, ...] = ()
        head, _, rest = text.strip().partition(" ")
        try:
            if head in FILE_COMMANDS:
                path, text = _path_and_caption(rest)
                attachments = (read_attachment(FILE_COMMANDS[head], path),)
            elif self.image is not None:
                attachments = (read_attachment("image", self.image),)
        except (OSError, ValueError) as exc:
            self._write(f"mnemo: cannot send that file: {exc}")
            return None
        finally:
            self.image = None
        return Inbound(self.name, self.chat_id, text, sender_id="local", sender_name="you",
                       attachments=attachments)  # fmt: skip

    def _read_lines(
        self, loop: asyncio.AbstractEventLoop, lines: asyncio.Queue[str | None]
    ) -> None:
        try:
            for line in self.stdin:
                loop.call_soon_threadsafe(lines.put_nowait, line)
        except (OSError, ValueError):
            pass
        except RuntimeError:  # the loop closed (the chat ended): no one reads the rest
            return
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


def _path_and_caption(rest: str) -> tuple[Path, str]:
    """`PATH caption words` (the path may be quoted) → (path, caption)."""
    words = shlex.split(rest)
    if not words:
        raise ValueError("say which file: /image PATH [caption]")
    return Path(words[0]).expanduser(), " ".join(words[1:])


def read_attachment(kind: MediaKind, path: Path) -> Attachment:
    """A file from disk as an attachment (its type guessed from its name)."""
    mime = mimetypes.guess_type(path.name)[0] or ""
    return Attachment(kind, path.read_bytes(), mime, path.name)
