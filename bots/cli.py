"""The `mnemo` command: chat, run, doctor, bench, and every plugin's subcommands."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from bots.embedded_cli import embedded_group, serving_model
from bots.init_cli import init_command
from bots.runtime import PLUGINS, Runtime, build_runtime, configure_logging
from bots.storage_cli import storage_group
from bots.terminal import TerminalChannel
from core.api import Check
from core.config import Config, load_config, resolve_config_path
from core.doctor import llm_setup_hint, storage_checks
from core.embedded_model import EmbeddedServer, remember_window
from core.errors import EmbeddedModelError, LLMError, MnemoError
from core.probes import model_checks


class Context:
    """What the root group passes to subcommands: the config path, loaded on demand."""

    def __init__(self, config_path: Path | None) -> None:
        self.config_path = config_path
        self._config: Config | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            self._config = load_config(self.config_path)
        return self._config

    def runtime(self) -> Runtime:
        return build_runtime(self.config)


pass_context = click.make_pass_decorator(Context)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    default=None,
    help="Config file (default: $MNEMO_CONFIG, else ./config.toml if present).",
)
@click.option(
    "--log-level",
    default=None,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
@click.version_option(package_name="mnemo")
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, log_level: str | None) -> None:
    """Mnemo: a chat-bot platform with long-term memory."""
    context = Context(resolve_config_path(config_path))
    ctx.obj = context
    if ctx.invoked_subcommand in (None, "help"):
        return
    level = (log_level or "").upper() or None
    if level is None and ctx.invoked_subcommand == "chat":
        level = "WARNING"  # keep the conversation readable; --log-level overrides
    try:
        configure_logging(level or context.config.logging.level)
    except MnemoError:
        configure_logging(level or "WARNING")


@cli.group(invoke_without_command=True)
@click.option("--chat-id", default=None, help="Terminal chat id (default: [terminal] chat_id).")
@click.pass_context
def chat(ctx: click.Context, chat_id: str | None) -> None:
    """Talk to the bot in this terminal (reads one message per line when piped); or
    export or delete a chat's data (`mnemo chat export|delete CHAT`)."""
    if ctx.invoked_subcommand is not None:
        return
    context = ctx.find_object(Context)
    assert context is not None  # the root group made it
    with serving_model(context.config, sys.stdin.isatty()) as (config, server):
        runtime = runtime_for(config, server)
        channel = TerminalChannel(chat_id or runtime.config.terminal.chat_id)
        try:
            asyncio.run(_chat(runtime, channel))
        finally:
            runtime.close()
    if runtime.llm.failed and not runtime.llm.answered:
        click.echo(
            f"mnemo: the model never answered in this session "
            f"({runtime.llm.failed} request(s) failed); `mnemo doctor` says why",
            err=True,
        )
        sys.exit(1)


@cli.command()
@pass_context
def run(context: Context) -> None:
    """Start every enabled channel and the reflector scheduler."""
    with serving_model(context.config, sys.stdin.isatty()) as (config, server):
        runtime = runtime_for(config, server)
        try:
            asyncio.run(_run(runtime))
        finally:
            runtime.close()


def runtime_for(config: Config, server: EmbeddedServer | None) -> Runtime:
    """The runtime on `config`; the embedded server's window is known before turn 1."""
    runtime = build_runtime(config)
    if server is not None:
        remember_window(runtime.store, server)
    return runtime


async def _chat(runtime: Runtime, channel: TerminalChannel) -> None:
    from bots.app import run_platform

    try:
        await runtime.llm.ping()
    except LLMError:
        click.echo(f"warning: {llm_setup_hint(runtime.config.llm.base_url)}", err=True)
    await runtime.start()
    await run_platform(runtime, [channel], services=[])


async def _run(runtime: Runtime) -> None:
    from bots.app import enabled_channels, run_platform

    try:
        await runtime.llm.ping()
    except LLMError:
        raise click.ClickException(llm_setup_hint(runtime.config.llm.base_url)) from None
    await runtime.start()
    channels = enabled_channels(runtime)
    if not channels:
        click.echo(
            "No channel to run: set TELEGRAM_BOT_TOKEN or DISCORD_BOT_TOKEN, or run "
            "in a terminal ([terminal] enabled). Running background services only.",
            err=True,
        )
    await run_platform(runtime, channels)


@cli.command()
@pass_context
def doctor(context: Context) -> None:
    """Check config, database, sqlite-vec and the model endpoint; exit 1 if Mnemo cannot work."""
    checks = asyncio.run(_doctor_checks(context))
    for check in checks:
        click.echo(check.line())
    if any(not check.ok and check.fatal for check in checks):
        sys.exit(1)


async def _doctor_checks(context: Context) -> list[Check]:
    try:
        config = context.config
    except MnemoError as exc:
        return [Check("config", False, str(exc))]
    source = str(context.config_path) if context.config_path else "built-in defaults"
    checks = [Check("config", True, source)]
    try:
        with serving_model(config, interactive=False) as (served, server):
            if server is not None:
                started = f"{server.alias} serving at {server.base_url}"
                checks.append(Check("embedded model", True, started))
            return checks + await _runtime_checks(served, server)
    except EmbeddedModelError as exc:
        return [*checks, Check("embedded model", False, str(exc))]


async def _runtime_checks(config: Config, server: EmbeddedServer | None) -> list[Check]:
    checks: list[Check] = []
    try:
        runtime = runtime_for(config, server)
    except MnemoError as exc:
        return [Check("database", False, str(exc))]
    try:
        checks.extend(storage_checks(runtime.storage))
        try:
            models = await runtime.llm.ping()
        except LLMError:
            checks.append(Check("llm", False, llm_setup_hint(config.llm.base_url)))
        else:
            checks.append(Check("llm", True, f"{config.llm.base_url} answers ({models})"))
            checks.extend(await model_checks(runtime.llm, runtime.store, config.llm))
        await runtime.extensions.start()  # the model checks above already asked the server
        checks.extend(await runtime.extensions.checks())
    finally:
        runtime.close()
    return checks


@cli.group()
def bench() -> None:
    """Benchmarks (figures for the README; not tests)."""


for plugin in PLUGINS:
    plugin.register_commands(cli)
cli.add_command(storage_group)
cli.add_command(embedded_group)
cli.add_command(init_command)


def main() -> None:
    try:
        cli(standalone_mode=True)
    except MnemoError as exc:
        click.echo(f"mnemo: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
