"""Ask the model server what it is serving: the context window, where it can tell.

- llama.cpp's llama-server: `GET /props` → `default_generation_settings.n_ctx`.
- vLLM: `GET /v1/models` → the model's `max_model_len`.
- Ollama: `GET /api/ps` → a loaded model's `context_length`; else `POST /api/show` →
  `num_ctx` in its parameters; else Ollama's default (4,096 whatever the model was
  trained for, which is why the README tells Ollama users about `num_ctx`).
  `/api/show` also lists the model's capabilities (tools).
- Every server: the model's id as it reports it (`ServerFacts.served_model`), kept in the
  model's profile as the label to show.
- llama-cpp-python and hosted APIs say nothing here: the window is then learned from the
  first overflow error (`core.turn.agent`), or comes from the known hosted-model table.

Every probe is short and optional: a server that answers none of them is not an error.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.config import LLMConfig
from core.model.profile import ModelProfile, ProfileStore, learn, load_profile

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

PROBE_TIMEOUT_S = 3.0
OLLAMA_DEFAULT_CTX = 4_096


@dataclass(frozen=True)
class ServerFacts:
    """What the server said about the model (None: it did not say)."""

    window: int | None = None
    window_source: str = ""
    served_models: tuple[str, ...] | None = None  # None: no model list
    tools: bool | None = None
    kind: str = "openai-compatible"  # "llama.cpp", "ollama", "vllm", …

    def serves(self, model: str) -> bool | None:
        """Whether `model` is in the server's list (None: cannot tell)."""
        if self.served_models is None:
            return None
        # llama.cpp (and llama-cpp-python) serve their one model whatever name is asked.
        if self.kind != "ollama" and (self.kind == "llama.cpp" or len(self.served_models) == 1):
            return True if model in self.served_models else None
        bare = {name.removesuffix(":latest") for name in self.served_models}
        return model in self.served_models or model.removesuffix(":latest") in bare

    def served_model(self, model: str) -> str | None:
        """The id the server reports for what it serves when asked for `model` (the label
        to show, e.g. llama.cpp's one model whatever `[llm] model` says); None: unknown."""
        names = self.served_models or ()
        for name in (model, f"{model}:latest") if self.kind == "ollama" else (model,):
            if name in names:
                return name
        if self.kind != "ollama" and (self.kind == "llama.cpp" or len(names) == 1) and names:
            return names[0]
        return None


def server_root(base_url: str) -> str:
    """`http://host:port/v1` → `http://host:port` (where /props and /api/* live)."""
    root = base_url.rstrip("/")
    return root[: -len("/v1")] if root.endswith("/v1") else root


async def _get_json(client: httpx.AsyncClient, url: str) -> Any:
    response = await client.get(url, timeout=PROBE_TIMEOUT_S)
    return response.json() if response.status_code == 200 else None


async def _post_json(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> Any:
    response = await client.post(url, json=body, timeout=PROBE_TIMEOUT_S)
    return response.json() if response.status_code == 200 else None


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


async def probe_json(
    client: httpx.AsyncClient, url: str, body: dict[str, Any] | None = None
) -> Any:
    import httpx

    try:
        if body is None:
            return await _get_json(client, url)
        return await _post_json(client, url, body)
    except (httpx.HTTPError, ValueError):
        return None


async def _llama_cpp_window(client: httpx.AsyncClient, root: str) -> int | None:
    props = await probe_json(client, f"{root}/props")
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    window = _positive_int(settings.get("n_ctx")) if isinstance(settings, dict) else None
    return window or _positive_int(props.get("n_ctx"))


def _model_entry(models: Any, model: str) -> tuple[tuple[str, ...] | None, dict[str, Any]]:
    if not isinstance(models, dict) or not isinstance(models.get("data"), list):
        return None, {}
    entries = [entry for entry in models["data"] if isinstance(entry, dict)]
    names = tuple(str(entry.get("id", "")) for entry in entries)
    match = next((entry for entry in entries if entry.get("id") == model), {})
    return names, match


async def ollama_facts(
    client: httpx.AsyncClient, root: str, model: str
) -> tuple[int | None, str, bool | None]:
    """(window, source, tools) from Ollama's own API, or (None, "", None) if not Ollama."""
    show = await probe_json(client, f"{root}/api/show", {"model": model})
    if not isinstance(show, dict):
        return None, "", None
    capabilities = show.get("capabilities")
    tools = "tools" in capabilities if isinstance(capabilities, list) else None
    running = await probe_json(client, f"{root}/api/ps")
    for entry in (running or {}).get("models", []) if isinstance(running, dict) else []:
        if isinstance(entry, dict) and entry.get("name") in (model, f"{model}:latest"):
            window = _positive_int(entry.get("context_length"))
            if window:
                return window, "Ollama /api/ps (loaded model)", tools
    for line in str(show.get("parameters") or "").splitlines():
        key, _, value = line.strip().partition(" ")
        if key == "num_ctx" and value.strip().isdigit():
            return int(value.strip()), "Ollama num_ctx of the model", tools
    return OLLAMA_DEFAULT_CTX, "Ollama default num_ctx (set OLLAMA_CONTEXT_LENGTH)", tools


async def server_facts(client: httpx.AsyncClient, llm: LLMConfig, model: str) -> ServerFacts:
    """Ask the server at `llm.base_url` what it can say about `model`."""
    root = server_root(llm.base_url)
    names, entry = _model_entry(
        await probe_json(client, f"{llm.base_url.rstrip('/')}/models"), model
    )
    window = await _llama_cpp_window(client, root)
    if window:
        return ServerFacts(window, "server /props (n_ctx)", names, kind="llama.cpp")
    vllm = _positive_int(entry.get("max_model_len"))
    if vllm:
        return ServerFacts(vllm, "server /v1/models (max_model_len)", names, kind="vllm")
    ollama_window, source, tools = await ollama_facts(client, root, model)
    if ollama_window:
        return ServerFacts(ollama_window, source, names, tools, kind="ollama")
    if isinstance(await probe_json(client, f"{root}/api/version"), dict):
        return ServerFacts(served_models=names, kind="ollama")  # Ollama without this model
    return ServerFacts(served_models=names)


async def discover(
    client: httpx.AsyncClient, store: ProfileStore, llm: LLMConfig, model: str
) -> tuple[ServerFacts, ModelProfile]:
    """Ask the server and remember what it said about `model` (config still wins)."""
    facts = await server_facts(client, llm, model)
    changes: dict[str, Any] = {}
    if facts.window:
        changes.update(window=facts.window, window_source=facts.window_source)
    if facts.tools is False:
        changes["tools"] = False
    served_model = facts.served_model(model)
    if served_model:
        changes["served_model"] = served_model
    profile = learn(store, model, **changes) if changes else load_profile(store, model)
    if llm.context_window and facts.window and facts.window != llm.context_window:
        logger.warning(
            "[llm] context_window is %d but the server says %d (%s)",
            llm.context_window,
            facts.window,
            facts.window_source,
        )
    return facts, profile
