"""The skills a chat can use: SKILL.md folders in three scopes, found, validated and cached.

Scopes and where their folders are (in the file store, like AGENTS.md; paths built with
`core.chat.files.safe_path_part`, so no channel or chat id can leave the data dir):
  global   skills/<name>/SKILL.md
  channel  <channel>/skills/<name>/SKILL.md
  chat     <channel>/<chat>/skills/<name>/SKILL.md
A skill of the same name in a narrower scope wins (chat over channel over global), as
the chat's AGENTS.md has the last word over the global one.

A scan costs one `FileStore.stamps` call (one round trip on PostgreSQL); a SKILL.md is
read and parsed again only when its stamp changed. A broken skill is left out of the list
with a warning logged once per version of the file, and reported by `problems()`
(`mnemo doctor`, `/skills`).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from core.chat.files import safe_path_part
from core.errors import InputError, SkillError
from core.skills.front_matter import split_front_matter
from core.storage.file_store import FileStore, clean_path

logger = logging.getLogger(__name__)

SKILL_FILE = "SKILL.md"
SCOPES = ("global", "channel", "chat")
NAME = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,62}[a-z0-9])?")
MAX_NAME_CHARS = 64


@dataclass(frozen=True)
class Skill:
    """One valid skill: its name, description, body, and where its folder is."""

    name: str
    description: str
    body: str
    scope: str
    folder: str  # relative to the data dir, with a trailing '/': skills/pdf/

    @property
    def path(self) -> str:
        return self.folder + SKILL_FILE


@dataclass(frozen=True)
class SkillProblem:
    """A SKILL.md that was skipped, and why."""

    path: str
    reason: str

    def line(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True)
class SkillLimits:
    description_max_chars: int = 400
    skill_max_chars: int = 40_000


def scope_dir(scope: str, channel: str = "", chat_id: str = "") -> str:
    """The scope's skills directory with a trailing '/': `skills/`, `telegram/skills/`, …"""
    if scope == "global":
        parts: list[str] = []
    elif scope == "channel":
        parts = [safe_path_part(channel)]
    elif scope == "chat":
        parts = [safe_path_part(channel), safe_path_part(chat_id)]
    else:
        raise InputError(f"scope must be one of {', '.join(SCOPES)}, not {scope!r}")
    return "/".join([*parts, "skills"]) + "/"


def check_name(name: str) -> str:
    """`name` if it is a valid skill name (lower-case letters, digits, inner hyphens)."""
    if not NAME.fullmatch(name):
        raise SkillError(
            f"{name!r} is not a skill name: use 1-{MAX_NAME_CHARS} lower-case letters, "
            "digits and hyphens (not at either end)"
        )
    return name


def parse_skill(text: str, folder_name: str, limits: SkillLimits) -> tuple[str, str, str]:
    """(name, description, body) of a SKILL.md in the folder `folder_name`; SkillError
    naming what is wrong otherwise."""
    if len(text) > limits.skill_max_chars:
        raise SkillError(
            f"SKILL.md is {len(text):,} chars; the limit is {limits.skill_max_chars:,}"
        )
    fields, body = split_front_matter(text)
    name = fields.get("name", "").strip()
    if not name:
        raise SkillError("the front matter has no 'name'")
    check_name(name)
    if name != folder_name:
        raise SkillError(f"the front matter's name {name!r} is not its folder's {folder_name!r}")
    description = " ".join(fields.get("description", "").split())
    if not description:
        raise SkillError("the front matter has no 'description'")
    if len(description) > limits.description_max_chars:
        raise SkillError(
            f"the description is {len(description)} chars; the limit is "
            f"{limits.description_max_chars}"
        )
    if not body:
        raise SkillError("SKILL.md has no instructions after its front matter")
    return name, description, body


