"""The gateway half of the fake Discord API: one WebSocket session per bot connection.

RFC 6455 framing by hand on the request's socket (text frames, no compression, as
discord.py asks for none): HELLO, then READY and GUILD_CREATE after the bot's IDENTIFY,
heartbeats acknowledged, and dispatches (MESSAGE_CREATE, INTERACTION_CREATE) pushed
from the test thread through a queue.
"""

from __future__ import annotations

import base64
import hashlib
import json
import queue
import select
import socket
import struct
from collections.abc import Callable
from typing import Any

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_DISPATCH, OP_HEARTBEAT, OP_IDENTIFY, OP_HELLO, OP_HEARTBEAT_ACK = 0, 1, 2, 10, 11
TEXT, CLOSE, PING, PONG = 0x1, 0x8, 0x9, 0xA
POLL_S = 0.01


def accept_key(key: str) -> str:
    """The `Sec-WebSocket-Accept` answer to the client's `Sec-WebSocket-Key`."""
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def encode_frame(opcode: int, payload: bytes) -> bytes:
    """A final, unmasked server frame."""
    head = bytes([0x80 | opcode])
    size = len(payload)
    if size < 126:
        return head + bytes([size]) + payload
    if size < 1 << 16:
        return head + bytes([126]) + struct.pack("!H", size) + payload
    return head + bytes([127]) + struct.pack("!Q", size) + payload


def _read_exact(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("the client closed the socket")
        data += chunk
    return data


def read_frame(sock: socket.socket) -> tuple[int, bytes]:
    """One client frame (masked, as RFC 6455 requires of clients): (opcode, payload)."""
    first, second = _read_exact(sock, 2)
    size = second & 0x7F
    if size == 126:
        (size,) = struct.unpack("!H", _read_exact(sock, 2))
    elif size == 127:
        (size,) = struct.unpack("!Q", _read_exact(sock, 8))
    mask = _read_exact(sock, 4) if second & 0x80 else b"\0\0\0\0"
    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(_read_exact(sock, size)))
    return first & 0x0F, payload


class GatewaySession:
    """One bot's connection: what it identified with, and the events waiting to go out."""

    def __init__(self, sock: socket.socket, on_identify: Callable[[dict[str, Any]], list[Any]]):
        self.sock = sock
        self.on_identify = on_identify
        self.outbox: queue.Queue[dict[str, Any]] = queue.Queue()
        self.sequence = 0
        self.closed = False

    def send(self, op: int, data: Any, event: str | None = None) -> None:
        frame: dict[str, Any] = {"op": op, "d": data}
        if op == OP_DISPATCH:
            self.sequence += 1
            frame.update(t=event, s=self.sequence)
        self.sock.sendall(encode_frame(TEXT, json.dumps(frame).encode()))

    def dispatch(self, event: str, data: dict[str, Any]) -> None:
        """Queue a dispatch for the serving thread to send (callable from any thread)."""
        self.outbox.put({"event": event, "data": data})

    def serve(self) -> None:
        """HELLO, then answer the client and send queued events until it closes."""
        self.send(OP_HELLO, {"heartbeat_interval": 45_000})
        try:
            while not self.closed:
                self._send_queued()
                readable, _, _ = select.select([self.sock], [], [], POLL_S)
                if readable:
                    self._receive()
        except (ConnectionError, OSError):
            pass
        finally:
            self.closed = True

    def _send_queued(self) -> None:
        while not self.outbox.empty():
            item = self.outbox.get()
            self.send(OP_DISPATCH, item["data"], item["event"])

    def _receive(self) -> None:
        opcode, payload = read_frame(self.sock)
        if opcode == CLOSE:
            self.sock.sendall(encode_frame(CLOSE, payload[:2]))
            self.closed = True
        elif opcode == PING:
            self.sock.sendall(encode_frame(PONG, payload))
        elif opcode == TEXT:
            message = json.loads(payload)
            if message["op"] == OP_HEARTBEAT:
                self.send(OP_HEARTBEAT_ACK, None)
            elif message["op"] == OP_IDENTIFY:
                for event, data in self.on_identify(message["d"]):
                    self.send(OP_DISPATCH, data, event)
