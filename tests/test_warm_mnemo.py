"""The warm `mnemo` (`tests/warm_mnemo.py`) gives what a cold `python -m bots.cli` gives: the
same exit status, stdout and stderr, with the caller's stdin, environment and working
directory; and a command past its timeout is killed, as `subprocess.run` does."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer
from tests.conftest import MNEMO, REPO, WARM_EXEC, mnemo_env, write_config
from tests.warm_mnemo import WarmMnemo, exchange, text_of

STAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", re.MULTILINE)


@pytest.fixture(scope="module")
def warm() -> Iterator[WarmMnemo]:
    runner = WarmMnemo(REPO, mnemo_env())
    yield runner
    runner.stop()


def both(
    warm: WarmMnemo, args: list[str], cwd: Path, env: dict[str, str], stdin: str = ""
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """The command run warm in `cwd/hot`, and cold in `cwd/cold`: each folder holds its own
    config.toml (read as ./config.toml) and data dir, so neither sees what the other did."""
    command = [*MNEMO, *args]
    hot = warm.run(command, args, env, cwd / "hot", stdin, timeout=120)
    cold = subprocess.run(
        command, input=stdin, capture_output=True, text=True, timeout=120, env=env,
        cwd=cwd / "cold",
    )  # fmt: skip
    return hot, cold


def two_folders(tmp_path: Path, base_url: str) -> Path:
    for side in ("hot", "cold"):
        (tmp_path / side).mkdir()
        write_config(tmp_path / side / "config.toml", base_url, tmp_path / side / "data")
    return tmp_path


def same(hot: subprocess.CompletedProcess[str], cold: subprocess.CompletedProcess[str]) -> None:
    """Equal but for the log lines' timestamps."""
    assert hot.args == cold.args
    assert (hot.returncode, hot.stdout) == (cold.returncode, cold.stdout)
    assert STAMP.sub("", hot.stderr) == STAMP.sub("", cold.stderr)


