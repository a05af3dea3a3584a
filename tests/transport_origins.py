"""Which test made an asyncio socket transport, and through which calls, written into the
transport's repr: a transport left unclosed is reported (a `ResourceWarning`, an error under
the suite's `filterwarnings = error`) only when it is garbage-collected, often at the setup
of a later, unrelated test on the same worker; its message then names where it came from.

Costs one short stack walk per connection (a few hundred per worker); `install()` is called
once by `tests/conftest.py`.
"""

from __future__ import annotations

import os
import traceback
from asyncio import selector_events
from pathlib import Path
from typing import Any

FRAMES = 6  # the innermost calls outside asyncio itself


def made_by() -> str:
    """The running test's id and the innermost calls (not asyncio's own), innermost first."""
    current = os.environ.get("PYTEST_CURRENT_TEST")  # "NODEID (setup)", "(call)", ...
    test = current.rsplit(" ", 1)[0] if current else "no test"
    frames = [f for f in traceback.extract_stack()[:-2] if "/asyncio/" not in f.filename]
    calls = " < ".join(
        f"{Path(frame.filename).name}:{frame.lineno} {frame.name}"
        for frame in reversed(frames[-FRAMES:])
    )
    return f"{test} ({calls})"


def install() -> None:
    """From now on, each socket transport's repr says where it was made (once per process)."""
    transport: Any = selector_events._SelectorSocketTransport
    if getattr(transport, "origin_noted", False):
        return
    make, represent = transport.__init__, transport.__repr__

    def noting_init(self: Any, *args: Any, **kwargs: Any) -> None:
        make(self, *args, **kwargs)
        self.made_by = made_by()

    def noting_repr(self: Any) -> str:
        text = str(represent(self))
        made = getattr(self, "made_by", "")
        return f"{text[:-1]} made by {made}>" if made and text.endswith(">") else text

    transport.__init__ = noting_init
    transport.__repr__ = noting_repr
    transport.origin_noted = True
