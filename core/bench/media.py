"""`mnemo bench media`: what images cost a chat. N image turns through the real turn (Pillow
re-encoding, the fake vision model), then:

- each image turn's request growth (bytes of the request with its image part, minus the
  same request with the text alone) against `[media] max_image_bytes`;
- the image bytes the stored session holds after the N turns (target 0: placeholders only),
  and the image parts a later text turn's request carries (target 0: never resent);
- the time an image adds to a turn (decode, resize, re-encode), p50 and p95.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import statistics
import time
from typing import Any

import click

from core.api import Attachment, Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply, prompt_tokens_of
from core.bench.support import bench_agent, echo_result, scripted_reply
from core.chat.media import image_bytes_in
from core.turn.agent import Agent

CHANNEL, CHAT_ID = "bench", "media"


def describing_reply(request: dict[str, Any]) -> FakeReply:
    """The fake vision model: a description for a message with images, else the bench's reply."""
    content = request["messages"][-1].get("content")
    if isinstance(content, list):
        images = sum(1 for part in content if part.get("type") == "image_url")
        return FakeReply(content=f"The picture ({images} image) shows a noisy grey pattern.")
    return scripted_reply(request)


def bench_image(turn: int, width: int, height: int) -> bytes:
    """A phone-photo-like JPEG that compresses poorly (smoothed noise), different each turn."""
    from PIL import Image

    small = Image.frombytes("RGB", (width // 8, height // 8), os.urandom(width * height * 3 // 64))
    picture = small.resize((width, height), Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    picture.save(buffer, "JPEG", quality=92)
    return buffer.getvalue()


def text_only(request: dict[str, Any]) -> dict[str, Any]:
    """`request` with every image part dropped and list contents back to their text."""
    messages = []
    for message in request["messages"]:
        content = message.get("content")
        if isinstance(content, list):
            texts = [part["text"] for part in content if part.get("type") == "text"]
            message = {**message, "content": " ".join(texts)}
        messages.append(message)
    return {**request, "messages": messages}


def _size(request: dict[str, Any]) -> int:
    return len(json.dumps(request).encode("utf-8"))


async def _run_turns(
    agent: Agent, turns: int, width: int, height: int
) -> tuple[list[float], list[dict[str, Any]]]:
    """Each image turn's time, and its last request as planned (the live turn's figures)."""
    spent: list[float] = []
    plans: list[dict[str, Any]] = []
    for turn in range(turns):
        image = Attachment("image", bench_image(turn, width, height), "image/png", "photo.png")
        inbound = Inbound(CHANNEL, CHAT_ID, f"what is on photo {turn}?", attachments=(image,))
        started = time.perf_counter()
        await agent.handle(inbound)
        spent.append(time.perf_counter() - started)
        plans.append(_planned(agent))
    await agent.handle(Inbound(CHANNEL, CHAT_ID, "and what did we talk about?"))
    return spent, plans


def _planned(agent: Agent) -> dict[str, Any]:
    chat = agent.store.find_chat(CHANNEL, CHAT_ID)
    row = agent.live.get(chat.id) if chat is not None and agent.live is not None else None
    return row.request if row is not None else {}


def _window_figures(plans: list[dict[str, Any]], window: int) -> dict[str, Any]:
    """The image turns against the window: the images' planned tokens, the largest planned
    request, and how many went over (target 0)."""
    images = [plan.get("image_tokens", 0) for plan in plans]
    return {
        "context_window": window,
        "usable_window": max((plan.get("window", 0) for plan in plans), default=0),
        "planned_image_tokens": {"max": max(images), "p50": int(statistics.median(images))},
        "planned_request_tokens_max": max(plan.get("tokens", 0) for plan in plans),
        "turns_over_window": sum(1 for plan in plans if plan.get("tokens", 0) > plan["window"]),
        "turns_image_left_out": sum(1 for plan in plans if not plan.get("images")),
    }


async def measure(turns: int, width: int, height: int, cap: int, window: int) -> dict[str, Any]:
    with FakeOpenAIServer(responder=describing_reply) as server:
        with bench_agent(server, window, lambda config, conn: []) as agent:
            agent.config.media.vision = "on"
            agent.config.media.max_image_bytes = cap
            # A small window keeps a quarter for the answer, as a local model's would.
            output = min(agent.config.llm.max_output_tokens, window // 4)
            agent.config.llm.max_output_tokens = output
            spent, plans = await _run_turns(agent, turns, width, height)
            chat = agent.store.find_chat(CHANNEL, CHAT_ID)
            assert chat is not None
            history = [message.content for message in agent.store.history(chat.id)]
            kept = sum(len(agent.files.read_bytes(p) or b"") for p in agent.files.list("bench/"))
        requests = [r for r in server.requests if not _is_summary(r)]
    image_requests, last = requests[:-1], requests[-1]
    added = [_size(request) - _size(text_only(request)) for request in image_requests]
    parts = [_image_parts(request) for request in requests]
    return {
        "image_turns": turns,
        "source_image": f"{width}x{height} JPEG",
        "cap_bytes": cap,
        "added_request_bytes": {"max": max(added), "p50": int(statistics.median(added))},
        "turns_over_cap": sum(1 for size in added if size > cap),
        "image_parts_per_image_turn": sorted(set(parts[:-1])),
        "image_parts_in_later_text_turn": parts[-1],
        "later_text_turn_request_bytes": _size(last),
        "stored_session_messages": len(history),
        "stored_session_image_bytes": image_bytes_in(history),
        "originals_kept_in_chat_files_bytes": kept,
        **_window_figures(plans, window),
        # The fake server's own count (a token per 28-pixel patch of each image part).
        "server_counted_tokens_max": max(prompt_tokens_of(r) for r in image_requests),
        "turn_ms": {
            "p50": round(statistics.median(spent) * 1000, 1),
            "p95": round(sorted(spent)[int(len(spent) * 0.95) - 1] * 1000, 1),
        },
    }


def _image_parts(request: dict[str, Any]) -> int:
    return sum(
        1
        for message in request["messages"]
        if isinstance(message.get("content"), list)
        for part in message["content"]
        if part.get("type") == "image_url"
    )


def _is_summary(request: dict[str, Any]) -> bool:
    from core.context.summary import is_summary_request

    return bool(is_summary_request(request["messages"]))


@click.command("media")
@click.option("--turns", default=100, show_default=True, help="Image turns in one chat.")
@click.option("--width", default=1600, show_default=True, help="Source image width.")
@click.option("--height", default=1200, show_default=True, help="Source image height.")
@click.option("--cap", default=1_000_000, show_default=True, help="[media] max_image_bytes.")
@click.option("--window", default=131_072, show_default=True, help="The context window.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object on stdout.")
def bench_media(turns: int, width: int, height: int, cap: int, window: int, as_json: bool) -> None:
    """What TURNS image turns cost a chat: each request's growth against the cap, its planned
    tokens against the window, image bytes left in the stored session (target 0), time per
    image turn."""
    result = asyncio.run(measure(turns, width, height, cap, window))

    def lines() -> list[str]:
        added = result["added_request_bytes"]
        return [
            f"{turns} image turns ({result['source_image']}), cap {cap:,} bytes",
            f"request growth per image turn: max {added['max']:,} B, p50 {added['p50']:,} B;"
            f" over the cap: {result['turns_over_cap']}",
            f"window {window:,}: images planned at max {result['planned_image_tokens']['max']}"
            f" tokens; largest request ~{result['planned_request_tokens_max']:,} of"
            f" {result['usable_window']:,} (the server counted"
            f" {result['server_counted_tokens_max']:,}); over the window:"
            f" {result['turns_over_window']};"
            f" image left out: {result['turns_image_left_out']}",
            f"image parts per image turn: {result['image_parts_per_image_turn']};"
            f" in a later text turn: {result['image_parts_in_later_text_turn']}",
            f"stored session: {result['stored_session_messages']} messages,"
            f" {result['stored_session_image_bytes']} image bytes",
            f"originals kept: {result['originals_kept_in_chat_files_bytes']:,} B",
            f"image turn: p50 {result['turn_ms']['p50']} ms, p95 {result['turn_ms']['p95']} ms",
        ]

    echo_result(result, as_json, lines)
