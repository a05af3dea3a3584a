"""`mnemo chat --image PATH` end to end, on both engines: the image reaches the fake vision
model as one part, the database keeps the placeholder and the file (a row on PostgreSQL)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.chat.media import image_bytes_in
from tests.conftest import run_mnemo, write_config
from tests.core.test_media import image_parts, photo
from tests.e2e.test_terminal import messages_in


@pytest.fixture
def url(storage_url: str) -> str:
    return storage_url


def test_chat_with_an_image_option_and_an_image_line(
    tmp_path: Path, fake_llm: FakeOpenAIServer, url: str
) -> None:
    extra = f'url = "{url}"\n[media]\nvision = "on"\nmax_image_bytes = 150000\n'
    config = write_config(tmp_path / "config.toml", fake_llm.base_url, tmp_path / "data", extra)
    picture = tmp_path / "cat.png"
    picture.write_bytes(photo(1800, 1200, "PNG"))
    lines = f"what is this?\n/image {picture} and again?\nthanks\n"
    result = run_mnemo(["chat", "--image", str(picture)], config, stdin=lines, timeout=300)
    assert result.returncode == 0, result.stderr
    first, second, third = result.stdout.splitlines()
    assert first.endswith("what is this? (saw 1 image)")
    assert second.endswith("and again? (saw 1 image)") and third == "echo: thanks"
    counts = [len(image_parts(request)) for request in fake_llm.requests]
    assert counts == [1, 1, 0]
    assert all(
        len(part["image_url"]["url"]) <= 150_000
        for request in fake_llm.requests
        for part in image_parts(request)
    )
    stored = [content for _, content in messages_in(url)]
    assert stored[0].startswith("[image file=media/") and image_bytes_in(stored) == 0
