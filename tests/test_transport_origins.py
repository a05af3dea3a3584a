"""An asyncio transport left unclosed is reported naming the test and the calls that made it
(`tests/transport_origins.py`, installed by `tests/conftest.py`)."""

from __future__ import annotations

import asyncio
import gc
import warnings


async def a_connection_left_open() -> asyncio.StreamWriter:
    """A loopback connection whose client end is never closed (the server's end is)."""
    accepted: asyncio.Queue[asyncio.StreamWriter] = asyncio.Queue()
    server = await asyncio.start_server(
        lambda _reader, writer: accepted.put_nowait(writer), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    theirs = await accepted.get()
    theirs.close()
    await theirs.wait_closed()
    server.close()
    await server.wait_closed()
    return writer


def test_an_unclosed_transport_names_the_test_and_the_calls_that_made_it() -> None:
    loop = asyncio.new_event_loop()
    try:
        writer = loop.run_until_complete(a_connection_left_open())
    finally:
        loop.close()  # the transport is still open: it can no longer be closed cleanly
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        del writer
        gc.collect()
    messages = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
    assert any(
        message.startswith("unclosed transport <_SelectorSocketTransport")
        and "made by tests/test_transport_origins.py::test_an_unclosed_transport_names" in message
        and "a_connection_left_open" in message
        for message in messages
    ), messages
