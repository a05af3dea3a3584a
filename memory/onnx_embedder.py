"""ONNX Runtime encoding of an exported sentence-transformers model, without torch.

Documents get the same vectors as sentence-transformers: the exported graph is the model's
transformer; mean pooling and L2 normalisation run here in numpy, exactly as the pipeline
`Transformer -> Pooling(mean) -> Normalize` does, and texts are tokenised with the model's
own `tokenizer.json` (the `tokenizers` package, the same ids as the transformers wrapper).
Queries run by default on a fused int8 model of the same weights. Only onnxruntime, numpy
and tokenizers are imported here; `memory.onnx_export` makes the files (with torch), once.

The exported files live under `$MNEMO_CACHE_DIR/onnx/<content key>/` (default
`~/.cache/mnemo/onnx`): `model.onnx`, the int8 query model beside it, or a note saying why
there is none (then queries use the float model, and no later start tries again).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.errors import EmbeddingUnavailable
from memory.model_files import ModelFiles, cache_root

logger = logging.getLogger(__name__)

BATCH_SIZE = 64
QUERY_CACHE_SIZE = 512
QUERY_PRECISIONS = ("int8", "float32")
FLOAT_MODEL = "model.onnx"
QUERY_MODEL = "query-v2.int8.onnx"
QUERY_FAILED = "query-int8.failed"
MANIFEST = "manifest.json"
QUERY_THREADS = 1
"""Threads of the query session. One: a query is a handful of tokens, and on a shared 2-core
host a second thread mostly waits for the other (earlier measurement, with FTS5 running
beside it: p50 14.3 ms with two threads against 10.0 ms with one)."""

QUERY_SESSION_DISABLED = ("SkipLayerNormFusion",)
"""ONNX Runtime fusions kept off in the int8 query session: its SkipLayerNormalization kernel
took 46 us a call where LayerNormalization + Add took 18 us (onnxruntime 1.32, one thread)."""


@dataclass(frozen=True)
class ExportedModel:
    """Where a model's exported files are (or will be made) in the cache."""

    files: ModelFiles
    folder: Path

    @property
    def float_path(self) -> Path:
        return self.folder / FLOAT_MODEL

    @property
    def query_path(self) -> Path:
        return self.folder / QUERY_MODEL

    @property
    def query_failed_path(self) -> Path:
        return self.folder / QUERY_FAILED

    @property
    def manifest_path(self) -> Path:
        return self.folder / MANIFEST

    def record(self, path: Path) -> None:
        """Note a file made whole in the manifest (its size: a cheap check at every start)."""
        sizes = self.recorded()
        sizes[path.name] = path.stat().st_size
        temporary = self.folder / f".{MANIFEST}.{os.getpid()}.tmp"
        temporary.write_text(json.dumps({"model": self.files.name, "sizes": sizes}), "utf-8")
        os.replace(temporary, self.manifest_path)

    def recorded(self) -> dict[str, int]:
        try:
            found = json.loads(self.manifest_path.read_text(encoding="utf-8"))["sizes"]
            return {str(name): int(size) for name, size in found.items()}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return {}

    def intact(self, path: Path) -> bool:
        """Whether `path` is whole: recorded in the manifest, with that size."""
        size = self.recorded().get(path.name)
        return size is not None and path.is_file() and path.stat().st_size == size

    def ready(self, precision: str) -> bool:
        """Whether nothing needs making (torch) before queries in `precision` can run."""
        if not self.intact(self.float_path):
            return False
        settled = self.intact(self.query_path) or self.query_failed_path.is_file()
        return precision == "float32" or settled


def exported_model(files: ModelFiles) -> ExportedModel:
    return ExportedModel(files, cache_root() / "onnx" / files.content_key())


def session_for(path: Path, threads: int, disabled_optimizers: tuple[str, ...] = ()) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if threads > 1:
        # Idle pool threads would otherwise spin for a while after each run, taking the CPU
        # from the next query: on 2 cores with one busy, a query right after a memory was
        # stored took p50 9.4 ms with spinning, 5.6 ms without; batch throughput unchanged.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return onnxruntime.InferenceSession(
        str(path),
        sess_options=options,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(disabled_optimizers),
    )


def default_threads() -> int:
    """Threads of the batch session: `$MNEMO_ONNX_THREADS`, else two (at most the CPUs)."""
    try:
        wanted = int(os.environ.get("MNEMO_ONNX_THREADS", "0"))
    except ValueError:
        wanted = 0
    return wanted if wanted > 0 else max(1, min(2, os.cpu_count() or 1))


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Mean of the unmasked token vectors, scaled to unit length (float32 rows)."""
    import numpy as np

    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return (pooled / norms).astype(np.float32)


def model_tokenizer(files: ModelFiles, *, padding: bool) -> Any:
    """The model's `tokenizer.json`, truncating at its sequence limit as sentence-transformers
    does, and padding a batch to its longest text when asked."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(files.tokenizer_path))
    tokenizer.enable_truncation(files.max_length)
    if padding:
        pad_id = tokenizer.token_to_id(files.pad_token) or 0
        tokenizer.enable_padding(pad_id=pad_id, pad_token=files.pad_token)
    else:
        tokenizer.no_padding()
    return tokenizer


