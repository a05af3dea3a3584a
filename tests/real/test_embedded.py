"""The first run with no model server: Mnemo starts the embedded demo model (a real
llama-cpp-python serving SmolLM2-135M), answers through it, knows its window before the
first turn, labels it, and stops it when the command ends."""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from core.config import EmbeddedConfig
from core.model.embedded import DEFAULT_ALIAS, embedded_missing
from tests.conftest import run_mnemo

pytestmark = pytest.mark.real


@pytest.fixture
def no_server_config(tmp_path: Path) -> Path:
    """A fresh machine: no model server configured (the default, Ollama's port, has none;
    `[embedded] use` is its default, "auto"), so Mnemo must fall back on its own."""
    if listening(11434):
        pytest.fail("something serves on :11434; this test needs a machine without", pytrace=False)
    missing = embedded_missing(EmbeddedConfig())
    if missing:
        pytest.fail(f"the embedded demo model is not installed: {missing}", pytrace=False)
    path = tmp_path / "config.toml"
    path.write_text(
        f'[llm]\nmax_retries = 0\n[embedded]\nuse = "auto"\n'
        f'[storage]\ndata_dir = "{tmp_path / "data"}"\n[reflector]\nenabled = false\n',
        encoding="utf-8",
    )
    return path


def served_port(data_dir: Path) -> int:
    log = (data_dir / "logs" / "embedded-model.log").read_text(encoding="utf-8", errors="replace")
    found = re.search(r"Uvicorn running on http://127\.0\.0\.1:(\d+)", log)
    assert found, log[-2000:]
    return int(found.group(1))


def listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_chat_answers_through_the_embedded_model_and_stops_it(
    no_server_config: Path, tmp_path: Path
) -> None:
    done = run_mnemo(["chat"], no_server_config, stdin="Hello! Who are you?\n", timeout=900)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), done.stderr  # an answer came back
    assert "Sorry, the model is unavailable" not in done.stdout
    assert f"Using the embedded demo model {DEFAULT_ALIAS} (2,048-token window)" in done.stderr
    assert "tiny model for trying Mnemo out" in done.stderr and "mnemo init" in done.stderr
    assert not listening(served_port(tmp_path / "data"))  # stopped with Mnemo


def test_doctor_knows_the_window_and_the_served_id(no_server_config: Path) -> None:
    text = no_server_config.read_text(encoding="utf-8").replace('use = "auto"', 'use = "on"')
    no_server_config.write_text(text, encoding="utf-8")
    done = run_mnemo(["doctor"], no_server_config, timeout=900)
    assert "Traceback" not in done.stderr, done.stderr
    assert f"embedded model: {DEFAULT_ALIAS} serving at http://127.0.0.1:" in done.stdout
    assert "2048 tokens (embedded server (--n_ctx))" in done.stdout, done.stdout
    assert f"{DEFAULT_ALIAS} is served" in done.stdout, done.stdout