def test_exit_status_stdout_and_stderr_are_the_cold_ones(
    warm: WarmMnemo, tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    """Also where the command's outcome depends on the working directory (./config.toml)."""
    folders = two_folders(tmp_path, fake_llm.base_url)
    hot, cold = both(warm, ["--version"], folders, mnemo_env())
    same(hot, cold)
    assert hot.returncode == 0 and "version" in hot.stdout
    hot, cold = both(warm, ["memory", "list", "--chat", "terminal:nobody"], folders, mnemo_env())
    same(hot, cold)
    assert hot.returncode != 0 and "no chat" in hot.stderr
    hot, cold = both(warm, ["memory", "list", "--global"], folders, mnemo_env())
    same(hot, cold)
    assert hot.returncode == 0 and "0 memories" in hot.stdout + hot.stderr


def test_the_environment_and_stdin_are_the_callers(
    warm: WarmMnemo, tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    """`$MNEMO_CONFIG` is read from the caller's environment, and a piped chat reads the
    caller's stdin."""
    config = write_config(tmp_path / "other.toml", fake_llm.base_url, tmp_path / "data")
    env = {**mnemo_env(), "MNEMO_CONFIG": str(config)}
    hot = warm.run([*MNEMO, "chat"], ["chat"], env, tmp_path, "hello there\n", timeout=120)
    assert hot.returncode == 0, hot.stderr
    assert (tmp_path / "data").is_dir()
    assert fake_llm.requests and "hello there" in str(fake_llm.requests[-1])


def test_a_warm_process_started_from_a_thread_outlives_the_thread(tmp_path: Path) -> None:
    """Tests run commands from thread pools: the warm process stays when the thread ends."""
    runner = WarmMnemo(REPO, mnemo_env())
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            first = pool.submit(runner.run, [*MNEMO, "--version"], ["--version"], mnemo_env(),
                                tmp_path, "", 120).result()  # fmt: skip
        assert first.returncode == 0 and runner.process is not None
        started = runner.process.pid
        again = runner.run([*MNEMO, "--version"], ["--version"], mnemo_env(), tmp_path, "", 120)
        assert again.stdout == first.stdout and runner.process.pid == started
    finally:
        runner.stop()


def test_a_command_past_its_deadline_is_cut_short() -> None:
    """`exchange` gives up at the deadline (the caller then kills the child)."""
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        stdin=stdin_r, stdout=stdout_w, stderr=stderr_w,
    )  # fmt: skip
    for fd in (stdin_r, stdout_w, stderr_w):
        os.close(fd)
    began = time.monotonic()
    try:
        assert exchange(stdin_w, stdout_r, stderr_r, b"", began + 0.3) is None
        assert time.monotonic() - began < 5
    finally:
        sleeper.kill()
        sleeper.wait()


def test_text_is_decoded_with_universal_newlines() -> None:
    assert text_of(b"a\r\nb\rc\n") == "a\nb\nc\n"


def test_a_long_running_command_is_used_as_the_popen_it_stands_for(
    warm: WarmMnemo, tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    """`start_process` (what `start_mnemo` and the chaos and fleet tests use): a real process
    that runs until stopped, its pipes read here, its exit status as `Popen` gives it
    (negative: the signal that ended it)."""
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    args = ["--config", str(config), "chat"]
    for stop in ("end of input", "SIGKILL"):
        stdin_r, stdin_w = os.pipe()
        stdio = (stdin_r, subprocess.PIPE, subprocess.PIPE)
        process = warm.start_process([*MNEMO, *args], args, mnemo_env(), tmp_path, stdio, True)
        os.close(stdin_r)
        os.write(stdin_w, b"hello there\n")
        assert process.stdout is not None and process.stdout.readline() == "echo: hello there\n"
        assert process.poll() is None and process.returncode is None
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.2)
        if stop == "SIGKILL":
            process.kill()
        os.close(stdin_w)
        out, err = process.communicate(timeout=60)
        assert process.returncode == (-signal.SIGKILL if stop == "SIGKILL" else 0), err
        assert out == "" and process.poll() == process.returncode
        process.send_signal(signal.SIGTERM)  # once it has ended: nothing, as `Popen` does


def test_warm_exec_stands_for_python_m_module(warm: WarmMnemo) -> None:
    """`tests/warm_exec.py` (a stdio MCP server's command): the child's stdin, stdout,
    stderr and exit status are the cold `python -m MODULE`'s."""
    warm.start()
    stand_in = [sys.executable, "-I", "-S", WARM_EXEC, warm.socket_path, "json.tool"]
    for given in ('{"b": [1, 2]}', "{not json"):
        hot = subprocess.run(stand_in, input=given, capture_output=True, text=True, timeout=60)
        cold = subprocess.run([sys.executable, "-m", "json.tool"], input=given,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert (hot.returncode, hot.stdout, hot.stderr) == (cold.returncode, cold.stdout,
                                                            cold.stderr)  # fmt: skip
    assert cold.returncode == 1 and "Expecting property name" in cold.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_warm_exec_passes_signals_on_and_its_child_dies_with_it(
    warm: WarmMnemo, sig: signal.Signals
) -> None:
    """What the MCP SDK does to a server it stops (SIGTERM, then SIGKILL to its group): a
    signal reaches the child; killed itself, its child is killed too."""
    warm.start()
    assert warm.process is not None
    children = Path(f"/proc/{warm.process.pid}/task/{warm.process.pid}/children")
    command = [sys.executable, "-I", "-S", WARM_EXEC, warm.socket_path, "http.server", "0",
               "--bind", "127.0.0.1"]  # fmt: skip
    with subprocess.Popen(command, stdout=subprocess.PIPE, text=True) as stand_in:
        assert stand_in.stdout is not None and "Serving HTTP" in stand_in.stdout.readline()
        [child] = children.read_text().split()
        stand_in.send_signal(sig)
        assert stand_in.wait(timeout=30) == -sig
    deadline = time.monotonic() + 30
    while child in children.read_text().split():
        assert time.monotonic() < deadline, "the child outlived its stand-in"
        time.sleep(0.05)
