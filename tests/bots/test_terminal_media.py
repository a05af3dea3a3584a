"""The terminal sends images from disk: `/image PATH caption` lines and `--image PATH`."""

from __future__ import annotations

import io
from pathlib import Path

from bots.runtime import Runtime
from bots.terminal import TerminalChannel
from core.bench.fakes.fake_openai import FakeOpenAIServer
from tests.core.test_media import image_parts, photo


async def test_image_lines_and_the_image_option_reach_the_vision_model(
    runtime: Runtime, fake_llm: FakeOpenAIServer, tmp_path: Path
) -> None:
    runtime.config.media.vision = "on"
    picture = tmp_path / "my cat.png"
    picture.write_bytes(photo(800, 600, "PNG"))
    lines = f'first words\n/image "{picture}" and this one?\n/image {tmp_path}/missing.png\nbye\n'
    out = io.StringIO()
    channel = TerminalChannel(
        "t1", stdin=io.StringIO(lines), stdout=out, interactive=False, image=picture
    )
    await channel.run(runtime.dispatcher)
    parts = [len(image_parts(request)) for request in fake_llm.requests]
    assert parts == [1, 1, 0]  # --image with the first line, the /image line, then none
    printed = out.getvalue().splitlines()
    assert printed[0].endswith("first words (saw 1 image)")
    assert printed[1].endswith("and this one? (saw 1 image)")
    assert printed[2].startswith("mnemo: cannot send that file:") and "missing.png" in printed[2]
    assert printed[3] == "echo: bye"
