"""(e) `mnemo doctor` against each real server."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.bench.fakes.llama_server import LlamaServer
from tests.conftest import run_mnemo
from tests.real.conftest import write_real_config

pytestmark = pytest.mark.real


def doctor(server: LlamaServer, tmp_path: Path) -> tuple[int, str]:
    config = write_real_config(tmp_path / "config.toml", server, tmp_path / "data")
    result = run_mnemo(["doctor"], config, timeout=600)
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stdout


def test_doctor_passes_on_the_ggufs_own_template(
    default_server: LlamaServer, tmp_path: Path
) -> None:
    code, out = doctor(default_server, tmp_path)
    assert code == 0, out
    assert "[ok  ] llm" in out


def test_doctor_names_the_strict_template_and_still_passes(
    strict_server: LlamaServer, tmp_path: Path
) -> None:
    """Mnemo works there (the context moves into the user message): a warning, not a fail."""
    code, out = doctor(strict_server, tmp_path)
    assert code == 0, out
    assert "system message" in out.lower(), out


def test_doctor_passes_on_chatml_function_calling(
    tools_server: LlamaServer, tmp_path: Path
) -> None:
    code, out = doctor(tools_server, tmp_path)
    assert code == 0, out
    assert "tool" in out.lower(), out


def test_doctor_fails_when_the_server_is_gone(default_server: LlamaServer, tmp_path: Path) -> None:
    config = write_real_config(tmp_path / "config.toml", default_server, tmp_path / "data")
    text = config.read_text(encoding="utf-8")
    config.write_text(text.replace(default_server.base_url, "http://127.0.0.1:9/v1"), "utf-8")
    result = run_mnemo(["doctor"], config, timeout=600)
    assert result.returncode == 1 and "[FAIL] llm" in result.stdout, result.stdout
