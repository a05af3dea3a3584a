"""Named numpy arrays as one blob, read back without copying: the body of a saved ranking
snapshot (`memory.rank_snapshots`).

Layout: a magic line, the byte length of a JSON header, the header (each array's name,
dtype, shape and offset), then each array's bytes, every one starting on a 64-byte
boundary. Reading makes read-only arrays over the blob itself (`np.frombuffer`): no
decompression, no checksum pass and no copy, which `np.load` of an `.npz` spends most of
a 74 MB load on. Blobs of the earlier `.npz` layout are still read (with `np.load`).
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

import numpy as np

MAGIC = b"MNEMO-ARRAYS\n"
SNAPSHOT_FORMAT = 2  # the arrays' layout; a blob of another one is not loaded (built afresh)
NPZ_FORMAT = 1  # the earlier layout: an `.npz` with a `format` array
ALIGN = 64
_LENGTH = struct.Struct("<Q")


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def pack_arrays(arrays: dict[str, Any]) -> bytes:
    """`arrays` (contiguous copies are made where needed) as one blob."""
    parts = {name: np.asarray(value, order="C") for name, value in arrays.items()}
    entries: list[list[Any]] = []
    offsets: list[int] = []
    offset = 0
    for name, value in parts.items():
        entries.append([name, value.dtype.str, list(value.shape), offset])
        offsets.append(offset)
        offset = _aligned(offset + value.nbytes)
    header = json.dumps({"format": SNAPSHOT_FORMAT, "arrays": entries}).encode()
    start = _aligned(len(MAGIC) + _LENGTH.size + len(header))
    blob = bytearray(start + offset)
    blob[: len(MAGIC)] = MAGIC
    blob[len(MAGIC) : len(MAGIC) + _LENGTH.size] = _LENGTH.pack(len(header))
    blob[len(MAGIC) + _LENGTH.size : len(MAGIC) + _LENGTH.size + len(header)] = header
    for at, value in zip(offsets, parts.values(), strict=True):
        blob[start + at : start + at + value.nbytes] = value.tobytes()
    return bytes(blob)


def unpack_arrays(data: bytes) -> dict[str, Any] | None:
    """The arrays of a blob (read-only views of it); None for a blob of an unknown layout.
    `ValueError`/`KeyError` when it is cut short or malformed."""
    if not data.startswith(MAGIC):
        return _unpack_npz(data)
    size_at = len(MAGIC)
    if len(data) < size_at + _LENGTH.size:
        raise ValueError("snapshot header is cut short")
    (size,) = _LENGTH.unpack_from(data, size_at)
    header = json.loads(bytes(data[size_at + _LENGTH.size : size_at + _LENGTH.size + size]))
    if header.get("format") != SNAPSHOT_FORMAT:
        return None
    start = _aligned(size_at + _LENGTH.size + size)
    found: dict[str, Any] = {}
    for name, dtype, shape, offset in header["arrays"]:
        kind = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        if start + offset + count * kind.itemsize > len(data):
            raise ValueError(f"snapshot array {name!r} is cut short")
        flat = np.frombuffer(data, dtype=kind, count=count, offset=start + offset)
        found[str(name)] = flat.reshape(tuple(shape))
    return found


def _unpack_npz(data: bytes) -> dict[str, Any] | None:
    with np.load(io.BytesIO(data), allow_pickle=False) as loaded:
        if "format" not in loaded.files or int(loaded["format"]) != NPZ_FORMAT:
            return None
        return {name: loaded[name] for name in loaded.files}
