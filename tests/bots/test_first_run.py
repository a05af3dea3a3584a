"""The first run: `mnemo chat` says (with its exit status) when the model never answered,
points at the embedded demo model when nothing serves one, and the demo install shows
its progress from pip's output."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from bots.demo_install import Progress, follow, llama_cmake_args, pip_command
from bots.embedded_cli import unattended_fallback
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.config import load_config
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parents[2]
DEAD_URL = "http://127.0.0.1:9/v1"  # the discard port: nothing listens on loopback


def mnemo(cwd: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "MNEMO_CONFIG"))}
    return run_cli(list(args), {**env, "PYTHONPATH": str(REPO)}, cwd, stdin, timeout=300)


def write_config(cwd: Path, base_url: str, embedded: str) -> None:
    (cwd / "config.toml").write_text(
        f'[llm]\nbase_url = "{base_url}"\nmax_retries = 0\ntimeout_s = 10\n'
        f"[embedded]\n{embedded}\n"
        f'[storage]\ndata_dir = "{cwd / "data"}"\n[reflector]\nenabled = false\n',
        encoding="utf-8",
    )


def test_chat_exits_non_zero_when_the_model_never_answered(tmp_path: Path) -> None:
    write_config(tmp_path, DEAD_URL, 'use = "off"')
    done = mnemo(tmp_path, "chat", stdin="hello\n")
    assert done.returncode == 1, done.stderr
    assert "Sorry, the model is unavailable" in done.stdout
    assert "the model never answered in this session (1 request(s) failed)" in done.stderr


def test_chat_exits_zero_when_the_model_answered(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        write_config(tmp_path, server.base_url, 'use = "off"')
        done = mnemo(tmp_path, "chat", stdin="hello\n")
    assert done.returncode == 0, done.stderr
    assert "echo: hello" in done.stdout and "never answered" not in done.stderr


def test_with_no_server_auto_names_the_embedded_model_and_its_install(tmp_path: Path) -> None:
    """`auto`, nothing at base_url, the embedded model unavailable (here: a GGUF that is not
    there): one line says what is missing and how to install it; the chat still fails
    honestly (exit status 1), nothing is started."""
    write_config(tmp_path, DEAD_URL, f'use = "auto"\nmodel_path = "{tmp_path / "none.gguf"}"')
    done = mnemo(tmp_path, "chat", stdin="hello\n")
    assert done.returncode == 1
    assert f"No model server answered at {DEAD_URL}, and the embedded demo model" in done.stderr
    assert "mnemo embedded install" in done.stderr


def test_embedded_on_but_unavailable_is_one_clear_error(tmp_path: Path) -> None:
    write_config(tmp_path, DEAD_URL, f'use = "on"\nmodel_path = "{tmp_path / "none.gguf"}"')
    done = mnemo(tmp_path, "chat", stdin="hello\n")
    assert done.returncode == 2
    assert "mnemo: the embedded demo model cannot start:" in done.stderr
    assert "Traceback" not in done.stderr


def test_install_if_needed_does_nothing_when_a_server_answers(tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        write_config(tmp_path, server.base_url, f'model_path = "{tmp_path / "none.gguf"}"')
        done = mnemo(tmp_path, "embedded", "install", "--if-needed")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize(
    ("toml", "falls_back", "said"),
    [
        ("", True, "No model server configured"),
        (f'[llm]\nbase_url = "{DEAD_URL}"\n', False, "not falling back"),
    ],
)
def test_unattended_only_an_unconfigured_server_is_replaced_by_the_demo_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, falls_back: bool, said: str
) -> None:
    """A configured server that is down is never swapped for a tiny model behind the
    operator's back (its replies, and the reflector's facts, would be the demo model's)."""
    path = tmp_path / "config.toml"
    path.write_text(toml, encoding="utf-8")
    assert unattended_fallback(load_config(path, env={})) is falls_back
    assert said in capsys.readouterr().err


PIP_OUTPUT = """\
Obtaining file:///work/mnemo
Collecting llama-cpp-python==0.3.36
  Downloading llama_cpp_python-0.3.36.tar.gz (76.6 MB)
Building wheels for collected packages: llama-cpp-python
  Building wheel for llama-cpp-python (pyproject.toml): started
  [1/4] Building C object vendor/llama.cpp/ggml/src/CMakeFiles/ggml-base.dir/ggml.c.o
  [2/4] Building CXX object vendor/llama.cpp/src/CMakeFiles/llama.dir/llama.cpp.o
  [4/4] Linking CXX shared library bin/libllama.so
Installing collected packages: llama-cpp-python
Successfully installed llama-cpp-python-0.3.36
"""


def test_progress_follows_the_build_steps_and_phases() -> None:
    logged: list[str] = []
    shown: list[str] = []
    follow(
        PIP_OUTPUT.splitlines(keepends=True),
        logged.append,
        lambda progress, elapsed: shown.append(progress.line(0)),
    )
    assert "".join(logged) == PIP_OUTPUT  # the log keeps everything
    assert shown[:2] == ["downloading, 0m00s", "building llama.cpp (once), 0m00s"]
    assert "building llama.cpp (once): 2/4 build steps (50%), 0m00s" in shown
    assert shown[-1] == "installing: 4/4 build steps (100%), 0m00s"


@pytest.mark.parametrize(
    ("line", "done", "total"),
    [("[ 37%] Building CXX object x.o", 37, 100), ("[12/150] Building CXX object y.o", 12, 150)],
)
def test_make_and_ninja_steps(line: str, done: int, total: int) -> None:
    progress = Progress()
    assert progress.read(line)
    assert (progress.done, progress.total) == (done, total)


def test_pip_installs_the_demo_extra_of_this_checkout_with_its_constraints() -> None:
    command = pip_command(REPO)
    assert command[-2:] == ["-e", f"{REPO}[demo]"]
    assert command[command.index("-c") + 1] == str(REPO / "constraints.txt")
    assert "-v" in command  # the build's steps are what the progress line reads


def test_llama_cpp_builds_portable_on_x86_64_and_with_its_defaults_elsewhere() -> None:
    # A native build on an AMX CPU dies at its first tile instruction where the kernel
    # grants no AMX state; x86-64 builds get GGML_NATIVE off (AVX2, FMA, F16C; no AMX).
    assert "-DGGML_NATIVE=OFF" in llama_cmake_args("x86_64").split()
    assert "-DGGML_NATIVE=OFF" in llama_cmake_args("AMD64").split()
    assert llama_cmake_args("aarch64") == ""
