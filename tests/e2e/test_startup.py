"""Start-up: a warm start never imports torch; a cold one exports at start, saying so."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from core.bench.fakes.fake_openai import FakeOpenAIServer
from memory.embeddings import Embedder
from tests.conftest import MNEMO, mnemo_env, write_config

HEAVY = ("torch", "sentence_transformers", "transformers")
STEPS_MADE_ONCE = [sys.executable, "-m", "tests.onnx_steps"]


def test_a_turn_with_the_cache_warm_imports_no_torch(
    tmp_path: Path, fake_llm: FakeOpenAIServer, embedder: Embedder
) -> None:
    """`embedder` made the session cache's export: the child only reads it."""
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data")
    result = subprocess.run(
        [*MNEMO[:1], "-X", "importtime", *MNEMO[1:], "--config", str(config), "chat"],
        input="remember: my dog is called Rex\nwhat is my dog called?\n",
        capture_output=True,
        text=True,
        timeout=120,
        env=mnemo_env(),
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == ["Noted. (memory #1)", "echo: what is my dog called?"]
    imported = {
        line.split("|")[-1].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "onnxruntime" in imported and "tokenizers" in imported  # it did embed
    assert not {name for name in imported if name.split(".")[0] in HEAVY}
    block = fake_llm.requests[-1]["messages"][-2]["content"]
    assert "[PROFILE] my dog is called Rex" in block  # ranked with the model, not without


def test_a_cold_start_exports_before_serving_and_says_so(
    tmp_path: Path, fake_llm: FakeOpenAIServer
) -> None:
    extra = "[terminal]\nenabled = false\n[reflector]\nenabled = false\n"
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data", extra)
    env = {**mnemo_env(), "MNEMO_CACHE_DIR": str(tmp_path / "empty-cache")}
    # `mnemo run` with the export's steps made once per test run (`tests/onnx_steps.py`): the
    # first process of the run to need a step makes it for real, this one or test_onnx's.
    process = subprocess.Popen(
        [*STEPS_MADE_ONCE, "--config", str(config), "--log-level", "WARNING", "run"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert process.stderr is not None
    lines: list[str] = []
    try:
        for line in process.stderr:
            lines.append(line.rstrip("\n"))
            if "No channel to run" in line:
                break
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=60)
    text = "\n".join(lines)
    assert "preparing the embedding model all-MiniLM-L6-v2" in text, text + rest
    ready = next(i for i, line in enumerate(lines) if "the embedding model is ready in" in line)
    assert ready < len(lines) - 1  # the export came before the bot started serving
    assert any(" s" in line and "int8 query model" in line for line in lines)
    exported = list((tmp_path / "empty-cache" / "onnx").glob("*/model.onnx"))
    assert len(exported) == 1 and os.path.getsize(exported[0]) > 1_000_000
