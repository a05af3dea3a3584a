"""The skills' plugin: `mnemo skills …`, `mnemo bench skills`, and the extension."""

from __future__ import annotations

from typing import TYPE_CHECKING

from core.api import Extension

if TYPE_CHECKING:
    import click

    from core.hooks import Host


def register_commands(cli: click.Group) -> None:
    from core.cli import bench_group
    from core.skills.bench import bench_skills
    from core.skills.cli import skills_group

    cli.add_command(skills_group)
    bench_group(cli).add_command(bench_skills)


def extension(host: Host) -> Extension:
    from core.skills.extension import SkillsExtension

    return SkillsExtension(host.config.skills, host.files)
