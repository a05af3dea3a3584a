"""Skills: the front matter, the three scopes (on both engines), validation, the scan cache,
confinement of a skill's files, and installing from folders, zips and URLs."""

from __future__ import annotations

import io
import logging
import os
import stat
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.bench.fakes.loopback import JsonHandler, LoopbackServer
from core.config import FetchConfig
from core.errors import FetchRefused, SkillError
from core.skills.catalog import Skill, SkillCatalog, SkillLimits, SkillProblem, scope_dir
from core.skills.extension import render_skills
from core.skills.front_matter import split_front_matter
from core.skills.install import (
    MAX_FILE_BYTES,
    all_problems,
    bundle_from_dir,
    bundle_from_url,
    bundle_from_zip,
    install_bundle,
    remove_skill,
)
from core.storage.engine import Storage
from core.storage.file_store import DirectoryFileStore, FileStore
from core.storage.stores import file_store
from core.tools.guarded_fetch import FetchPolicy


def skill_md(name: str, description: str = "Does a thing.", body: str = "Do it well.") -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n"


@pytest.fixture
def files(storage: Storage, tmp_path: Path) -> FileStore:
    """The data dir on SQLite, `stored_files` rows on PostgreSQL."""
    return file_store(storage, tmp_path / "data")


def put(files: FileStore, directory: str, name: str, text: str | None = None) -> None:
    files.write_text(f"{directory}{name}/SKILL.md", text or skill_md(name))


# front matter


def test_front_matter_reads_the_yaml_that_skill_files_use() -> None:
    text = (
        "---\n"
        "name: pdf\n"
        "description: >\n  Fill PDF forms,\n  merge and split files.\n"
        "license: 'Apache 2.0 ''with'' notes'\n"
        'title: "Caf\\u00e9 \\"PDF\\""\n'
        "# a comment\n"
        "metadata:\n  openclaw:\n    emoji: x\n"
        "notes: |\n  line one\n  line two\n"
        "version: 1.2  # trailing comment\n"
        "---\n\n# PDF\nBody here.\n"
    )
    fields, body = split_front_matter(text)
    assert fields["name"] == "pdf"
    assert fields["description"] == "Fill PDF forms, merge and split files."
    assert fields["license"] == "Apache 2.0 'with' notes"
    assert fields["title"] == 'Café "PDF"'
    assert fields["metadata"] == "  openclaw:\n    emoji: x"  # raw, never interpreted
    assert fields["notes"] == "line one\nline two"
    assert fields["version"] == "1.2"
    assert body == "# PDF\nBody here."


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("# no front matter\n", "does not start"),
        ("---\nname: x\n", "no closing"),
        ("---\njust words\n---\nbody", "not a 'key: value' line"),
        ("---\nname: a\nname: b\n---\nbody", "given twice"),
        ("---\n  name: a\n---\nbody", "unexpected indentation"),
        ('---\nname: "open\n---\nbody', "bad double-quoted"),
        ("---\nname: &anchor x\ndescription: >2-x\n---\nbody", "unsupported block"),
    ],
)
def test_bad_front_matter_is_an_error_naming_the_problem(text: str, error: str) -> None:
    with pytest.raises(SkillError, match=error):
        split_front_matter(text)


# scopes, validation, cache


def test_three_scopes_and_the_narrowest_wins(files: FileStore) -> None:
    put(files, scope_dir("global"), "pdf", skill_md("pdf", "Global PDF."))
    put(files, scope_dir("global"), "git")
    put(files, scope_dir("channel", "telegram"), "pdf", skill_md("pdf", "Telegram PDF."))
    put(files, scope_dir("chat", "telegram", "42"), "pdf", skill_md("pdf", "Chat 42 PDF."))
    put(files, scope_dir("chat", "telegram", "42"), "notes")
    catalog = SkillCatalog(files)
    skills, problems = catalog.for_chat("telegram", "42")
    assert problems == []
    assert [(s.name, s.scope, s.description) for s in skills] == [
        ("git", "global", "Does a thing."),
        ("notes", "chat", "Does a thing."),
        ("pdf", "chat", "Chat 42 PDF."),
    ]
    other, _ = catalog.for_chat("telegram", "43")
    assert [(s.name, s.description) for s in other] == [
        ("git", "Does a thing."),
        ("pdf", "Telegram PDF."),
    ]
    discord, _ = catalog.for_chat("discord", "42")
    assert [(s.name, s.description) for s in discord] == [
        ("git", "Does a thing."),
        ("pdf", "Global PDF."),
    ]


