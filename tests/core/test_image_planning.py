"""An image turn's request is planned with the image in it: its tokens count in the
request's estimate (and so in pruning and compaction), an image that does not fit the
window is shrunk to the room the words leave, or left out with a word to the user, and
`/context` shows the images' part."""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from typing import Any

import pytest
from PIL import Image

from bots.runtime import Runtime
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, ServerTraits, prompt_tokens_of
from core.chat.images import (
    DATA_URL_PREFIX,
    MIN_IMAGE_TOKENS,
    ImagePart,
    image_part,
    image_tokens,
    shrunk_to_tokens,
)
from core.chat.media import IMAGES_LEFT_OUT
from core.config import Config, MediaConfig
from core.context.report import context_report
from tests.core.support import light_runtime
from tests.core.test_media import image_parts, photo, with_image


def size_of(part: dict[str, Any]) -> tuple[int, int]:
    data = base64.b64decode(part["image_url"]["url"].removeprefix(DATA_URL_PREFIX))
    with Image.open(io.BytesIO(data)) as picture:
        return picture.size


def test_an_image_costs_a_token_per_28_pixel_patch_or_the_configured_fixed_cost() -> None:
    assert image_tokens(ImagePart("", 1264, 949)) == 46 * 34 + 2
    assert image_tokens(ImagePart("", 28, 28)) == 3
    assert image_tokens(ImagePart("", 1264, 949), fixed=576) == 576


def test_an_image_shrinks_to_a_token_budget_or_is_too_small_to_use() -> None:
    part = image_part(photo(1600, 1200), MediaConfig())
    assert image_tokens(part) > 1_000
    smaller = shrunk_to_tokens(part, 300, MediaConfig())
    assert smaller is not None and image_tokens(smaller) <= 300
    assert smaller.width / smaller.height == pytest.approx(4 / 3, rel=0.05)
    assert shrunk_to_tokens(part, MIN_IMAGE_TOKENS - 1, MediaConfig()) is None
    assert shrunk_to_tokens(part, 10_000, MediaConfig()) is part


@pytest.fixture
async def rt(config: Config) -> AsyncIterator[Runtime]:
    config.media.vision = "on"
    runtime = light_runtime(config)
    yield runtime
    runtime.close()


def planned(runtime: Runtime, chat_id: str = "alice") -> dict[str, Any]:
    """The image turn's last request as it was planned (the live turn keeps its figures)."""
    chat = runtime.store.find_chat("terminal", chat_id)
    assert chat is not None and runtime.agent.live is not None
    row = runtime.agent.live.get(chat.id)
    assert row is not None
    return row.request


async def test_an_image_is_counted_in_its_request_plan(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    rt.config.llm.context_window = 32_768
    reply = await rt.agent.handle(with_image("what is this?", photo(1600, 1200)))
    assert reply is not None and "(saw 1 image)" in reply.text
    [part] = image_parts(fake_llm.requests[0])
    request = planned(rt)
    assert request["images"] == 1
    assert request["image_tokens"] == image_tokens(ImagePart("", *size_of(part))) > 1_000
    assert request["image_tokens"] < request["tokens"] <= request["window"]


async def test_an_image_too_large_for_a_small_window_is_shrunk_to_the_room_left(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    rt.config.llm.context_window = 2_048
    rt.config.llm.max_output_tokens = 512
    reply = await rt.agent.handle(with_image("what is this?", photo(1600, 1200)))
    assert reply is not None and "(saw 1 image)" in reply.text
    [part] = image_parts(fake_llm.requests[0])
    width, height = size_of(part)
    request = planned(rt)
    assert request["image_tokens"] == image_tokens(ImagePart("", width, height))
    whole = image_tokens(image_part(photo(1600, 1200), rt.config.media))
    assert MIN_IMAGE_TOKENS <= request["image_tokens"] < whole  # it did not fit whole
    assert request["tokens"] <= request["window"]  # and the request does not go over


async def test_an_image_that_cannot_fit_is_left_out_and_the_user_told(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    rt.config.llm.context_window = 2_048
    rt.config.llm.max_output_tokens = 512
    rt.config.media.image_tokens = 4_000  # a fixed cost no shrinking lowers
    reply = await rt.agent.handle(with_image("what is this?", photo(640, 480)))
    assert reply is not None and reply.text.startswith(IMAGES_LEFT_OUT)
    assert image_parts(fake_llm.requests[0]) == []
    request = planned(rt)
    assert (request["images"], request["image_tokens"]) == (0, 0)
    later = await rt.agent.handle(Inbound("terminal", "alice", "and now?"))
    assert later is not None and not later.text.startswith(IMAGES_LEFT_OUT)


async def test_context_shows_the_images_part(rt: Runtime) -> None:
    await rt.agent.handle(Inbound("terminal", "alice", "hello"))
    chat = rt.store.find_chat("terminal", "alice")
    assert chat is not None
    report = context_report(rt.planner, chat, [])
    assert report.parts()["images"] == 0 and sum(report.parts().values()) == report.total_tokens
    assert report.image_cap_tokens > 1_000
    line = f"images: none (an image is sent with its own turn only; ~{report.image_cap_tokens}"
    assert line in report.render()
    rt.config.media.image_tokens = 576
    assert (
        "~576 tokens for an image at the pixel cap" in context_report(rt.planner, chat, []).render()
    )


async def test_the_server_counting_the_image_finds_the_request_within_its_window(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """The fake enforces n_ctx as llama.cpp does, counting each image part by its patches:
    a 1600×1200 photo (~1,566 tokens whole) in a 2,048 window gets through, shrunk."""
    fake_llm.traits = ServerTraits(n_ctx=2_048)
    rt.config.llm.context_window = 2_048
    rt.config.llm.max_output_tokens = 512
    reply = await rt.agent.handle(with_image("what is this?", photo(1600, 1200)))
    assert reply is not None and "(saw 1 image)" in reply.text
    [request] = fake_llm.requests
    assert len(image_parts(request)) == 1
    assert prompt_tokens_of(request) + request["max_tokens"] <= 2_048


async def test_an_image_the_server_counts_higher_than_planned_is_fitted_on_overflow(
    rt: Runtime, fake_llm: FakeOpenAIServer
) -> None:
    """Planned at a fixed 100 tokens, the photo costs the server ~1,566: its overflow
    error leaves the image out, and the turn is answered with the words."""
    fake_llm.traits = ServerTraits(n_ctx=1_700)
    rt.config.llm.context_window = 2_048
    rt.config.llm.max_output_tokens = 512
    rt.config.media.image_tokens = 100
    reply = await rt.agent.handle(with_image("what is this?", photo(1600, 1200)))
    assert reply is not None and reply.text.startswith(IMAGES_LEFT_OUT)
    first, second = fake_llm.requests
    assert len(image_parts(first)) == 1 and image_parts(second) == []
