"""Real llama-cpp-python servers (SmolLM2-135M) for the real-server tier (`make test-real`).

One server of each kind per test session, each on its own free port: the GGUF's own chat
template with n_ctx 2048; a copy whose template refuses a non-leading system message; and
`chatml-function-calling` for tools. A server keeps one KV slot and serves one request at
a time, so tests that share a server run one after the other, as pytest runs them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from bots.plugins import PLUGINS
from bots.runtime import Runtime, build_runtime
from core.bench.fakes.llama_server import (
    MODEL_ALIAS,
    LlamaServer,
    RealServerUnavailable,
    llama_server,
    require_real_extra,
    smollm2_gguf,
    strict_template_gguf,
)
from core.config import Config
from core.turn.hooks import Plugin
from tests.conftest import make_config

N_CTX = 2048
REQUEST_TIMEOUT_S = 300.0
MAX_OUTPUT_TOKENS = 128  # a 135M model rambles: keep each turn to seconds


@pytest.fixture(scope="session")
def gguf() -> Path:
    try:
        require_real_extra()
        return smollm2_gguf()
    except RealServerUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llama-logs")


@pytest.fixture(scope="session")
def default_server(gguf: Path, logs: Path) -> Iterator[LlamaServer]:
    """The GGUF's own template (accepts a late system message), n_ctx 2048."""
    with llama_server(gguf, logs, n_ctx=N_CTX, name="default") as server:
        yield server


@pytest.fixture(scope="session")
def strict_server(gguf: Path, logs: Path) -> Iterator[LlamaServer]:
    """A template that raises "System message must be at the beginning." (Mistral-style)."""
    with llama_server(strict_template_gguf(gguf), logs, n_ctx=N_CTX, name="strict") as server:
        yield server


@pytest.fixture(scope="session")
def tools_server(gguf: Path, logs: Path) -> Iterator[LlamaServer]:
    """`--chat_format chatml-function-calling`: tool calls parsed from the model's output."""
    with llama_server(
        gguf, logs, n_ctx=N_CTX, chat_format="chatml-function-calling", name="tools"
    ) as server:
        yield server


def real_config(data_dir: Path, server: LlamaServer, **sections: dict[str, object]) -> Config:
    """A config for `server`: `[llm] context_window` unset, as a new user leaves it."""
    config = make_config(data_dir, server.base_url, **sections)
    config.llm.model = MODEL_ALIAS
    config.llm.timeout_s = REQUEST_TIMEOUT_S
    config.llm.max_output_tokens = MAX_OUTPUT_TOKENS
    return config


RuntimeFactory = Callable[..., AbstractAsyncContextManager[Runtime]]


@pytest.fixture
def real_runtime(tmp_path: Path) -> RuntimeFactory:
    """`async with real_runtime(server, **sections) as runtime:` every plugin (or those given
    as `plugins=`), started."""

    @asynccontextmanager
    async def start(
        server: LlamaServer, plugins: Sequence[Plugin] = PLUGINS, **sections: dict[str, object]
    ) -> AsyncIterator[Runtime]:
        runtime = build_runtime(real_config(tmp_path / "data", server, **sections), plugins)
        await runtime.start()
        try:
            yield runtime
        finally:
            await runtime.llm.aclose()
            runtime.close()

    return start


def write_real_config(
    path: Path, server: LlamaServer, data_dir: Path, max_output_tokens: int = MAX_OUTPUT_TOKENS
) -> Path:
    """A config.toml for `mnemo` subprocesses against `server`."""
    path.write_text(
        f'[llm]\nbase_url = "{server.base_url}"\nmodel = "{MODEL_ALIAS}"\nmax_retries = 0\n'
        f"timeout_s = {REQUEST_TIMEOUT_S}\nmax_output_tokens = {max_output_tokens}\n"
        f'[storage]\ndata_dir = "{data_dir}"\n',
        encoding="utf-8",
    )
    return path
