"""The skills' plugin: `mnemo skills …`, `mnemo bench skills`, and the extension."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import click

    from core.api import Extension
    from core.turn.hooks import Host


# Short help for `mnemo --help`, which lists the commands without importing them.
SKILLS_HELP = "Skills: SKILL.md folders whose list the model sees and which it reads on demand."
BENCH_HELP = (
    "What COUNT installed skills add to a turn: scan time (cold, warm, one edited) and"
    " request size."
)


def register_commands(cli: click.Group) -> None:
    from core.cli.lazy_group import add_lazy_command
    from core.cli.runtime import bench_group

    add_lazy_command(cli, "skills", "core.skills.cli:skills_group", SKILLS_HELP)
    add_lazy_command(bench_group(cli), "skills", "core.skills.bench:bench_skills", BENCH_HELP)


def extension(host: Host) -> Extension:
    from core.skills.extension import SkillsExtension

    return SkillsExtension(host.config.skills, host.files)