BROKEN = [
    ("wrong", skill_md("other"), "is not its folder's 'wrong'"),
    ("Caps", skill_md("Caps"), "is not a skill name"),
    ("nodesc", "---\nname: nodesc\n---\nbody", "no 'description'"),
    ("long", skill_md("long", "x" * 401), "the limit is 400"),
    ("empty", skill_md("empty", body=""), "no instructions"),
    ("nofm", "just text", "does not start"),
    ("huge", skill_md("huge", body="y" * 50_000), "the limit is 40,000"),
]


def test_only_a_skill_md_one_folder_down_is_a_skill(files: FileStore) -> None:
    files.write_text("skills/SKILL.md", skill_md("skills"))
    files.write_text("skills/a/b/SKILL.md", skill_md("b"))
    files.write_text("skills/a/notes.md", "not a skill")
    files.write_text("telegram/skills/SKILL.md", skill_md("telegram"))
    put(files, "skills/", "real")
    assert [s.name for s in SkillCatalog(files).for_chat("telegram", "1")[0]] == ["real"]


def test_broken_skills_are_skipped_with_a_warning(
    files: FileStore, caplog: pytest.LogCaptureFixture
) -> None:
    put(files, "skills/", "good")
    for folder, text, _ in BROKEN:
        files.write_text(f"skills/{folder}/SKILL.md", text)
    with caplog.at_level(logging.WARNING, logger="core.skills.catalog"):
        skills, problems = SkillCatalog(files).for_chat("telegram", "1")
    assert [s.name for s in skills] == ["good"]
    reasons = {p.path.split("/")[1]: p.reason for p in problems}
    for folder, _, error in BROKEN:
        assert error in reasons[folder], folder
        assert any(f"skills/{folder}/SKILL.md" in r.getMessage() for r in caplog.records)
    assert {p.path for p in all_problems(SkillCatalog(files))} == {
        f"skills/{folder}/SKILL.md" for folder, _, _ in BROKEN
    }


class CountingFiles:
    """A file store that counts the texts read through it (the real store underneath)."""

    def __init__(self, inner: FileStore) -> None:
        self.inner = inner
        self.read = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    def read_texts(self, paths: list[str]) -> dict[str, str]:
        self.read += len(paths)
        return self.inner.read_texts(paths)


def test_a_scan_rereads_only_the_skills_that_changed(files: FileStore) -> None:
    for number in range(5):
        put(files, "skills/", f"s{number}")
    counting = CountingFiles(files)
    catalog = SkillCatalog(counting)  # type: ignore[arg-type]
    catalog.for_chat("telegram", "1")
    assert counting.read == 5
    catalog.for_chat("telegram", "1")
    assert counting.read == 5  # nothing changed: nothing read
    files.write_text("skills/s3/SKILL.md", skill_md("s3", "Changed."))
    skills, _ = catalog.for_chat("telegram", "1")
    assert counting.read == 6 and skills[3].description == "Changed."
    files.delete_tree("skills/s4/")
    assert [s.name for s in catalog.for_chat("telegram", "1")[0]] == ["s0", "s1", "s2", "s3"]


