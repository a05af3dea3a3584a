"""An `Embedder` that remembers every vector it made, optionally in a file between runs.

Benchmarks that compare techniques embed the same texts again and again; this wrapper
embeds each distinct text once per process (and once ever with a cache file).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memory.embeddings import Embedder


class CachingEmbedder:
    """`inner`'s vectors, each document and query text embedded once."""

    def __init__(self, inner: Embedder, path: Path | None = None, queries: bool = True) -> None:
        self.inner = inner
        self.cache_queries = queries  # False: queries are embedded each time (timed benches)
        self.model_name = inner.model_name
        self.dim = inner.dim
        self.query_precision = getattr(inner, "query_precision", "float32")
        self.path = path
        self._documents: dict[str, Any] = {}  # text -> list of floats or numpy row
        self._queries: dict[str, Any] = {}
        if path is not None and path.exists():
            self._load(path)

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = list(dict.fromkeys(t for t in texts if t not in self._documents))
        if missing:
            self._documents.update(zip(missing, self.inner.embed(missing), strict=True))
        return [_as_list(self._documents[text]) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        if not self.cache_queries:
            return self.inner.embed_query(text)
        if text not in self._queries:
            self._queries[text] = self.inner.embed_query(text)
        return _as_list(self._queries[text])

    def save(self) -> None:
        """Write every vector to the cache file (if one was given)."""
        if self.path is None:
            return
        import numpy

        kinds: dict[str, Any] = {}
        for kind, vectors in (("doc", self._documents), ("query", self._queries)):
            kinds[f"{kind}_texts"] = numpy.array(list(vectors), dtype=object)
            kinds[f"{kind}_vectors"] = numpy.array(list(vectors.values()), dtype=numpy.float32)
        key = numpy.array([self.model_name, self.query_precision], dtype=object)
        with self.path.open("wb") as file:
            numpy.savez(file, key=key, **kinds)

    def _load(self, path: Path) -> None:
        import numpy

        data = numpy.load(path, allow_pickle=True)
        if list(data["key"]) != [self.model_name, self.query_precision]:
            return  # another model or precision: start afresh
        for kind, into in (("doc", self._documents), ("query", self._queries)):
            # numpy rows (a list of floats only when asked for: 100,000 vectors as Python
            # floats would take over a gigabyte)
            into.update(zip(map(str, data[f"{kind}_texts"]), data[f"{kind}_vectors"], strict=True))


def _as_list(vector: Any) -> list[float]:
    return vector if isinstance(vector, list) else [float(x) for x in vector.tolist()]
