"""Voice notes and audio files to text: one multipart POST to an OpenAI-compatible
`/v1/audio/transcriptions` (whisper.cpp's server, faster-whisper-server, vLLM, OpenAI).

Caps are checked before anything is sent; every failure is a `TranscriptionFailed` whose
message is written for the user.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import httpx

from core.config import MediaConfig
from core.errors import TranscriptionFailed

logger = logging.getLogger(__name__)

ENDPOINT = "/audio/transcriptions"
HOW_TO_ENABLE = (
    "Voice messages need a transcription server: set [media] transcription_url to an "
    "OpenAI-compatible /v1 address (whisper.cpp server, faster-whisper-server, vLLM or "
    "OpenAI; the key, if any, in $MNEMO_TRANSCRIPTION_KEY). Until then, please type it."
)


def transcription_endpoint(url: str) -> str:
    """`[media] transcription_url` as the full endpoint: a /v1 base gets /audio/transcriptions."""
    url = url.rstrip("/")
    return url if url.endswith(ENDPOINT) else url + ENDPOINT


def check_voice_caps(caps: MediaConfig, size: int, duration_s: float | None) -> None:
    """`TranscriptionFailed` when a recording is over `max_voice_bytes` or `max_voice_seconds`."""
    if size > caps.max_voice_bytes:
        raise TranscriptionFailed(
            f"the recording is {size / 1e6:.1f} MB; I transcribe up to "
            f"{caps.max_voice_bytes / 1e6:.0f} MB"
        )
    if duration_s is not None and duration_s > caps.max_voice_seconds:
        raise TranscriptionFailed(
            f"the recording is {duration_s:.0f} s long; I transcribe up to "
            f"{caps.max_voice_seconds} s"
        )


async def transcribe(
    caps: MediaConfig,
    data: bytes,
    filename: str,
    mime: str,
    duration_s: float | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """The transcript of `data`; `TranscriptionFailed` (for the user) when there is none."""
    if not caps.transcription_url:
        raise TranscriptionFailed(HOW_TO_ENABLE)
    check_voice_caps(caps, len(data), duration_s)
    key = (os.environ if env is None else env).get(caps.transcription_key_env, "")
    form = {"model": caps.transcription_model, "response_format": "json"}
    if caps.transcription_language:
        form["language"] = caps.transcription_language
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    files = {"file": (filename or "voice.ogg", data, mime or "application/octet-stream")}
    try:
        async with httpx.AsyncClient(timeout=caps.transcription_timeout_s) as client:
            response = await client.post(
                transcription_endpoint(caps.transcription_url),
                data=form,
                files=files,
                headers=headers,
            )
    except httpx.TimeoutException:
        raise TranscriptionFailed(
            f"the transcription server did not answer within {caps.transcription_timeout_s:g} s"
        ) from None
    except httpx.HTTPError as exc:
        raise TranscriptionFailed(f"the transcription server cannot be reached ({exc})") from None
    return _transcript(response)


def _transcript(response: httpx.Response) -> str:
    if response.status_code != 200:
        logger.warning(
            "transcription failed: HTTP %s: %s", response.status_code, response.text[:300]
        )
        raise TranscriptionFailed(f"the transcription server answered HTTP {response.status_code}")
    try:
        body: Any = response.json()
    except ValueError:
        body = {"text": response.text}  # response_format=text servers
    text = body.get("text") if isinstance(body, dict) else None
    if not isinstance(text, str):
        raise TranscriptionFailed("the transcription server's answer has no text")
    if not text.strip():
        raise TranscriptionFailed("the transcription is empty (silence, or nothing recognised)")
    return text.strip()
