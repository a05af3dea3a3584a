"""Skills in a running bot: the list in the dynamic context, `read_skill` and
`read_skill_file`, `/skills`, and a `mnemo doctor` line per broken skill.

The list is a context section (the dynamic part, after the stored history), so adding or
removing a skill never changes the static prefix; the tools are always registered, so the
prefix's tool list does not change either.
"""

from __future__ import annotations

from typing import Any

from core.api import Chat, Check, Command, ContextSection, Extension, Tool, TurnContext
from core.config import SkillsConfig
from core.errors import SkillError, ToolError
from core.skills.catalog import (
    SCOPES,
    Skill,
    SkillCatalog,
    SkillLimits,
    SkillProblem,
    scope_dir,
)
from core.skills.install import all_problems
from core.storage.file_store import FileStore

SECTION_KEY = "skills"
SECTION_PRIORITY = 55
CHAT_SKILLS = "files of skills installed for this chat"
HEADER = (
    "Skills: instructions for particular tasks. When a task matches a skill's description, "
    "call read_skill(name) first and follow what it says."
)


def render_skills(skills: list[Skill], max_chars: int) -> str:
    """The header and one `- name: description` line a skill, within `max_chars`. When
    they do not all fit, as many lines as leave room to name the rest on one line (the
    model can still read those); if even that does not fit, the rest are counted."""
    if not skills:
        return ""
    lines = [HEADER, *(f"- {skill.name}: {skill.description}" for skill in skills)]
    whole = "\n".join(lines)
    if len(whole) <= max_chars:
        return whole
    sizes = [len(HEADER)]
    for line in lines[1:]:
        sizes.append(sizes[-1] + 1 + len(line))  # sizes[k]: header and k skill lines
    for kept in range(len(skills) - 1, -1, -1):
        names = ", ".join(skill.name for skill in skills[kept:])
        tail = f"- more skills (read_skill gives their descriptions): {names}"
        if sizes[kept] + 1 + len(tail) <= max_chars:
            return "\n".join([*lines[: kept + 1], tail])
    for kept in range(len(skills) - 1, -1, -1):
        tail = f"- {len(skills) - kept} more skills not listed here"
        if sizes[kept] + 1 + len(tail) <= max_chars:
            return "\n".join([*lines[: kept + 1], tail])
    return HEADER[:max_chars]


def render_skill(skill: Skill, extra_files: list[str]) -> str:
    files = "\n".join(f"- {name}" for name in extra_files) or "(none)"
    return (
        f"# Skill {skill.name} ({skill.scope})\n{skill.description}\n\n{skill.body}\n\n"
        f"Files of this skill (read one with read_skill_file):\n{files}"
    )


def _string(arguments: dict[str, Any], key: str) -> str:
    value = arguments.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"{key} must be a non-empty string")
    return value.strip()


class SkillsExtension(Extension):
    name = "skills"

    def __init__(self, config: SkillsConfig, files: FileStore) -> None:
        self.config = config
        self.catalog = SkillCatalog(
            files, SkillLimits(config.description_max_chars, config.skill_max_chars)
        )

    def tools(self) -> list[Tool]:
        if not self.config.enabled:
            return []
        name = {"name": {"type": "string", "description": "The skill's name, from the list."}}
        path = {"path": {"type": "string", "description": "A file of the skill, e.g. forms.md"}}
        return [
            Tool(
                "read_skill",
                "Read a skill's instructions and the list of its files.",
                self._read_skill,
                {"type": "object", "properties": name, "required": ["name"]},
                read_only=True,
            ),
            Tool(
                "read_skill_file",
                "Read one file of a skill (a path inside the skill's folder).",
                self._read_skill_file,
                {"type": "object", "properties": {**name, **path}, "required": ["name", "path"]},
                read_only=True,
            ),
        ]

    def commands(self) -> list[Command]:
        return [Command("skills", "list the skills this chat can use", self._list_command)]

    async def context_sections(self, turn: TurnContext) -> list[ContextSection]:
        if not self.config.enabled:
            return []
        skills, _ = self.catalog.for_chat(turn.chat.channel, turn.chat.external_chat_id)
        text = render_skills(skills, self.config.list_max_chars)
        if not text:
            return []
        return [ContextSection(SECTION_KEY, "skills", text, priority=SECTION_PRIORITY)]

    def chat_data(self, chat: Chat) -> dict[str, int]:
        """The skills installed for this chat alone: they go with its directory when the
        chat is deleted (`/forgetme`, `mnemo chat delete`)."""
        directory = scope_dir("chat", chat.channel, chat.external_chat_id)
        return {CHAT_SKILLS: len(self.catalog.files.list(directory))}

    async def checks(self) -> list[Check]:
        problems = all_problems(self.catalog)
        if not problems:
            return []
        return [Check("skill", False, problem.line(), fatal=False) for problem in problems]

    def _skill(self, turn: TurnContext, name: str) -> Skill:
        try:
            return self.catalog.find(turn.chat.channel, turn.chat.external_chat_id, name)
        except SkillError as exc:
            raise ToolError(str(exc)) from None

    async def _read_skill(self, turn: TurnContext, arguments: dict[str, Any]) -> str:
        skill = self._skill(turn, _string(arguments, "name"))
        return render_skill(skill, self.catalog.extra_files(skill))

    async def _read_skill_file(self, turn: TurnContext, arguments: dict[str, Any]) -> str:
        skill = self._skill(turn, _string(arguments, "name"))
        try:
            text = self.catalog.read_file(skill, _string(arguments, "path"))
        except SkillError as exc:
            raise ToolError(str(exc)) from None
        limit = self.config.skill_max_chars
        return text if len(text) <= limit else text[:limit] + f"\n[truncated at {limit} chars]"

    async def _list_command(self, turn: TurnContext, args: str) -> str:
        skills, problems = self.catalog.for_chat(turn.chat.channel, turn.chat.external_chat_id)
        return describe_skills(skills, problems)


def describe_skills(skills: list[Skill], problems: list[SkillProblem]) -> str:
    """What `/skills` and `mnemo skills list --chat` print."""
    if not skills and not problems:
        return "No skills. Add one with `mnemo skills add PATH|URL` (see the README)."
    lines = [f"Skills ({len(skills)}), narrowest scope first when names clash:"]
    by_scope = {scope: [s for s in skills if s.scope == scope] for scope in SCOPES}
    for scope, members in by_scope.items():
        lines.extend(f"- {s.name} [{scope}]: {s.description}" for s in members)
    if problems:
        lines.append(f"Skipped ({len(problems)} broken):")
        lines.extend(f"- {problem.line()}" for problem in problems)
    return "\n".join(lines)
