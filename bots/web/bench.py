"""placeholder"""

import click


@click.command("web")
def bench_web() -> None:
    """Time every dashboard page."""