class SkillCatalog:
    """Finds the skills of a chat in a `FileStore` and keeps the parsed ones by stamp."""

    def __init__(self, files: FileStore, limits: SkillLimits | None = None) -> None:
        self.files = files
        self.limits = limits or SkillLimits()
        self._parsed: dict[str, tuple[str, Skill | SkillProblem]] = {}  # path → (stamp, …)

    def scope_dirs(self, channel: str, chat_id: str) -> list[tuple[str, str]]:
        """(scope, directory) of the chat, broadest first."""
        return [(scope, scope_dir(scope, channel, chat_id)) for scope in SCOPES]

    def scan(self, directories: list[tuple[str, str]]) -> list[Skill | SkillProblem]:
        """Every SKILL.md directly in a folder of `directories`, parsed (from the cache when
        its stamp is unchanged), in the order of `directories` then by name."""
        stamps = self.files.stamps([directory for _, directory in directories], SKILL_FILE)
        wanted: list[tuple[str, str, str]] = []  # (scope, folder name, path)
        for scope, directory in directories:
            for path in sorted(stamps):
                rest = path[len(directory) :] if path.startswith(directory) else ""
                folder, _, file_name = rest.partition("/")
                if file_name == SKILL_FILE:
                    wanted.append((scope, folder, path))
        stale = [path for _, _, path in wanted if self._stamp(path) != stamps[path]]
        texts = self.files.read_texts(stale) if stale else {}
        for scope, folder, path in wanted:
            if path in stale:
                self._parsed[path] = (stamps[path], self._parse(scope, folder, path, texts))
        return [self._parsed[path][1] for _, _, path in wanted]

    def _stamp(self, path: str) -> str | None:
        cached = self._parsed.get(path)
        return None if cached is None else cached[0]

    def _parse(
        self, scope: str, folder: str, path: str, texts: dict[str, str]
    ) -> Skill | SkillProblem:
        text = texts.get(path)
        try:
            if text is None:
                raise SkillError("SKILL.md could not be read")
            directory = path[: -len(SKILL_FILE)]
            if not self.files.stays_inside(path, directory):
                raise SkillError("SKILL.md is a link that leads out of its folder")
            name, description, body = parse_skill(text, folder, self.limits)
        except SkillError as exc:
            logger.warning("skill %s skipped: %s", path, exc)
            return SkillProblem(path, str(exc))
        return Skill(name, description, body, scope, directory)

    def for_chat(self, channel: str, chat_id: str) -> tuple[list[Skill], list[SkillProblem]]:
        """The skills the chat can use, one per name (the narrowest scope wins), sorted by
        name; and the broken ones in its scopes."""
        return self.for_dirs(self.scope_dirs(channel, chat_id))

    def for_dirs(
        self, directories: list[tuple[str, str]]
    ) -> tuple[list[Skill], list[SkillProblem]]:
        """`for_chat` over the given (scope, directory) pairs, broadest first."""
        found = self.scan(directories)
        chosen: dict[str, Skill] = {}
        for item in found:
            if isinstance(item, Skill):
                chosen[item.name] = item  # later (narrower) scopes replace earlier ones
        problems = [item for item in found if isinstance(item, SkillProblem)]
        return [chosen[name] for name in sorted(chosen)], problems

    def find(self, channel: str, chat_id: str, name: str) -> Skill:
        skills, _ = self.for_chat(channel, chat_id)
        for skill in skills:
            if skill.name == name:
                return skill
        known = ", ".join(skill.name for skill in skills) or "none"
        raise SkillError(f"no skill named {name!r} in this chat (skills: {known})")

    def extra_files(self, skill: Skill) -> list[str]:
        """The skill's other files, relative to its folder (links leading out left out)."""
        return [
            path[len(skill.folder) :]
            for path in self.files.list(skill.folder)
            if path != skill.path and self.files.stays_inside(path, skill.folder)
        ]

    def read_file(self, skill: Skill, relative: str) -> str:
        """The text of `relative` inside the skill's folder; SkillError for a path that is
        absolute, climbs with `..`, or leads out through a link, or a missing file."""
        try:
            path = clean_path(skill.folder + clean_path(relative))
        except InputError:
            raise SkillError(
                f"{relative!r} is not a path inside the skill {skill.name!r}"
            ) from None
        if not self.files.stays_inside(path, skill.folder):
            raise SkillError(f"{relative!r} leads out of the skill {skill.name!r}")
        text = self.files.read_text(path)
        if text is None:
            files = ", ".join(self.extra_files(skill)) or "none"
            raise SkillError(f"the skill {skill.name!r} has no file {relative!r} (files: {files})")
        return text