def test_a_skill_file_is_read_inside_its_folder_only(files: FileStore) -> None:
    put(files, "skills/", "pdf")
    files.write_text("skills/pdf/forms.md", "Forms.")
    files.write_text("skills/pdf/scripts/fill.py", "print(1)")
    files.write_text("skills/other/secret.md", "Secret.")
    files.write_text("AGENTS.md", "Global notes.")
    catalog = SkillCatalog(files)
    skill = catalog.find("telegram", "1", "pdf")
    assert catalog.extra_files(skill) == ["forms.md", "scripts/fill.py"]
    assert catalog.read_file(skill, "forms.md") == "Forms."
    assert catalog.read_file(skill, "./scripts/fill.py") == "print(1)"
    for bad in ["../other/secret.md", "/etc/passwd", "../../AGENTS.md", "scripts/../../x", ""]:
        with pytest.raises(SkillError, match="not a path inside"):
            catalog.read_file(skill, bad)
    with pytest.raises(SkillError, match="has no file 'nope.md' \\(files: forms.md"):
        catalog.read_file(skill, "nope.md")
    with pytest.raises(SkillError, match="no skill named 'nope'.*skills: pdf"):
        catalog.find("telegram", "1", "nope")


def test_a_link_out_of_the_skill_folder_is_not_followed(tmp_path: Path) -> None:
    """On the data dir (SQLite), files are real files: a link cannot lead outside."""
    files = DirectoryFileStore(tmp_path / "data")
    put(files, "skills/", "pdf")
    (tmp_path / "secret.txt").write_text("TOKEN=abc")
    os.symlink(tmp_path / "secret.txt", tmp_path / "data/skills/pdf/notes.md")
    os.makedirs(tmp_path / "data/skills/evil")
    os.symlink(tmp_path / "secret.txt", tmp_path / "data/skills/evil/SKILL.md")
    catalog = SkillCatalog(files)
    skills, problems = catalog.for_chat("telegram", "1")
    assert [s.name for s in skills] == ["pdf"]
    assert [p.reason for p in problems] == ["SKILL.md is a link that leads out of its folder"]
    assert catalog.extra_files(skills[0]) == []
    with pytest.raises(SkillError, match="leads out"):
        catalog.read_file(skills[0], "notes.md")


def test_the_list_keeps_to_its_budget() -> None:
    skills = [
        Skill(f"skill-{n}", "A description of forty characters, more.", "b", "global", "")
        for n in range(40)
    ]
    text = render_skills(skills, 1_000)
    assert len(text) <= 1_000
    assert "- skill-0: A description" in text
    assert "more skills (read_skill gives their descriptions): " in text
    assert "skill-39" in text
    assert "- skill-30: A description" not in text and ", skill-39" in text
    tight = render_skills(skills, 300)
    assert len(tight) <= 300 and tight.endswith("more skills not listed here")
    assert render_skills([], 1_000) == ""


# installing


