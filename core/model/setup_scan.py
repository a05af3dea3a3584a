"""What `mnemo init` finds: model servers on this machine (Ollama, llama.cpp, vLLM, any
OpenAI-compatible one, a hosted API behind OPENAI_API_KEY) with their models and real
windows, and whether a Telegram or Discord bot token works.

Every probe is a short GET (or Ollama's POST /api/show) on the server's own endpoints;
a server that does not answer is simply not found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from core.config import LLMConfig
from core.model.discovery import ollama_facts, probe_json, server_facts, server_root
from core.model.profile import hosted_window

if TYPE_CHECKING:
    import httpx

LOCAL_SERVERS = (
    "http://localhost:11434",  # Ollama
    "http://localhost:8080",  # llama.cpp's llama-server
    "http://localhost:8000",  # vLLM
)
OPENAI_URL = "https://api.openai.com/v1"
DISCORD_API_URL = "https://discord.com/api/v10"
MAX_MODELS = 12
HOSTED_PREFERRED = ("gpt-4.1-mini", "gpt-4o-mini", "gpt-4.1", "gpt-4o")
_DISCORD_CONTENT_INTENT = (1 << 18) | (1 << 19)  # GATEWAY_MESSAGE_CONTENT(_LIMITED)


@dataclass(frozen=True)
class ServedModel:
    id: str
    window: int | None = None
    window_source: str = ""

    def describe(self) -> str:
        if self.window is None:
            return f"{self.id} (window not reported; learned from the first overflow)"
        return f"{self.id} ({self.window:,}-token window, {self.window_source})"


@dataclass(frozen=True)
class FoundServer:
    base_url: str  # the OpenAI-compatible URL, ending in /v1
    kind: str  # "ollama", "llama.cpp", "vllm", "llama-cpp-python", "openai-compatible"
    models: tuple[ServedModel, ...]
    api_key_env: str = ""  # the variable holding its key ("" = none needed)


async def scan_server(client: httpx.AsyncClient, url: str, api_key: str = "") -> FoundServer | None:
    """What the server at `url` (with or without /v1) serves; None when nothing answers."""
    root = server_root(url)
    tags = await probe_json(client, f"{root}/api/tags")
    if isinstance(tags, dict) and isinstance(tags.get("models"), list):
        return await _ollama(client, root, tags["models"])
    listed = await probe_json(client, f"{root}/v1/models")
    if not isinstance(listed, dict) or not isinstance(listed.get("data"), list):
        return None
    entries = [entry for entry in listed["data"] if isinstance(entry, dict) and entry.get("id")]
    llm = LLMConfig(base_url=f"{root}/v1", api_key=api_key or "no-key")
    models: list[ServedModel] = []
    kind = "openai-compatible"
    for entry in entries[:MAX_MODELS]:
        facts = await server_facts(client, llm, str(entry["id"]))
        kind = facts.kind
        models.append(ServedModel(str(entry["id"]), facts.window, facts.window_source))
    if kind == "openai-compatible" and entries and entries[0].get("owned_by") == "me":
        kind = "llama-cpp-python"  # its /v1/models says only this; its window is not told
    return FoundServer(f"{root}/v1", kind, tuple(models))


async def _ollama(client: httpx.AsyncClient, root: str, tags: list[Any]) -> FoundServer:
    models = []
    for tag in tags[:MAX_MODELS]:
        name = str(tag.get("name") or tag.get("model") or "") if isinstance(tag, dict) else ""
        if name:
            window, source, _ = await ollama_facts(client, root, name)
            models.append(ServedModel(name, window, source))
    return FoundServer(f"{root}/v1", "ollama", tuple(models))


async def scan_hosted(client: httpx.AsyncClient, base_url: str, api_key: str) -> FoundServer | None:
    """The chat models a hosted API offers this key (None: the key or the URL does not work)."""
    import httpx

    try:
        response = await client.get(
            f"{base_url.rstrip('/')}/models",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=10,
        )
        listed = response.json() if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    if not isinstance(listed, dict) or not isinstance(listed.get("data"), list):
        return None
    ids = sorted(str(entry.get("id")) for entry in listed["data"] if isinstance(entry, dict))
    ranked = [name for name in HOSTED_PREFERRED if name in ids]
    ranked += [name for name in ids if name not in ranked and hosted_window(name)]
    ranked = ranked or ids
    models = tuple(ServedModel(name, hosted_window(name), "known model") for name in ranked)
    return FoundServer(base_url.rstrip("/"), "hosted", models[:MAX_MODELS], "OPENAI_API_KEY")


@dataclass(frozen=True)
class TokenCheck:
    ok: bool
    detail: str


async def check_telegram(client: httpx.AsyncClient, api_base_url: str, token: str) -> TokenCheck:
    """getMe: the bot's name, and its privacy mode (what it sees in groups)."""
    body = await _get(client, f"{api_base_url}{token}/getMe")
    if not isinstance(body, dict) or not body.get("ok") or not isinstance(body.get("result"), dict):
        said = body.get("description") if isinstance(body, dict) else None
        return TokenCheck(False, f"Telegram refused the token ({said or 'no answer'})")
    me = body["result"]
    if me.get("can_read_all_group_messages"):
        privacy = "privacy mode off: it reads every message in its groups"
    else:
        privacy = (
            "privacy mode on: in groups it sees only commands, replies to it and mentions "
            '(turn it off with /setprivacy in @BotFather to use reply_in_groups = "all")'
        )
    return TokenCheck(True, f"@{me.get('username', '?')}: {privacy}")


async def check_discord(client: httpx.AsyncClient, api_base_url: str, token: str) -> TokenCheck:
    """GET /users/@me: the bot's name; GET /applications/@me: its message content intent."""
    headers = {"Authorization": f"Bot {token}"}
    me = await _get(client, f"{api_base_url.rstrip('/')}/users/@me", headers)
    if not isinstance(me, dict) or not me.get("id"):
        said = me.get("message") if isinstance(me, dict) else None
        return TokenCheck(False, f"Discord refused the token ({said or 'no answer'})")
    app = await _get(client, f"{api_base_url.rstrip('/')}/applications/@me", headers)
    flags = app.get("flags") if isinstance(app, dict) else None
    if not isinstance(flags, int):
        intent = "message content intent: unknown"
    elif flags & _DISCORD_CONTENT_INTENT:
        intent = "message content intent on"
    else:
        intent = (
            "message content intent OFF: mentions, DMs and slash commands work; to read all"
            " guild messages turn it on (Developer Portal → Bot → Message Content Intent)"
            " and set [discord] message_content_intent = true"
        )
    return TokenCheck(True, f"{me.get('username', '?')}: {intent}")


async def _get(client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None) -> Any:
    import httpx

    try:
        response = await client.get(url, headers=headers, timeout=10)
        return response.json()
    except (httpx.HTTPError, ValueError):
        return None
