"""Photos and voice notes from Telegram: fetched with getFile from the fake Bot API, sent to
the fake model as one image part (or transcribed by the loopback transcription server)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bots.runtime import Runtime
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_telegram import FakeTelegramServer
from core.bench.fakes.fake_transcription import FakeTranscriptionServer
from core.chat.media import TRANSCRIBED, image_bytes_in
from tests.bots.test_telegram import (
    ALICE,
    GROUP,
    eventually,
    private,
    replies_to,
    running,
    stored,
)
from tests.core.test_media import image_parts, photo


@pytest.fixture
def whisper(tg_runtime: Runtime) -> Iterator[FakeTranscriptionServer]:
    with FakeTranscriptionServer("see you at eight") as server:
        tg_runtime.config.media.transcription_url = server.base_url
        yield server


def photo_sizes(tg: FakeTelegramServer, data: bytes) -> list[dict[str, object]]:
    """A message's `photo` field: Telegram's sizes, smallest first (the bot takes the last)."""
    thumb = tg.add_file(photo(90, 60))
    full = tg.add_file(data)
    return [{**thumb, "width": 90, "height": 60}, {**full, "width": 2400, "height": 1600}]


async def test_a_photo_goes_through_get_file_to_the_vision_model_as_one_part(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    tg_runtime.config.media.vision = "on"
    tg_runtime.config.media.max_image_bytes = 200_000
    big = photo(2400, 1600, "PNG", noise=False)
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, photo=photo_sizes(tg, big), caption="what is it?")
        await eventually(lambda: bool(replies_to(tg, 101)))
    [reply] = replies_to(tg, 101)
    assert str(reply["text"]).endswith("what is it? (saw 1 image)")
    [asked] = tg.sent("getFile")
    assert asked["file_id"] == "file2.jpg"  # the largest size
    [request] = fake_llm.requests
    [part] = image_parts(request)
    assert len(part["image_url"]["url"]) <= 200_000
    history = [content for _, _, content in stored(tg_runtime, "101")]
    assert history[0].startswith("[image file=media/") and history[0].endswith("what is it?")
    assert image_bytes_in(history) == 0


async def test_a_text_only_model_is_named_once_and_the_caption_goes_through(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    tg_runtime.config.media.vision = "off"
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, photo=photo_sizes(tg, photo()), caption="my cat")
        await eventually(lambda: len(replies_to(tg, 101)) == 1)
        tg.push_message(private(ALICE), ALICE, photo=photo_sizes(tg, photo()), caption="again")
        await eventually(lambda: len(replies_to(tg, 101)) == 2)
    first, second = (str(reply["text"]) for reply in replies_to(tg, 101))
    assert "cannot see images" in first and first.endswith("my cat")
    assert "cannot see images" not in second and second.endswith("again")
    assert all(image_parts(request) == [] for request in fake_llm.requests)


async def test_a_voice_note_is_transcribed_and_answered(
    tg_runtime: Runtime,
    tg: FakeTelegramServer,
    fake_llm: FakeOpenAIServer,
    whisper: FakeTranscriptionServer,
) -> None:
    voice = {**tg.add_file(b"OggS opus voice", ".oga"), "duration": 3, "mime_type": "audio/ogg"}
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, voice=voice)
        await eventually(lambda: bool(replies_to(tg, 101)))
    [reply] = replies_to(tg, 101)
    assert str(reply["text"]).endswith("see you at eight")
    [request] = whisper.requests
    assert request.audio == b"OggS opus voice" and request.filename.endswith(".ogg")
    said = stored(tg_runtime, "101")[0][2]
    assert said.startswith("[voice file=media/") and f"{TRANSCRIBED} see you at eight" in said


async def test_unaddressed_group_photos_are_not_fetched(
    tg_runtime: Runtime, tg: FakeTelegramServer
) -> None:
    async with running(tg_runtime, tg):
        tg.push_message(GROUP, ALICE, photo=photo_sizes(tg, photo()), caption="holiday")
        await eventually(lambda: len(stored(tg_runtime, "-1001")) == 1)
    assert tg.sent("getFile") == []
    assert stored(tg_runtime, "-1001")[0][2] == "[image] holiday"


async def test_a_file_over_the_download_cap_is_not_fetched_and_the_user_is_told(
    tg_runtime: Runtime, tg: FakeTelegramServer, fake_llm: FakeOpenAIServer
) -> None:
    tg_runtime.config.media.vision = "on"
    sizes = photo_sizes(tg, photo())
    sizes[-1]["file_size"] = 30_000_000
    async with running(tg_runtime, tg):
        tg.push_message(private(ALICE), ALICE, photo=sizes)
        await eventually(lambda: bool(replies_to(tg, 101)))
    [reply] = replies_to(tg, 101)
    assert "30.0 MB" in str(reply["text"]) and "saved" in str(reply["text"])
    assert tg.sent("getFile") == [] and fake_llm.requests == []
