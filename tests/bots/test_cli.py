"""The `mnemo` command: every plugin's subcommands are there, `--version` and `--help` load
nothing heavy, and every bench speaks JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from bots.cli import cli
from core import __version__
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.cli.lazy_group import LazyGroup
from tests.conftest import mnemo_env, write_config

REPO = Path(__file__).resolve().parents[2]
BENCHES = {
    "chaos",
    "kv",
    "locomo",
    "longrun",
    "media",
    "memory",
    "recall",
    "reflector",
    "scale",
    "skills",
    "startup",
    "stream",
    "tasks",
    "tools",
    "web",
}
# What `mnemo --version` and `mnemo --help` must not import (issue 27: ≤ 0.25 s).
HEAVY = {
    "pydantic", "pydantic_core", "httpx", "numpy", "onnxruntime", "onnx", "sqlite_vec",
    "pysqlite3", "psycopg", "psycopg_pool", "telegram", "discord", "torch", "starlette",
    "uvicorn", "jinja2", "sentence_transformers", "transformers", "tokenizers", "apscheduler",
}  # fmt: skip


def bench_group() -> click.Group:
    group = cli.commands["bench"]
    assert isinstance(group, click.Group)
    return group


def lazy_groups() -> list[LazyGroup]:
    groups = [cli, cli.commands["bench"], cli.commands["chat"]]
    assert all(isinstance(group, LazyGroup) for group in groups)
    return groups  # type: ignore[return-value]


def test_the_plugins_registered_their_commands() -> None:
    ctx = click.Context(cli)
    assert {"chat", "run", "doctor", "bench", "memory", "reflect", "storage", "web"} <= set(
        cli.list_commands(ctx)
    )
    assert set(bench_group().list_commands(ctx)) == BENCHES


def modules_run(*args: str, stdin: str = "") -> tuple[set[str], str]:
    """The modules `python -m bots.cli ARGS` imports (from `-X importtime`), and its output."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "bots.cli", *args],
        input=stdin, capture_output=True, text=True, timeout=120, cwd=REPO, env=mnemo_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    assert len(lines) > 20, done.stderr  # the format is what we parse
    return {line.rpartition("|")[2].strip() for line in lines}, done.stdout


def imported_by(*args: str) -> set[str]:
    """The top-level packages `python -m bots.cli ARGS` imports."""
    return {name.split(".")[0] for name in modules_run(*args)[0]}


@pytest.mark.parametrize("args", [["--version"], ["--help"]])
def test_version_and_help_import_nothing_heavy(args: list[str]) -> None:
    imported = imported_by(*args)
    assert "click" in imported
    assert imported & HEAVY == set()


# What `mnemo chat` never uses up to its first reply (issue 28: start-up): the scheduler
# and the dashboard's web stack load when they run; httpcore's trio and httpx's own command
# line (rich, pygments) are imported but never run (`core.cli.deferred_imports`, whose
# deferred packages show in `-X importtime` without the modules they would import).
CHAT_UNUSED = {"apscheduler", "starlette", "uvicorn", "aiohttp", "telegram", "discord"}
CHAT_UNRUN = {"trio._core", "rich.text", "pygments.lexers._mapping"}


def test_a_chat_start_loads_nothing_its_first_reply_does_not_use(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    modules, output = modules_run("--config", str(config), "chat", stdin="hello there\n")
    assert "hello there" in output  # the fake model echoes: the turn really ran
    assert {"httpx", "httpcore", "memory.keeper", "trio"} <= modules  # and was parsed
    assert {name.split(".")[0] for name in modules} & CHAT_UNUSED == set()
    assert modules & CHAT_UNRUN == set()


def test_the_version_is_the_package_version() -> None:
    """One source: the package's metadata is read from `core.__version__` at build time."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "core.__version__"}
    result = CliRunner().invoke(cli, ["--version"])
    assert result.output.endswith(f"version {__version__}\n")


def test_help_lists_each_unloaded_command_with_its_own_short_help() -> None:
    """`mnemo --help` shows the help registered with each lazy command: it must say what
    the command's own docstring says, at any terminal width."""
    checked = 0
    for group in lazy_groups():
        for name, lazy in group.lazy_commands.items():
            command = lazy.load()
            for limit in (30, 45, 60, 80, 120, 400):
                expected = command.get_short_help_str(limit)
                assert lazy.short_help(limit) == expected, (name, limit)
            checked += 1
    assert checked >= 20


def test_every_bench_command_takes_json() -> None:
    group = bench_group()
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        assert command is not None
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


@pytest.mark.parametrize(("given", "expected"), [(None, "1"), ("2", "2")])
def test_mnemo_runs_numpy_on_one_openblas_thread_unless_told(
    given: str | None, expected: str
) -> None:
    """OpenBLAS reads OPENBLAS_NUM_THREADS when numpy loads: `bots.cli` sets it first."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = "import bots.cli, os, numpy; print(os.environ['OPENBLAS_NUM_THREADS'])"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=REPO, check=True
    )
    assert done.stdout.strip() == expected
