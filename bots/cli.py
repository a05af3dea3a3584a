"""The `mnemo` command: chat, run, doctor, bench, and every plugin's subcommands.

Only click is imported up front: each command imports what it uses when it runs, and the
plugins' commands are registered by import path (`core.cli.lazy_group`), so `mnemo --version`
and `mnemo --help` load neither pydantic nor the model, database or chat libraries.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from bots.plugins import PLUGINS
from core import __version__
from core.cli.lazy_group import LazyGroup, add_lazy_command
from core.errors import MnemoError

# One OpenBLAS thread (set before numpy is imported; a user's own setting wins). Ranking's
# products over a chat's recent vectors (1,000+ rows) made OpenBLAS split them over threads
# that wait for a core on a busy machine: 4,400 x 384 float32, p95 24 ms with its default
# threads against 8 ms with one at load 13 (p50 0.14 / 0.18 ms), the same bits either way.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

if TYPE_CHECKING:
    from bots.runtime import Runtime
    from bots.terminal import TerminalChannel
    from core.api import Check
    from core.config import Config
    from core.model.embedded import EmbeddedServer


class Context:
    """What the root group passes to subcommands: the config path, loaded on demand."""

    def __init__(self, config_path: Path | None) -> None:
        self.config_path = config_path
        self._config: Config | None = None

    @property
    def config(self) -> Config:
        if self._config is None:
            from core.config import load_config

            self._config = load_config(self.config_path)
        return self._config

    def runtime(self) -> Runtime:
        from bots.runtime import build_runtime

        return build_runtime(self.config)


pass_context = click.make_pass_decorator(Context)

# The lazily registered commands' help lines (a test keeps them equal to the docstrings).
EMBEDDED_HELP = "The embedded demo model: a tiny model Mnemo starts itself (SmolLM2-135M)."
INIT_HELP = "Write config.toml: find a model server (or the embedded demo model), check bot tokens."


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.version_option(version=__version__)  # not importlib.metadata: it costs ~50 ms
@click.pass_context
def cli(ctx: click.Context, config_path: Path | None, log_level: str | None) -> None:
    """Mnemo: a chat-bot platform with long-term memory."""
    from bots.logging_setup import configure_logging
    from core.config import resolve_config_path

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


@cli.group(cls=LazyGroup, invoke_without_command=True)
@click.option("--chat-id", default=None, help="Terminal chat id (default: [terminal] chat_id).")
@click.option(
    "--image",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Send this image with the first message (later: a `/image PATH` line).",
)
@click.pass_context
def chat(ctx: click.Context, chat_id: str | None, image: Path | None) -> None:
    """Talk to the bot in this terminal (reads one message per line when piped); or
    export or delete a chat's data (`mnemo chat export|delete CHAT`)."""
    import asyncio

    from bots.terminal import TerminalChannel

    if ctx.invoked_subcommand is not None:
        return
    from bots.embedded_cli import serving_model

    context = ctx.find_object(Context)
    assert context is not None  # the root group made it
    preload_embedder(context.config)
    with serving_model(context.config, sys.stdin.isatty()) as (config, server):
        runtime = runtime_for(config, server)
        terminal = runtime.config.terminal
        channel = TerminalChannel(
            chat_id or terminal.chat_id, streaming=terminal.streaming, image=image
        )
        try:
            asyncio.run(_chat(runtime, channel))
        except KeyboardInterrupt:  # Ctrl-C before the chat was up: ends it as /exit does
            pass
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
    import asyncio

    from bots.embedded_cli import serving_model

    preload_embedder(context.config)
    with serving_model(context.config, sys.stdin.isatty()) as (config, server):
        runtime = runtime_for(config, server)
        try:
            asyncio.run(_run(runtime))
        finally:
            runtime.close()


def preload_embedder(config: Config) -> None:
    """Load the embedding model in a thread while the bot is built: `runtime.start()` waits
    for it before the first message, and would otherwise load it only then."""
    from memory.embeddings import preload_embedder as start_loading

    start_loading(config.memory.embedding_model, config.memory.query_precision)


def runtime_for(config: Config, server: EmbeddedServer | None) -> Runtime:
    """The runtime on `config`; the embedded server's window is known before turn 1."""
    from bots.runtime import build_runtime
    from core.model.embedded import remember_window

    runtime = build_runtime(config)
    if server is not None:
        remember_window(runtime.store, server)
    return runtime


CHAT_SERVICES = ("mcp",)


async def _chat(runtime: Runtime, channel: TerminalChannel) -> None:
    from bots.app import run_platform
    from core.cli.doctor import llm_setup_hint
    from core.errors import LLMError

    try:
        await runtime.llm.ping()
    except LLMError:
        click.echo(f"warning: {llm_setup_hint(runtime.config.llm.base_url)}", err=True)
    await runtime.start()
    # The terminal chat runs the MCP servers its tools need, not the reflector's schedule.
    services = [s for s in runtime.extensions.services() if s.name in CHAT_SERVICES]
    await run_platform(runtime, [channel], services=services)


async def _run(runtime: Runtime) -> None:
    from bots.app import enabled_channels, run_platform
    from core.cli.doctor import llm_setup_hint
    from core.errors import LLMError

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
    import asyncio

    checks = asyncio.run(_doctor_checks(context))
    for check in checks:
        click.echo(check.line())
    if any(not check.ok and check.fatal for check in checks):
        sys.exit(1)


async def _doctor_checks(context: Context) -> list[Check]:
    from bots.embedded_cli import serving_model
    from core.api import Check
    from core.errors import EmbeddedModelError

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
    from core.api import Check
    from core.cli.doctor import llm_setup_hint, storage_checks
    from core.errors import LLMError
    from core.model.probes import model_checks

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


@cli.group(cls=LazyGroup)
def bench() -> None:
    """Benchmarks (figures for the README; not tests)."""


add_lazy_command(
    bench,
    "stream",
    "bots.bench.stream:bench_stream",
    "Streamed replies: first visible text, platform calls, final text == stored.",
)
for plugin in PLUGINS:
    plugin.register_commands(cli)
add_lazy_command(
    cli, "storage", "bots.storage_cli:storage_group", "Move the store between engines."
)
add_lazy_command(cli, "embedded", "bots.embedded_cli:embedded_group", EMBEDDED_HELP)
add_lazy_command(cli, "init", "bots.init_cli:init_command", INIT_HELP)


def main() -> None:
    from core.cli.deferred_imports import defer_unused_imports

    defer_unused_imports()
    try:
        cli(standalone_mode=True)
    except MnemoError as exc:
        click.echo(f"mnemo: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
