"""Discord image attachments: fetched through discord.py's CDN call (dpytest serves it from
a local file) and sent as one image part."""

from __future__ import annotations

from pathlib import Path

import discord.ext.test as dpytest

from core.bench.fakes.fake_openai import FakeOpenAIServer
from core.chat.media import image_bytes_in
from tests.bots import test_discord
from tests.bots.test_discord import Harness, sent_messages
from tests.core.test_media import image_parts, photo

# The Discord tests' fixtures (dpytest's fake gateway around the real core), shared.
dc_runtime = test_discord.dc_runtime
harness = test_discord.harness


async def test_an_image_attachment_reaches_the_vision_model_and_not_the_history(
    harness: Harness,
    fake_llm: FakeOpenAIServer,
    tmp_path: Path,
) -> None:
    harness.runtime.config.media.vision = "on"
    alice = harness.config.members[0]
    dm = await alice.create_dm()
    picture = tmp_path / "screenshot.png"
    picture.write_bytes(photo(1600, 1200, "PNG"))
    await dpytest.message("what is this?", channel=dm, member=alice, attachments=[str(picture)])
    [reply] = sent_messages()
    assert reply.content.endswith("what is this? (saw 1 image)")
    [request] = fake_llm.requests
    assert len(image_parts(request)) == 1
    history = [content for _, _, content in harness.stored(str(dm.id))]
    assert history[0].startswith("[image file=media/") and image_bytes_in(history) == 0
