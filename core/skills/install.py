"""Adding and removing skills: from a folder, a .zip file or the URL of one.

Nothing is executed and nothing is unpacked onto the disk directly: a source becomes a
bundle ({relative path: text}) in memory, checked whole (SKILL.md valid, paths relative
and inside, no links, text only, caps on files and bytes), then written through the file
store. A zip is read entry by entry with the caps applied to the bytes actually
decompressed, so a zip bomb or a lying header stops at the cap.
"""

from __future__ import annotations

import io
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import InputError, SkillError
from core.skills.catalog import (
    SKILL_FILE,
    SkillCatalog,
    SkillLimits,
    SkillProblem,
    check_name,
    parse_skill,
)
from core.skills.front_matter import split_front_matter
from core.storage.file_store import FileStore, clean_path
from core.tools.guarded_fetch import FetchPolicy, guarded_fetch

MAX_FILES = 200
MAX_FILE_BYTES = 1_000_000
MAX_TOTAL_BYTES = 5_000_000


@dataclass
class Bundle:
    """A skill's files as text, by path relative to its folder; what was left out, why."""

    files: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    total_bytes: int = 0

    def add(self, relative: str, data: bytes) -> None:
        if len(self.files) >= MAX_FILES:
            raise SkillError(f"the skill has more than {MAX_FILES} files")
        self.total_bytes += len(data)
        if self.total_bytes > MAX_TOTAL_BYTES:
            raise SkillError(f"the skill is over {MAX_TOTAL_BYTES:,} bytes unpacked")
        try:
            self.files[clean_path(relative)] = data.decode("utf-8")
        except UnicodeDecodeError:
            self.skipped.append(f"{relative} (not UTF-8 text)")
        except InputError:
            raise SkillError(f"{relative!r} is not a path inside the skill") from None

    def rooted(self) -> Bundle:
        """The bundle with a lone top folder (`pdf-main/SKILL.md`) taken off."""
        if SKILL_FILE in self.files:
            return self
        tops = {path.split("/", 1)[0] for path in self.files}
        if len(tops) == 1 and f"{next(iter(tops))}/{SKILL_FILE}" in self.files:
            cut = len(next(iter(tops))) + 1
            files = {path[cut:]: text for path, text in self.files.items()}
            top = next(iter(tops)) + "/"
            skipped = [line.removeprefix(top) for line in self.skipped]
            return Bundle(files, skipped, self.total_bytes)
        raise SkillError(f"no {SKILL_FILE} at the top of the skill (or of its one folder)")


def bundle_from_dir(source: Path) -> Bundle:
    """The text files under `source`; links are skipped (never followed)."""
    if not source.is_dir():
        raise SkillError(f"{source} is not a folder")
    bundle = Bundle()
    for path in sorted(source.rglob("*")):
        relative = path.relative_to(source).as_posix()
        if any(part.startswith(".") for part in Path(relative).parts):
            continue  # .git, .DS_Store: not part of a skill
        if path.is_symlink():
            bundle.skipped.append(f"{relative} (a symbolic link)")
        elif path.is_file():
            if path.stat().st_size > MAX_FILE_BYTES:
                raise SkillError(f"{relative} is over {MAX_FILE_BYTES:,} bytes")
            bundle.add(relative, path.read_bytes())
    return bundle.rooted()


def _read_entry(archive: zipfile.ZipFile, entry: zipfile.ZipInfo) -> bytes:
    """The entry's bytes, decompressed at most MAX_FILE_BYTES + 1 (its header may lie)."""
    with archive.open(entry) as stream:
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise SkillError(f"{entry.filename} is over {MAX_FILE_BYTES:,} bytes unpacked")
    return data


def bundle_from_zip(data: bytes) -> Bundle:
    """The text files of a zip archive; links refused, paths checked, sizes capped."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise SkillError(f"not a zip archive: {exc}") from None
    bundle = Bundle()
    with archive:
        entries = archive.infolist()
        if len(entries) > MAX_FILES * 2:
            raise SkillError(f"the archive has {len(entries)} entries; the limit is {MAX_FILES}")
        for entry in entries:
            if stat.S_ISLNK(entry.external_attr >> 16):
                bundle.skipped.append(f"{entry.filename} (a symbolic link)")
                continue
            if entry.is_dir() or entry.filename.split("/")[-1].startswith("."):
                continue
            if entry.filename.startswith("__MACOSX/"):
                continue
            try:
                clean_path(entry.filename)
            except InputError:
                raise SkillError(f"{entry.filename!r} is not a path inside the skill") from None
            bundle.add(entry.filename, _read_entry(archive, entry))
    return bundle.rooted()


async def bundle_from_url(url: str, policy: FetchPolicy) -> Bundle:
    """The skill in the zip at `url`, fetched through the guard (`core.tools.guarded_fetch`)."""
    result = await guarded_fetch(url, policy)
    if result.status != 200:
        raise SkillError(f"{result.url} answered HTTP {result.status}, not a zip archive")
    return bundle_from_zip(result.body)


@dataclass(frozen=True)
class Installed:
    name: str
    folder: str
    files: int
    skipped: list[str]


def install_bundle(
    files: FileStore, bundle: Bundle, directory: str, limits: SkillLimits, force: bool = False
) -> Installed:
    """Write a checked bundle as `directory/<name>/` (the name from its front matter)."""
    text = bundle.files.get(SKILL_FILE)
    if text is None:
        raise SkillError(f"no {SKILL_FILE} at the top of the skill")
    name = _declared_name(text)
    parse_skill(text, name, limits)  # the whole front matter and the body, or an error
    folder = f"{directory}{name}/"
    if files.list(folder):
        if not force:
            raise SkillError(f"a skill {name!r} is already there ({folder}); --force replaces it")
        files.delete_tree(folder)
    for relative, content in sorted(bundle.files.items()):
        files.write_text(folder + relative, content)
    return Installed(name, folder, len(bundle.files), bundle.skipped)


def _declared_name(text: str) -> str:
    fields, _ = split_front_matter(text)
    return check_name(fields.get("name", "").strip())


def remove_skill(files: FileStore, directory: str, name: str) -> int:
    """Delete `directory/<name>/`; how many files went. SkillError if there is none."""
    gone = files.delete_tree(f"{directory}{check_name(name)}/")
    if not gone:
        raise SkillError(f"no skill {name!r} in {directory}")
    return gone


def all_problems(catalog: SkillCatalog) -> list[SkillProblem]:
    """The broken skills of every scope in the store (for `mnemo doctor`)."""
    directories: dict[str, str] = {}
    for path in catalog.files.list(""):
        parts = path.split("/")
        if len(parts) in (3, 4, 5) and parts[-1] == SKILL_FILE and parts[-3] == "skills":
            scope = {3: "global", 4: "channel", 5: "chat"}[len(parts)]
            directories.setdefault("/".join(parts[:-2]) + "/", scope)
    found = catalog.scan([(scope, directory) for directory, scope in directories.items()])
    return [item for item in found if isinstance(item, SkillProblem)]
