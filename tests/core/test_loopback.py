"""The loopback fakes stop at once: every test that uses one stops it in its teardown."""

from __future__ import annotations

import time
import urllib.request

from core.bench.fakes.fake_openai import FakeOpenAIServer


def test_five_fake_servers_start_serve_and_stop_within_a_second() -> None:
    """socketserver's default poll (0.5 s) made each stop wait half a second: 2.5 s here."""
    started = time.monotonic()
    for _ in range(5):
        with (
            FakeOpenAIServer() as server,
            urllib.request.urlopen(f"{server.base_url}/models", timeout=5) as answer,
        ):
            assert answer.status == 200
    assert time.monotonic() - started < 1.0
