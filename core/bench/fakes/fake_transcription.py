"""A fake OpenAI-compatible transcription server on 127.0.0.1: `POST /v1/audio/transcriptions`
with a multipart body (`file`, `model`, `response_format`, `language`), as whisper.cpp's
server, faster-whisper-server, vLLM and OpenAI take it.

It parses the real multipart body (so a malformed one is a 400, like the real servers),
records each request and answers `{"text": …}`; `fail_next()` scripts a status (a 500),
`delay_s` a slow answer.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any

from core.bench.fakes.loopback import JsonHandler, LoopbackServer


@dataclass(frozen=True)
class TranscriptionRequest:
    """What one request carried."""

    model: str
    filename: str
    content_type: str
    audio: bytes
    language: str
    authorization: str


class FakeTranscriptionServer(LoopbackServer):
    """`with FakeTranscriptionServer() as server:`; `server.base_url` ends in /v1."""

    def __init__(self, transcript: str = "hello from a voice note") -> None:
        self.transcript = transcript
        self.requests: list[TranscriptionRequest] = []
        self.delay_s = 0.0
        self._failures: list[int] = []
        self._lock = threading.Lock()
        super().__init__(self._handler_class())

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    def fail_next(self, status: int, times: int = 1) -> None:
        with self._lock:
            self._failures += [status] * times

    def answer(self, path: str, headers: Any, body: bytes) -> tuple[int, str]:
        if path.rstrip("/") != "/v1/audio/transcriptions":
            return 404, json.dumps({"error": {"message": "not found"}})
        request = parse_request(headers, body)
        if request is None:
            return 400, json.dumps({"error": {"message": "expected multipart/form-data with file"}})
        with self._lock:
            self.requests.append(request)
            failure = self._failures.pop(0) if self._failures else None
        if self.delay_s:
            time.sleep(self.delay_s)
        if failure is not None:
            return failure, json.dumps({"error": {"message": "fake transcription failure"}})
        return 200, json.dumps({"text": self.transcript})

    def _handler_class(self) -> type[JsonHandler]:
        server = self

        class Handler(JsonHandler):
            def do_POST(self) -> None:
                body = self.read_body()
                self.send_json(*server.answer(self.path, self.headers, body))

        return Handler


def parse_request(headers: Any, body: bytes) -> TranscriptionRequest | None:
    """The multipart form's fields, or None when it is not one or has no `file` part."""
    content_type = headers.get("Content-Type") or ""
    if not content_type.startswith("multipart/form-data"):
        return None
    head = f"Content-Type: {content_type}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + body)
    fields: dict[str, str] = {}
    audio: tuple[str, str, bytes] | None = None
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        payload = part.get_payload(decode=True)
        if not isinstance(name, str) or not isinstance(payload, bytes):
            continue
        if name == "file":
            audio = (part.get_filename() or "", part.get_content_type(), payload)
        else:
            fields[name] = payload.decode("utf-8")
    if audio is None:
        return None
    return TranscriptionRequest(
        model=fields.get("model", ""),
        filename=audio[0],
        content_type=audio[1],
        audio=audio[2],
        language=fields.get("language", ""),
        authorization=headers.get("Authorization") or "",
    )
