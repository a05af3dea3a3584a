"""`mnemo init`: a guided setup that writes config.toml.

It looks for a model server (Ollama :11434, llama.cpp :8080, vLLM :8000, a hosted API
behind OPENAI_API_KEY), lists what each serves with its real window, and offers the
embedded demo model when nothing is there; it checks Telegram and Discord tokens. It
never replaces an existing file unless asked (or `--force`); the old one is kept as
`.bak`. `--yes` answers every question with its default, for scripts and `make run`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from core.config import load_config
from core.errors import MnemoError
from core.model.setup_scan import (
    DISCORD_API_URL,
    LOCAL_SERVERS,
    OPENAI_URL,
    FoundServer,
    ServedModel,
    TokenCheck,
    check_discord,
    check_telegram,
    scan_hosted,
    scan_server,
)

if TYPE_CHECKING:
    import httpx

TELEGRAM_API_URL = "https://api.telegram.org/bot"


@dataclass(frozen=True)
class ModelChoice:
    """The model the config will use (`server` None: the embedded demo model)."""

    server: FoundServer | None = None
    model: ServedModel | None = None

    def describe(self) -> str:
        if self.server is None or self.model is None:
            return "the embedded demo model (SmolLM2-135M, tiny; for trying Mnemo out)"
        return f"{self.model.describe()} on {self.server.kind} at {self.server.base_url}"


@dataclass(frozen=True)
class InitOptions:
    """What the command line asked for."""

    yes: bool = False
    force: bool = False
    model_url: str | None = None
    model_name: str | None = None
    embedded: bool = False
    scan_urls: tuple[str, ...] = ()
    telegram_token: str | None = None
    discord_token: str | None = None
    telegram_api_url: str = TELEGRAM_API_URL
    discord_api_url: str = DISCORD_API_URL
    data_dir: str = "data"


@dataclass(frozen=True)
class Answers:
    model: ModelChoice
    telegram_token: str = ""  # "" also when it comes from the environment (not written)
    discord_token: str = ""
    data_dir: str = "data"


@click.command("init")
@click.option("--yes", "-y", is_flag=True, help="Take every default; ask nothing (scripts).")
@click.option("--force", is_flag=True, help="Replace an existing config file (kept as .bak).")
@click.option("--model-url", default=None, help="Use the server at this URL (no scan).")
@click.option("--model", "model_name", default=None, help="The model (default: the first).")
@click.option("--embedded", is_flag=True, help="Use the embedded demo model.")
@click.option("--scan", "scan_urls", multiple=True, help="Where to look for servers.")
@click.option("--telegram-token", default=None, help="A bot token from @BotFather.")
@click.option("--discord-token", default=None, help="A bot token from the Developer Portal.")
@click.option("--telegram-api-url", default=TELEGRAM_API_URL, hidden=True)
@click.option("--discord-api-url", default=DISCORD_API_URL, hidden=True)
@click.option("--data-dir", default="data", help="Where the database and chat files go.")
@click.pass_context
def init_command(ctx: click.Context, /, **params: object) -> None:
    """Write config.toml: find a model server (or the embedded demo model), check bot tokens."""
    options = InitOptions(**params)  # type: ignore[arg-type]
    interactive = sys.stdin.isatty() and not options.yes
    target = config_target(getattr(ctx.obj, "config_path", None))
    if target.exists() and not options.force:
        if not interactive:
            raise click.ClickException(f"{target} exists: pass --force to replace it")
        if not click.confirm(f"{target} exists. Replace it (kept as {target}.bak)?"):
            raise click.ClickException(f"{target} kept as it is")
    answers = asyncio.run(_gather(options, interactive))
    write_config(target, render_config(answers))
    click.echo(f"Wrote {target}. Uses {answers.model.describe()}.")
    click.echo(next_steps(answers))


def config_target(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    return Path(os.environ.get("MNEMO_CONFIG") or "config.toml")


async def _gather(options: InitOptions, interactive: bool) -> Answers:
    import httpx

    async with httpx.AsyncClient() as client:
        model = await choose_model(client, options, interactive)

        def telegram(token: str) -> Awaitable[TokenCheck]:
            return check_telegram(client, options.telegram_api_url, token)

        def discord(token: str) -> Awaitable[TokenCheck]:
            return check_discord(client, options.discord_api_url, token)

        tg_token = await _token(
            "Telegram", "TELEGRAM_BOT_TOKEN", options.telegram_token, interactive, telegram
        )
        dc_token = await _token(
            "Discord", "DISCORD_BOT_TOKEN", options.discord_token, interactive, discord
        )
    return Answers(model, tg_token, dc_token, options.data_dir)


async def choose_model(
    client: httpx.AsyncClient, options: InitOptions, interactive: bool
) -> ModelChoice:
    """The server and model to use: as asked, else the scan's first find (or a pick)."""
    if options.embedded:
        return ModelChoice()
    if options.model_url:
        key = os.environ.get("OPENAI_API_KEY", "")
        found = await scan_server(client, options.model_url, key)
        if found is None:
            raise click.ClickException(f"no model server answers at {options.model_url}")
        click.echo(f"  {options.model_url}: {_listing(found)}")
        servers = [found]
    else:
        servers = await find_servers(client, options.scan_urls)
    while not servers and interactive:
        url = click.prompt(
            "URL of a model server (blank: the embedded demo model)", default="", show_default=False
        )
        found = await scan_server(client, url) if url else None
        if not url:
            break
        click.echo(f"  {url}: " + (_listing(found) if found else "nothing"))
        servers = [found] if found is not None and found.models else []
    return pick_model(servers, options.model_name, interactive)


