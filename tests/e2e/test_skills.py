"""A skill used end to end with the fake model, on both engines: the list reaches the
request's dynamic part, the model reads the skill and follows it; the static prefix stays
byte-identical when a skill is added; /skills, /context, doctor and `mnemo skills`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bots.runtime import Runtime, build_runtime
from core import plugin as default_plugin
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, tool_call
from core.config import Config
from core.skills import plugin as skills_plugin
from core.skills.catalog import SkillLimits, scope_dir
from core.skills.install import bundle_from_zip, install_bundle
from tests.conftest import make_config, run_mnemo, write_config
from tests.core.test_skills import skill_md, zip_of

HAIKU = skill_md(
    "haiku",
    "Write a haiku about any topic the user names.",
    "Write three lines of 5, 7 and 5 syllables. End with the word PINEAPPLE. "
    "Read forms.md for the allowed forms.",
)


@pytest.fixture
def runtime(tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str) -> Iterator[Runtime]:
    config = make_config(tmp_path / "data", fake_llm.base_url)
    config.storage.url = storage_url
    rt = build_runtime(config, plugins=[default_plugin, skills_plugin])
    yield rt
    rt.close()


def add_haiku(runtime: Runtime, directory: str = "skills/") -> None:
    data = zip_of({"SKILL.md": HAIKU.encode(), "forms.md": b"Classic 5-7-5 only."})
    install_bundle(runtime.agent.files, bundle_from_zip(data), directory, SkillLimits())


def follows_skills(request: dict[str, Any]) -> FakeReply:
    """A model that does what a skill it read says, as far as a fake can."""
    tools = [m["content"] for m in request["messages"] if m["role"] == "tool"]
    if any("End with the word PINEAPPLE" in content for content in tools):
        return FakeReply("Autumn moon rises\nquiet river carries light\nhome at last PINEAPPLE")
    return FakeReply("Plain answer.")


async def ask(runtime: Runtime, chat: str, text: str) -> str:
    reply = await runtime.agent.handle(Inbound("terminal", chat, text))
    assert reply is not None and not reply.is_error, reply
    return reply.text


def all_text(request: dict[str, Any]) -> str:
    return "\n".join(str(message.get("content") or "") for message in request["messages"])


async def test_the_model_reads_a_skill_and_follows_it(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    add_haiku(runtime)
    fake_llm.responder = follows_skills
    fake_llm.add(
        FakeReply(tool_calls=[tool_call("read_skill", {"name": "haiku"}, "c1")]),
        FakeReply(
            tool_calls=[tool_call("read_skill_file", {"name": "haiku", "path": "forms.md"}, "c2")]
        ),
    )
    reply = await ask(runtime, "t", "a haiku about the moon, please")
    assert reply.endswith("PINEAPPLE")
    first, second, third = fake_llm.requests
    assert "- haiku: Write a haiku about any topic the user names." in all_text(first)
    assert "PINEAPPLE" not in all_text(first)  # only the list, not the body
    [skill] = [m["content"] for m in second["messages"] if m["role"] == "tool"]
    assert "# Skill haiku (global)" in skill and "- forms.md" in skill
    assert [m["content"] for m in third["messages"] if m["role"] == "tool"][-1] == (
        "Classic 5-7-5 only."
    )


async def test_bad_skill_calls_come_back_to_the_model_not_as_a_failed_turn(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    add_haiku(runtime)
    fake_llm.add(
        FakeReply(
            tool_calls=[
                tool_call("read_skill", {"name": "nope"}, "c1"),
                tool_call("read_skill_file", {"name": "haiku", "path": "../../mnemo.db"}, "c2"),
            ]
        ),
        FakeReply("Sorry, no such skill."),
    )
    assert await ask(runtime, "t", "use the nope skill") == "Sorry, no such skill."
    results = [m["content"] for m in fake_llm.requests[1]["messages"] if m["role"] == "tool"]
    assert "no skill named 'nope'" in results[0] and "skills: haiku" in results[0]
    assert "not a path inside the skill 'haiku'" in results[1]


async def test_the_static_prefix_is_byte_identical_after_a_skill_is_added(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    await ask(runtime, "a", "hello")
    add_haiku(runtime)
    await ask(runtime, "a", "hello again")
    await ask(runtime, "b", "hello")
    before, after_same_chat, after_new_chat = fake_llm.requests
    for request in (after_same_chat, after_new_chat):
        assert json.dumps(request["messages"][0]) == json.dumps(before["messages"][0])
        assert json.dumps(request["tools"]) == json.dumps(before["tools"])
    assert "- haiku:" not in all_text(before) and "- haiku:" in all_text(after_new_chat)
    # The same chat's earlier request is still a prefix of its next one (the KV cache holds).
    assert after_same_chat["messages"][: len(before["messages"])] == before["messages"]


async def test_chat_scope_skills_and_the_commands(runtime: Runtime) -> None:
    add_haiku(runtime, scope_dir("chat", "terminal", "mine"))
    runtime.agent.files.write_text(
        "skills/broken/SKILL.md", "---\nname: broken\n---\nno description"
    )
    listing = await ask(runtime, "mine", "/skills")
    assert "- haiku [chat]: Write a haiku" in listing
    assert "skills/broken/SKILL.md: the front matter has no 'description'" in listing
    assert "haiku" not in await ask(runtime, "other", "/skills")
    context = await ask(runtime, "mine", "/context")
    assert "skills (skills, priority 55)" in context
    mine = runtime.store.find_chat("terminal", "mine")
    assert mine is not None
    assert runtime.agent.extensions.chat_data(mine)["files of skills installed for this chat"] == 2
    checks = await runtime.agent.extensions.checks()
    [warning] = [check for check in checks if check.name == "skill"]
    assert not warning.ok and not warning.fatal
    assert warning.line() == (
        "[warn] skill: skills/broken/SKILL.md: the front matter has no 'description'"
    )


def test_mnemo_skills_add_list_remove(
    tmp_path: Path, fake_llm: FakeOpenAIServer, storage_url: str
) -> None:
    data = tmp_path / "data"
    extra = f'url = "{storage_url}"\n'
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, data, extra)
    source = tmp_path / "haiku.zip"
    source.write_bytes(zip_of({"haiku/SKILL.md": HAIKU.encode(), "haiku/forms.md": b"x"}))
    added = run_mnemo(["skills", "add", str(source), "--chat", "telegram:42"], config)
    assert added.returncode == 0, added.stderr
    assert "added skill haiku (chat, 2 files)" in added.stdout
    listed = run_mnemo(["skills", "list", "--chat", "telegram:42", "--json"], config)
    assert json.loads(listed.stdout)["skills"][0]["folder"] == "telegram/42/skills/haiku/"
    assert json.loads(run_mnemo(["skills", "list", "--json"], config).stdout)["skills"] == []
    again = run_mnemo(["skills", "add", str(source), "--chat", "telegram:42"], config)
    assert again.returncode != 0 and "already there" in again.stderr
    refused = run_mnemo(["skills", "add", "http://127.0.0.1:9/x.zip"], config)
    assert refused.returncode != 0 and "loopback address" in refused.stderr
    removed = run_mnemo(["skills", "remove", "haiku", "--chat", "telegram:42"], config)
    assert removed.returncode == 0 and "removed skill haiku (chat, 2 files)" in removed.stdout


def test_config_sections(tmp_path: Path) -> None:
    config: Config = make_config(tmp_path, "http://127.0.0.1:1/v1")
    assert config.skills.enabled and config.fetch.allow == []