def encode_batch(session: Any, tokenizer: Any, texts: list[str]) -> list[list[float]]:
    """Mean-pooled, unit-length vectors of one batch of texts."""
    import numpy as np

    if not texts:
        return []
    encodings = tokenizer.encode_batch(texts)
    columns = {
        "input_ids": [e.ids for e in encodings],
        "attention_mask": [e.attention_mask for e in encodings],
        "token_type_ids": [e.type_ids for e in encodings],
    }
    names = {item.name for item in session.get_inputs()}
    feeds = {k: np.asarray(v, np.int64) for k, v in columns.items() if k in names}
    hidden = session.run(["last_hidden_state"], feeds)[0]  # run() is thread-safe
    mask = np.asarray(columns["attention_mask"], np.int64)
    result: list[list[float]] = mean_pool(hidden, mask).tolist()
    return result


def encode_one(session: Any, tokenizer: Any, text: str, inputs: frozenset[str]) -> list[float]:
    """The unit-length vector of one text: `encode_batch` of `[text]` to the bit, with less
    around the model run (a query's path). The text is not padded, so every token counts in
    the mean: no mask to multiply by, and the tokenizer's single `encode` (the batch call
    costs ~0.1 ms more). `inputs`: the session's input names, read once."""
    import numpy as np

    encoding = tokenizer.encode(text)
    ids = np.asarray([encoding.ids], np.int64)
    columns = {
        "input_ids": ids,
        "attention_mask": np.asarray([encoding.attention_mask], np.int64),
        "token_type_ids": np.asarray([encoding.type_ids], np.int64),
    }
    feeds = {name: value for name, value in columns.items() if name in inputs}
    hidden = session.run(["last_hidden_state"], feeds)[0]
    pooled = hidden.sum(axis=1) / np.float32(max(ids.shape[1], 1))
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    result: list[float] = (pooled / norms).astype(np.float32)[0].tolist()
    return result


class OnnxEmbedder:
    """The `Embedder` protocol over ONNX Runtime sessions (thread-safe).

    Queries run on a one-thread session, of the fused int8 model by default. Documents are
    encoded by the float model with `default_threads()`, the same vectors as
    sentence-transformers; that session opens at the first document (a process that only
    answers queries never holds it).
    """

    def __init__(self, exported: ExportedModel, query_precision: str = "int8") -> None:
        files = exported.files
        self.model_name = files.name
        self.dim = files.dim
        self._exported = exported
        self._batch_tokenizer = model_tokenizer(files, padding=True)
        self._single_tokenizer = model_tokenizer(files, padding=False)
        self._documents: Any | None = None
        self._documents_lock = threading.Lock()
        self.query_precision, self._query_session = self._open_query_session(query_precision)
        self._query_inputs = frozenset(item.name for item in self._query_session.get_inputs())

    def _open_query_session(self, precision: str) -> tuple[str, Any]:
        path = self._exported.query_path
        if precision == "int8" and self._exported.intact(path):
            return "int8", session_for(path, QUERY_THREADS, QUERY_SESSION_DISABLED)
        return "float32", session_for(self._exported.float_path, QUERY_THREADS)

    def document_session(self) -> Any:
        """The float model's batch session, opened on first use."""
        with self._documents_lock:
            if self._documents is None:
                self._documents = session_for(self._exported.float_path, default_threads())
            return self._documents

    def embed(self, texts: list[str]) -> list[list[float]]:
        session = self.document_session()
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start : start + BATCH_SIZE]
            encoded = encode_batch(session, self._batch_tokenizer, [texts[i] for i in chunk])
            for position, row in zip(chunk, encoded, strict=True):
                vectors[position] = row
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_vector(text))

    @functools.lru_cache(maxsize=QUERY_CACHE_SIZE)  # noqa: B019 - one embedder per process
    def _query_vector(self, text: str) -> tuple[float, ...]:
        """Cached: the tool loop ranks the same query on every model call of a turn."""
        session, tokenizer = self._query_session, self._single_tokenizer
        return tuple(encode_one(session, tokenizer, text, self._query_inputs))


def open_embedder(exported: ExportedModel, query_precision: str) -> OnnxEmbedder:
    """The embedder of cached files; `EmbeddingUnavailable` when they are missing, cut short
    or unusable (the caller makes them again)."""
    if query_precision not in QUERY_PRECISIONS:
        raise ValueError(f"query precision must be one of {', '.join(QUERY_PRECISIONS)}")
    if not exported.ready(query_precision):
        raise EmbeddingUnavailable(f"no complete ONNX export in {exported.folder}")
    try:
        return OnnxEmbedder(exported, query_precision)
    except EmbeddingUnavailable:
        raise
    except Exception as exc:
        raise EmbeddingUnavailable(f"cached ONNX model unusable ({exc})") from exc
