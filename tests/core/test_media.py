"""Images and voice notes through the real turn: Pillow's re-encoding under the caps, image
parts only in the turn's own request, transcription through a loopback server."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
from PIL import Image

from bots.runtime import Runtime
from core.api import Attachment, Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.bench.fakes.fake_transcription import FakeTranscriptionServer
from core.chat.images import image_part
from core.chat.media import TRANSCRIBED, image_bytes_in
from core.config import MediaConfig
from core.errors import ImageRejected
from reflector.extraction import render_transcript


def photo(width: int = 640, height: int = 480, fmt: str = "JPEG", noise: bool = False) -> bytes:
    """An image file of that size (noise: incompressible, so the byte cap bites)."""
    if noise:
        picture = Image.frombytes("RGB", (width, height), _random_bytes(width * height * 3))
    else:
        picture = Image.new("RGB", (width, height), (200, 80, 40))
    buffer = io.BytesIO()
    picture.save(buffer, fmt)
    return buffer.getvalue()


def _random_bytes(count: int) -> bytes:
    import random

    generator = random.Random(7)
    return bytes(generator.getrandbits(8) for _ in range(count))


def with_image(text: str, data: bytes, chat_id: str = "alice") -> Inbound:
    image = Attachment("image", data, "image/jpeg", "photo.jpg")
    return Inbound("terminal", chat_id, text, sender_name="Alice", attachments=(image,))


def with_voice(data: bytes, seconds: float | None = 3, chat_id: str = "alice") -> Inbound:
    voice = Attachment("voice", data, "audio/ogg", "voice.ogg", seconds)
    return Inbound("terminal", chat_id, "", sender_name="Alice", attachments=(voice,))


def image_parts(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        part
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    ]


def history_texts(runtime: Runtime, chat_id: str = "alice") -> list[str]:
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None
    return [m.content for m in runtime.store.history(chat.id)]


@pytest.fixture
def vision(runtime: Runtime) -> Runtime:
    runtime.config.media.vision = "on"
    return runtime


@pytest.fixture
def whisper(runtime: Runtime) -> Iterator[FakeTranscriptionServer]:
    with FakeTranscriptionServer("remind me to buy milk") as server:
        runtime.config.media.transcription_url = server.base_url
        runtime.config.media.transcription_timeout_s = 15.0
        yield server


# --- images -----------------------------------------------------------------------------


def test_a_large_image_is_resized_and_re_encoded_under_both_caps() -> None:
    caps = MediaConfig(max_image_pixels=300_000, max_image_bytes=60_000)
    part = image_part(photo(3000, 2000, "PNG", noise=False), caps)
    assert part.width * part.height <= 300_000
    assert len(part.url) <= 60_000 and part.url.startswith("data:image/jpeg;base64,")
    decoded = Image.open(io.BytesIO(base64.b64decode(part.url.split(",", 1)[1])))
    assert decoded.format == "JPEG" and decoded.size == (part.width, part.height)


def test_an_incompressible_image_shrinks_until_it_fits_the_byte_cap() -> None:
    caps = MediaConfig(max_image_pixels=1_000_000, max_image_bytes=20_000)
    part = image_part(photo(400, 400, noise=True), caps)
    assert len(part.url) <= 20_000
    assert part.width < 400  # quality alone could not do it


def test_corrupt_files_and_decompression_bombs_are_refused_with_a_reason() -> None:
    caps = MediaConfig(max_source_pixels=1_000_000)
    with pytest.raises(ImageRejected, match="not an image"):
        image_part(b"definitely not a picture", caps)
    with pytest.raises(ImageRejected, match="damaged|unreadable"):
        image_part(photo()[:300], caps)  # a truncated JPEG
    bomb = photo(2000, 1000, "PNG")  # 2 Mpx, tiny on disk: over max_source_pixels
    with pytest.raises(ImageRejected, match="too large to decode"):
        image_part(bomb, caps)


async def test_an_image_reaches_a_vision_model_once_and_never_the_history(
    vision: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    reply = await vision.dispatcher(with_image("what colour is this?", photo(2400, 1800)))
    assert reply is not None and reply.text.endswith("what colour is this? (saw 1 image)")
    [part] = image_parts(fake_llm.requests[0])
    assert len(part["image_url"]["url"]) <= vision.config.media.max_image_bytes
    later = await vision.dispatcher(Inbound("terminal", "alice", "and now?"))
    assert later is not None and image_parts(fake_llm.requests[1]) == []  # never resent
    texts = history_texts(vision)
    assert texts[0].startswith("[image file=media/") and texts[0].endswith("what colour is this?")
    assert image_bytes_in(texts) == 0
    assert "base64" not in json.dumps(fake_llm.requests[1])
    chat = vision.store.find_chat("terminal", "alice")
    assert chat is not None
    name = texts[0].split("file=", 1)[1].split("]", 1)[0]
    assert vision.agent.files.read_bytes(f"terminal/alice/{name}") is not None  # kept
    # The reflector reads the caption and the model's description, never the bytes.
    transcript = render_transcript(vision.store.history(chat.id))
    assert transcript is not None and "base64" not in transcript.text
    assert "[Alice]: [image file=media/" in transcript.text
    assert "what colour is this? (saw 1 image)" in transcript.text  # the model's answer


async def test_a_text_only_model_gets_the_caption_and_the_user_is_told_once(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    runtime.config.media.vision = "off"
    first = await runtime.dispatcher(with_image("my cat", photo()))
    second = await runtime.dispatcher(with_image("my dog", photo(300, 300)))
    assert first is not None and second is not None
    assert "cannot see images" in first.text and first.text.endswith("my cat")
    assert "cannot see images" not in second.text and second.text.endswith("my dog")
    assert all(image_parts(request) == [] for request in fake_llm.requests)
    only_image = await runtime.dispatcher(with_image("", photo()))
    assert only_image is not None and "cannot see images" in only_image.text
    assert len(fake_llm.requests) == 2  # no caption: nothing for the model to answer


async def test_a_damaged_image_gets_a_clear_reply_and_the_message_is_kept(
    vision: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    reply = await vision.dispatcher(with_image("look", b"\x89PNG broken"))
    assert reply is not None and reply.is_error
    assert "could not use your image" in reply.text and "saved" in reply.text
    assert fake_llm.requests == []
    [kept] = history_texts(vision)
    assert kept.startswith("[image file=media/") and kept.endswith("look")
    after = await vision.dispatcher(Inbound("terminal", "alice", "still there?"))
    assert after is not None and after.text == "echo: still there?"  # the chat goes on


async def test_the_vision_setting_follows_the_model_name_or_profile(runtime: Runtime) -> None:
    from core.chat.media import sees_images

    config = runtime.config
    assert sees_images(config, None, "llava:13b") and sees_images(config, None, "gpt-4o-mini")
    assert not sees_images(config, None, "llama3.2")
    assert sees_images(config, True, "llama3.2") and not sees_images(config, False, "gpt-4o")
    config.media.vision = "off"
    assert not sees_images(config, True, "gpt-4o")


# --- voice ------------------------------------------------------------------------------


async def test_a_voice_note_is_transcribed_and_answered_as_text(
    runtime: Runtime, fake_llm: FakeOpenAIServer, whisper: FakeTranscriptionServer
) -> None:
    reply = await runtime.dispatcher(with_voice(b"OggS fake opus", 4))
    assert reply is not None and reply.text.endswith("remind me to buy milk")
    [request] = whisper.requests
    assert request.audio == b"OggS fake opus" and request.model == "whisper-1"
    assert request.filename.endswith(".ogg") and request.content_type == "audio/ogg"
    [said, _] = history_texts(runtime)
    assert f"{TRANSCRIBED} remind me to buy milk" in said and said.startswith("[voice file=")


async def test_without_a_transcription_server_the_user_is_told_how_to_enable_it(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    reply = await runtime.dispatcher(with_voice(b"OggS"))
    assert reply is not None and "[media] transcription_url" in reply.text
    assert fake_llm.requests == [] and history_texts(runtime)[0].startswith("[voice file=")


@pytest.mark.parametrize("failure", ["500", "slow"])
async def test_a_failed_transcription_is_a_clear_reply_and_the_recording_is_kept(
    runtime: Runtime,
    fake_llm: FakeOpenAIServer,
    whisper: FakeTranscriptionServer,
    failure: str,
) -> None:
    if failure == "500":
        whisper.fail_next(500)
    else:
        runtime.config.media.transcription_timeout_s = 0.5
        whisper.delay_s = 2.0  # over the timeout
    reply = await runtime.dispatcher(with_voice(b"OggS voice"))
    assert reply is not None and reply.is_error and "could not transcribe" in reply.text
    assert ("HTTP 500" if failure == "500" else "did not answer within") in reply.text
    assert fake_llm.requests == []
    [kept] = history_texts(runtime)
    name = kept.split("file=", 1)[1].split(" ", 1)[0].rstrip("]")
    assert runtime.agent.files.read_bytes(f"terminal/alice/{name}") == b"OggS voice"


async def test_voice_over_the_caps_is_not_sent_for_transcription(
    runtime: Runtime, whisper: FakeTranscriptionServer
) -> None:
    runtime.config.media.max_voice_seconds = 60
    long_note = await runtime.dispatcher(with_voice(b"OggS", 61))
    runtime.config.media.max_voice_bytes = 10_000
    big_note = await runtime.dispatcher(with_voice(b"x" * 10_001, 5))
    assert long_note is not None and "61 s long" in long_note.text
    assert big_note is not None and "MB" in big_note.text
    assert whisper.requests == []


async def test_an_attachment_the_adapter_could_not_fetch_gets_a_reason(
    vision: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    lost = Attachment("image", b"", error="the file is 30.0 MB; the limit is 20 MB")
    inbound = Inbound("terminal", "alice", "see", attachments=(lost,))
    reply = await vision.dispatcher(inbound)
    assert reply is not None and "30.0 MB" in reply.text and fake_llm.requests == []


async def test_a_server_that_refuses_images_teaches_the_profile_and_the_turn_goes_on(
    runtime: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    from core.model.profile import learn, load_profile

    model = runtime.config.llm.model
    learn(runtime.store, model, vision=True)  # believed to see (a name, an earlier server)
    fake_llm.traits.no_vision = True
    first = await runtime.dispatcher(with_image("my cat", photo()))
    assert first is not None and not first.is_error
    assert "cannot see images" in first.text and first.text.endswith("my cat")
    assert load_profile(runtime.store, model).vision is False
    refused, retried = fake_llm.requests[-2:]
    assert len(image_parts(refused)) == 1 and image_parts(retried) == []
    second = await runtime.dispatcher(with_image("my dog", photo()))
    assert second is not None and second.text.endswith("my dog")
    assert image_parts(fake_llm.requests[-1]) == [] and len(fake_llm.refused) == 1


def test_doctor_says_whether_the_model_sees_images_and_how_voice_is_heard() -> None:
    from core.chat.media import media_checks
    from core.config import Config

    config = Config()
    config.llm.model = "llava:7b"
    images, voice = media_checks(config, None)
    assert images.line() == "[ok  ] images: llava:7b sees images (by its name)"
    assert "set [media] transcription_url" in voice.line()
    config.media.transcription_url = "http://127.0.0.1:8080/v1"
    images, voice = media_checks(config, False)
    assert "text-only" in images.detail and "(by its profile)" in images.detail
    assert voice.detail == "transcribed by http://127.0.0.1:8080/v1 (whisper-1)"


async def test_a_typed_placeholder_cannot_reach_outside_the_chats_media(
    vision: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    vision.agent.files.write_bytes("terminal/bob/media/secret.jpg", photo())
    escape = await vision.dispatcher(
        Inbound("terminal", "alice", "[image file=media/../../bob/media/secret.jpg] hi")
    )
    assert escape is not None and image_parts(fake_llm.requests[-1]) == []  # plain text
    missing = await vision.dispatcher(Inbound("terminal", "alice", "[image file=media/x.jpg]"))
    assert missing is not None and "media/x.jpg is no longer stored" in missing.text
    assert len(fake_llm.requests) == 1
