"""Typed configuration: TOML file into pydantic models, secrets from the environment.

Load once at the entry point with `load_config()` and pass the result down. Every
default here is documented in `config.example.toml` (a test keeps the two in step).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from core.errors import ConfigError

ENV_OVERRIDES = {
    "OPENAI_API_KEY": ("llm", "api_key"),
    "OPENAI_BASE_URL": ("llm", "base_url"),
    "TELEGRAM_BOT_TOKEN": ("telegram", "token"),
    "DISCORD_BOT_TOKEN": ("discord", "token"),
    "MNEMO_WEB_TOKEN": ("web", "token"),
}


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


class StorageConfig(Section):
    data_dir: Path = Path("data")

    @property
    def database_path(self) -> Path:
        return self.data_dir / "mnemo.db"


class AgentConfig(Section):
    name: str = "Mnemo"
    instructions: str = "You are a helpful assistant with a long-term memory."
    max_tool_iterations: int = Field(default=8, ge=1, le=100)
    control_chats: list[str] = Field(default_factory=list)
    max_reply_chars: int = Field(default=12_000, ge=200)

    @field_validator("control_chats")
    @classmethod
    def _chat_keys(cls, keys: list[str]) -> list[str]:
        """Control chats are matched by their exact `channel:chat_id` key, so a bare id (which
        would match nothing) is an error here rather than a silent no-op."""
        for key in keys:
            channel, sep, chat_id = key.partition(":")
            if not (sep and channel and chat_id):
                raise ValueError(f"{key!r} is not a channel:chat_id key (e.g. telegram:12345)")
        return keys


class MemoryConfig(Section):
    embedding_model: str = ""
    query_precision: Literal["int8", "float32"] = "int8"
    retriever: Literal["hybrid", "knn", "bm25", "jaccard"] = "hybrid"
    token_budget: int = Field(default=1500, ge=0)
    file_scope_max_chars: int = Field(default=20_000, ge=100)
    file_total_max_chars: int = Field(default=50_000, ge=100)


class ReflectorConfig(Section):
    enabled: bool = True
    interval_mins: float = Field(default=15, gt=0)
    batch_messages: int = Field(default=200, ge=1)
    model: str = ""
    lease_s: int = Field(default=600, ge=10)
    confidence_floor: float = Field(default=0.3, ge=0, le=1)
    max_attempts: int = Field(default=3, ge=1)


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


class TerminalConfig(Section):
    enabled: bool | None = None  # None: on when stdin is a terminal
    chat_id: str = "local"


class TelegramConfig(Section):
    enabled: bool = True
    token: str = ""
    api_base_url: str = "https://api.telegram.org/bot"
    api_file_url: str = "https://api.telegram.org/file/bot"
    allowed_user_ids: list[int] = Field(default_factory=list)
    allowed_chat_ids: list[int] = Field(default_factory=list)
    reply_in_groups: Literal["mention", "all"] = "mention"
    allowed_users_in_groups: bool = True  # allowed_user_ids also decides who is answered in groups
    webhook_url: str = ""
    webhook_listen: str = "127.0.0.1"
    webhook_port: int = Field(default=8443, gt=0, lt=65536)
    # Telegram allows 1-256 of A-Z a-z 0-9 _ - ; empty: a random one per start.
    webhook_secret: str = Field(default="", pattern=r"^[A-Za-z0-9_-]{0,256}$")


class DiscordConfig(Section):
    enabled: bool = True
    token: str = ""
    allowed_guild_ids: list[int] = Field(default_factory=list)
    allowed_channel_ids: list[int] = Field(default_factory=list)
    allowed_user_ids: list[int] = Field(default_factory=list)
    reply_in_guilds: Literal["mention", "all"] = "mention"
    command_prefix: str = "!"


class WebConfig(Section):
    """The operator's dashboard (`mnemo web`, or inside `mnemo run` when enabled)."""

    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = Field(default=8765, gt=0, lt=65536)
    token: str = ""  # empty: a random one per start, printed then


class LoggingConfig(Section):
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"


class Config(Section):
    llm: LLMConfig = Field(default_factory=LLMConfig)
    storage: StorageConfig = Field(default_factory=StorageConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    reflector: ReflectorConfig = Field(default_factory=ReflectorConfig)
    context: ContextConfig = Field(default_factory=ContextConfig)
    terminal: TerminalConfig = Field(default_factory=TerminalConfig)
    telegram: TelegramConfig = Field(default_factory=TelegramConfig)
    discord: DiscordConfig = Field(default_factory=DiscordConfig)
    web: WebConfig = Field(default_factory=WebConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)


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
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, source)) from exc