def zip_of(entries: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            archive.writestr(info, target)
    return buffer.getvalue()


def test_a_folder_is_installed_without_its_links_and_dot_files(
    files: FileStore, tmp_path: Path
) -> None:
    source = tmp_path / "src" / "pdf-main"
    (source / "scripts").mkdir(parents=True)
    (source / "SKILL.md").write_text(skill_md("pdf"))
    (source / "scripts" / "fill.py").write_text("print(1)")
    (source / ".git").mkdir()
    (source / ".git" / "config").write_text("x")
    (source / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\xff\xfe")
    os.symlink("/etc/passwd", source / "passwd.md")
    bundle = bundle_from_dir(tmp_path / "src")  # the lone top folder is taken off
    done = install_bundle(files, bundle, scope_dir("global"), SkillLimits())
    assert done.name == "pdf" and done.folder == "skills/pdf/"
    assert sorted(files.list("skills/pdf/")) == [
        "skills/pdf/SKILL.md",
        "skills/pdf/scripts/fill.py",
    ]
    assert sorted(done.skipped) == ["logo.png (not UTF-8 text)", "passwd.md (a symbolic link)"]
    with pytest.raises(SkillError, match="already there"):
        install_bundle(files, bundle, scope_dir("global"), SkillLimits())
    (source / "SKILL.md").write_text(skill_md("pdf", "New."))
    install_bundle(files, bundle_from_dir(source), scope_dir("global"), SkillLimits(), force=True)
    assert SkillCatalog(files).find("t", "1", "pdf").description == "New."
    assert remove_skill(files, scope_dir("global"), "pdf") == 2
    with pytest.raises(SkillError, match="no skill 'pdf'"):
        remove_skill(files, scope_dir("global"), "pdf")


def test_a_zip_is_installed_into_a_chat_scope(files: FileStore) -> None:
    data = zip_of({"x/SKILL.md": skill_md("x").encode(), "x/ref/a.md": b"A", "x/": b""})
    done = install_bundle(
        files, bundle_from_zip(data), scope_dir("chat", "telegram", "7"), SkillLimits()
    )
    assert done.folder == "telegram/7/skills/x/" and done.files == 2
    assert [s.scope for s in SkillCatalog(files).for_chat("telegram", "7")[0]] == ["chat"]
    assert SkillCatalog(files).for_chat("telegram", "8")[0] == []


@pytest.mark.parametrize(
    ("entries", "links", "error"),
    [
        ({"SKILL.md": skill_md("a").encode(), "../evil.md": b"x"}, None, "not a path inside"),
        ({"SKILL.md": skill_md("a").encode(), "/etc/cron.d/x": b"x"}, None, "not a path inside"),
        ({"SKILL.md": skill_md("a").encode(), "a/../../x": b"x"}, None, "not a path inside"),
        (
            {"SKILL.md": skill_md("a").encode(), "bomb.md": b"\0" * (MAX_FILE_BYTES + 1)},
            None,
            "over",
        ),
        ({f"f{n}.md": b"x" for n in range(401)}, None, "entries; the limit"),
        ({"README.md": b"no skill here"}, None, "no SKILL.md"),
        ({"SKILL.md": b"---\nname: Bad Name\ndescription: d\n---\nb"}, None, "not a skill name"),
        (None, None, "not a zip archive"),
    ],
)
def test_a_hostile_zip_is_refused_whole(
    files: FileStore, entries: dict[str, bytes] | None, links: dict[str, str] | None, error: str
) -> None:
    data = zip_of(entries, links) if entries is not None else b"PK\x03\x04 not really"
    with pytest.raises(SkillError, match=error):
        install_bundle(files, bundle_from_zip(data), "skills/", SkillLimits())
    assert files.list("skills/") == []


def test_a_zip_bomb_stops_at_the_cap_not_at_its_header() -> None:
    """50 MB of zeros compress to ~50 KB; reading stops after the cap, whatever the header says."""
    data = zip_of({"SKILL.md": skill_md("a").encode(), "zeros.md": b"\0" * 50_000_000})
    assert len(data) < 200_000
    with pytest.raises(SkillError, match="zeros.md is over 1,000,000 bytes"):
        bundle_from_zip(data)


def test_links_in_a_zip_are_left_out(files: FileStore) -> None:
    data = zip_of({"SKILL.md": skill_md("a").encode()}, {"passwd.md": "/etc/passwd"})
    done = install_bundle(files, bundle_from_zip(data), "skills/", SkillLimits())
    assert done.skipped == ["passwd.md (a symbolic link)"] and done.files == 1


class ZipSite(JsonHandler):
    archive = b""

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/skill.zip":
            self.send_body(200, ZipSite.archive, "application/zip")
        else:
            self.send_body(404, b"missing", "text/plain")


@pytest.fixture
def zip_site() -> Iterator[str]:
    ZipSite.archive = zip_of({"w/SKILL.md": skill_md("w").encode()})
    with LoopbackServer(ZipSite, poll_interval=0.05) as server:
        yield server.origin


async def test_a_zip_comes_through_the_guarded_fetch(zip_site: str, files: FileStore) -> None:
    with pytest.raises(FetchRefused, match="loopback"):
        await bundle_from_url(f"{zip_site}/skill.zip", FetchPolicy())
    allowed = FetchPolicy.from_config(FetchConfig(allow=["127.0.0.0/8"]))
    bundle = await bundle_from_url(f"{zip_site}/skill.zip", allowed)
    assert install_bundle(files, bundle, "skills/", SkillLimits()).name == "w"
    with pytest.raises(SkillError, match="HTTP 404"):
        await bundle_from_url(f"{zip_site}/other.zip", allowed)


def test_problems_are_data_for_doctor() -> None:
    problem = SkillProblem("skills/x/SKILL.md", "no 'description'")
    assert problem.line() == "skills/x/SKILL.md: no 'description'"
