"""`core.cli.deferred_imports`: trio, rich and pygments, imported by httpx and httpcore but
never used by Mnemo, cost nothing until read from, and work as ever once they are.

Each check runs in a fresh interpreter: the finder changes that process's imports."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

PRELUDE = """
import sys
from core.cli.deferred_imports import defer_unused_imports
defer_unused_imports()
"""


def run(code: str) -> list[str]:
    """The lines `code` prints, run after `defer_unused_imports()` in a new interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + code],
        capture_output=True, text=True, timeout=120, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_httpx_with_a_client_runs_none_of_trio_rich_or_pygments() -> None:
    lines = run(
        "import asyncio, httpx\n"
        "async def client():\n"
        "    await httpx.AsyncClient().aclose()\n"
        "asyncio.run(client())\n"
        "import trio\n"  # a second import (httpcore has two) must not run it either
        "print('trio' in sys.modules, type(sys.modules['trio']).__name__)\n"
        "ran = [m for m in ('trio._core', 'rich.text', 'pygments.lexers._mapping')"
        " if m in sys.modules]\n"
        "print(ran or 'none')\n"
    )
    assert lines == ["True", "DeferredModule", "none"]


def test_a_deferred_package_runs_on_first_use_and_works() -> None:
    lines = run(
        "import trio\n"
        "async def main():\n"
        "    async with trio.open_nursery() as nursery:\n"
        "        nursery.start_soon(trio.sleep, 0)\n"
        "    return 'trio-ran'\n"
        "print(trio.run(main), type(trio).__name__, trio.Lock.__name__)\n"
        "import pygments.lexers\n"
        "print(pygments.lexers.get_lexer_by_name('python').name)\n"
    )
    assert lines == ["trio-ran", "module", "Lock", "Python"]


def test_other_imports_are_left_alone() -> None:
    lines = run("import json, click\nprint(type(json).__name__, type(click).__name__)\n")
    assert lines == ["module", "module"]
