"""The `mnemo` command: every plugin's subcommands are there, and every bench speaks JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click

from bots.cli import cli

BENCHES = {
    "chaos",
    "kv",
    "locomo",
    "longrun",
    "memory",
    "reflector",
    "scale",
    "startup",
    "stream",
    "web",
}


def bench_group() -> click.Group:
    group = cli.commands["bench"]
    assert isinstance(group, click.Group)
    return group


def test_the_plugins_registered_their_commands() -> None:
    assert {"chat", "run", "doctor", "bench", "memory", "reflect", "storage", "web"} <= set(
        cli.commands
    )
    assert set(bench_group().commands) == BENCHES


def test_every_bench_command_takes_json() -> None:
    for name, command in bench_group().commands.items():
        flags = [p for p in command.params if isinstance(p, click.Option) and "--json" in p.opts]
        assert [flag.is_flag for flag in flags] == [True], name


def test_a_bench_prints_one_json_object_on_stdout(tmp_path: Path) -> None:
    """Progress goes to stderr, so `mnemo bench … --json | jq` reads only the result."""
    done = subprocess.run(
        [sys.executable, "-m", "bots.cli", "--log-level", "WARNING", "bench", "reflector",
         "--small", "30", "--large", "120", "--new", "5", "--repeat", "1", "--no-embed", "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["small_history"] == 30 and result["large_history"] == 120
    assert result["new_messages"] == 5 and result["ratio"] > 0
    assert "seeding" in done.stderr