async def find_servers(client: httpx.AsyncClient, urls: tuple[str, ...]) -> list[FoundServer]:
    """Every server that answers among `urls` (default: the usual local ports), then the
    hosted API when OPENAI_API_KEY is set; each is printed as it is found."""
    found: list[FoundServer] = []
    click.echo("Looking for a model server …")
    for url in urls or LOCAL_SERVERS:
        server = await scan_server(client, url)
        click.echo(f"  {url}: " + (_listing(server) if server else "nothing"))
        if server is not None and server.models:
            found.append(server)
    key = os.environ.get("OPENAI_API_KEY", "")
    if key:
        hosted_url = os.environ.get("OPENAI_BASE_URL") or OPENAI_URL
        hosted = await scan_hosted(client, hosted_url, key)
        said = _listing(hosted) if hosted else "the key does not work there"
        click.echo(f"  {hosted_url} (OPENAI_API_KEY): {said}")
        if hosted is not None and hosted.models:
            found.append(hosted)
    return found


def _listing(server: FoundServer) -> str:
    if not server.models:
        return f"{server.kind}, serving no model yet"
    lines = "".join(f"\n      {model.describe()}" for model in server.models)
    return f"{server.kind}, serving:{lines}"


def pick_model(servers: list[FoundServer], wanted: str | None, interactive: bool) -> ModelChoice:
    options = [ModelChoice(s, m) for s in servers for m in s.models]
    if wanted:
        names = (wanted, f"{wanted}:latest")
        named = [o for o in options if o.model is not None and o.model.id in names]
        if not named and len(servers) == 1:  # a server that serves whatever it is asked for
            named = [ModelChoice(servers[0], ServedModel(wanted))]
        if not named:
            raise click.ClickException(f"no server found serves {wanted!r}")
        return named[0]
    if not options:
        click.echo("No model server found: the embedded demo model it is.")
        return ModelChoice()
    options.append(ModelChoice())
    if not interactive:
        return options[0]
    for number, option in enumerate(options, 1):
        click.echo(f"  {number}. {option.describe()}")
    number = click.prompt("Which model?", type=click.IntRange(1, len(options)), default=1)
    return options[number - 1]


async def _token(
    name: str,
    env_name: str,
    given: str | None,
    interactive: bool,
    check: Callable[[str], Awaitable[TokenCheck]],
) -> str:
    """A checked token to write ('' when none, or when it comes from `env_name`)."""
    from_env = os.environ.get(env_name, "")
    token = str(given or "")
    if not token and from_env:
        result = await check(from_env)
        click.echo(f"{name} ({env_name}): {result.detail}")
        return ""
    while True:
        if not token and interactive:
            token = click.prompt(
                f"{name} bot token (blank: none)", default="", show_default=False, hide_input=True
            )
        if not token:
            return ""
        result = await check(token)
        click.echo(f"{name}: {result.detail}")
        if result.ok:
            return token
        if not interactive:
            raise click.ClickException(f"{name}: {result.detail}; nothing was written")
        token = ""


def _toml(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def render_config(answers: Answers) -> str:
    """config.toml's text: only what init decided; the rest keeps its documented default."""
    lines = [
        "# Mnemo configuration, written by `mnemo init`. Every other setting, with its",
        "# default and meaning: config.example.toml.",
        "",
    ]
    choice = answers.model
    if choice.server is not None and choice.model is not None:
        lines += ["[llm]", f"base_url = {_toml(choice.server.base_url)}"]
        lines.append(f"model = {_toml(choice.model.id)}")
        if choice.server.api_key_env:
            lines.append(f"# api_key: from {choice.server.api_key_env} in the environment")
        if choice.model.window:
            lines.append(
                f"# The server reports a {choice.model.window}-token window "
                f"({choice.model.window_source}); Mnemo asks again at each start."
            )
        lines += ["", "[embedded]", 'use = "off"  # a real server is configured', ""]
    else:
        lines += ["[embedded]", 'use = "on"  # the tiny demo model Mnemo starts itself', ""]
    lines += ["[storage]", f"data_dir = {_toml(answers.data_dir)}", ""]
    if answers.telegram_token:
        lines += ["[telegram]", f"token = {_toml(answers.telegram_token)}", ""]
    if answers.discord_token:
        lines += ["[discord]", f"token = {_toml(answers.discord_token)}", ""]
    return "\n".join(lines)


def write_config(target: Path, text: str) -> None:
    """Check the text loads as a config, keep the old file as .bak, then replace it."""
    partial = target.with_name(f".{target.name}.partial")
    partial.write_text(text, encoding="utf-8")
    partial.chmod(0o600)  # it may hold bot tokens
    try:
        load_config(partial, env={})
    except MnemoError as exc:
        partial.unlink()
        raise click.ClickException(f"the config made does not load ({exc}); not written") from exc
    if target.exists():
        target.replace(target.with_name(target.name + ".bak"))
    partial.replace(target)


def next_steps(answers: Answers) -> str:
    chat = (
        "Talk to it here: `.venv/bin/mnemo chat` (or `source .venv/bin/activate`, "
        "then `mnemo chat`)."
    )
    if answers.model.server is None:
        chat += "\nThe embedded model installs once: `mnemo embedded install` (`make run` does it)."
    return chat + "\nRun the bot on every channel: `make run` (or `mnemo run`)."
