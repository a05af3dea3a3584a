"""ONNX Runtime encoding of a sentence-transformers model: export once, cache, run fast.

Documents get the same vectors as sentence-transformers: the exported graph is the model's
transformer; mean pooling and L2 normalisation run here in numpy, exactly as the
sentence-transformers pipeline `Transformer -> Pooling(mean) -> Normalize` does. Models with
any other pipeline are not converted (`OnnxUnsupported`), and the caller keeps torch.
Queries run on an int8 copy of the same graph by default (`[memory] query_precision`): a
query in about 5 ms on one thread, against 17-30 ms on torch.

The exported graph is cached under `$MNEMO_CACHE_DIR/onnx` (default `~/.cache/mnemo/onnx`),
named by a hash of the model location, name and weight files, with its int8 copy beside it;
both are written to a temporary file and renamed into place, so concurrent processes never
see a partial file.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

BATCH_SIZE = 64
QUERY_CACHE_SIZE = 512
OPSET = 17


class OnnxUnsupported(RuntimeError):
    """The model's pipeline is not one this module reproduces exactly."""


def cache_dir() -> Path:
    """Where exported models live: `$MNEMO_CACHE_DIR/onnx` or `~/.cache/mnemo/onnx`."""
    root = os.environ.get("MNEMO_CACHE_DIR")
    if root:
        return Path(root) / "onnx"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "mnemo" / "onnx"


def cache_path(location: str, model_name: str) -> Path:
    """The cache file of a model: a hash of where it is, its name and its files' stamps."""
    digest = hashlib.sha256(f"{location}\0{model_name}\0opset{OPSET}".encode())
    folder = Path(location)
    if folder.is_dir():
        for item in sorted(folder.iterdir()):
            if item.is_file():
                stat = item.stat()
                digest.update(f"\0{item.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
    return cache_dir() / f"{digest.hexdigest()[:24]}.onnx"


def check_pipeline(st_model: Any) -> Any:
    """The model's transformer module, if the pipeline is transformer + mean pooling."""
    modules = list(st_model)
    kinds = [type(module).__name__ for module in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise OnnxUnsupported(f"pipeline {kinds} is not Transformer, Pooling(mean), Normalize")
    if getattr(modules[1], "pooling_mode", None) != "mean":
        raise OnnxUnsupported("pooling is not mean pooling")
    return modules[0].auto_model


def export(st_model: Any, path: Path) -> None:
    """Export the model's transformer to `path` (atomically: temp file, then rename)."""
    import torch

    bert = check_pipeline(st_model)
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class _Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.bert(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = torch.ones((1, 8), dtype=torch.long)
    axes = {name: {0: "b", 1: "s"} for name in [*names, "last_hidden_state"]}
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=path.stem, suffix=".tmp", dir=path.parent)
    os.close(handle)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about shapes fixed at export
            torch.onnx.export(
                _Wrapper().eval(),
                (sample, sample, torch.zeros_like(sample)),
                temporary,
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=OPSET,
                dynamo=False,
            )
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)


def session_for(path: Path, threads: int) -> Any:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(
        str(path), sess_options=options, providers=["CPUExecutionProvider"]
    )


def default_threads() -> int:
    """Threads of the batch session: `$MNEMO_ONNX_THREADS`, else two (at most the CPUs)."""
    try:
        wanted = int(os.environ.get("MNEMO_ONNX_THREADS", "0"))
    except ValueError:
        wanted = 0
    return wanted if wanted > 0 else max(1, min(2, os.cpu_count() or 1))


QUERY_THREADS = 1
"""Threads of the query session. One: `hybrid` ranking runs the FTS5 side on another core
while a query is embedded (measured on 2 cores: embedding + BM25 together p50 10.0 ms with
one thread, 14.3 ms with two threads competing with SQLite, 13.6 ms one after the other)."""

QUERY_PRECISIONS = ("int8", "float32")


def quantized_path(path: Path) -> Path:
    """Where the int8 copy of an exported model is cached."""
    return path.with_suffix(".int8.onnx")


def _quiet_quantizer(record: logging.LogRecord) -> bool:
    """Drop the quantiser's own root-logger advice; every other record passes."""
    return "onnxruntime" not in record.pathname


def quantize(path: Path, target: Path) -> None:
    """Write an int8 copy of the model at `path` (dynamic, per-channel weight quantisation).

    Measured on all-MiniLM-L6-v2: a query in ~5 ms instead of ~9 ms on one thread, cosine
    0.994 (min 0.990) to the float vector, LoCoMo cov@10 unchanged (knn 0.510 vs 0.505,
    hybrid 0.757 vs 0.758).
    """
    from onnxruntime.quantization import QuantType, quantize_dynamic

    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(handle)
    root = logging.getLogger()
    root.addFilter(_quiet_quantizer)  # it advises pre-processing through the root logger
    try:
        quantize_dynamic(path, temporary, weight_type=QuantType.QInt8, per_channel=True)
        os.replace(temporary, target)
    finally:
        root.removeFilter(_quiet_quantizer)
        if os.path.exists(temporary):
            os.unlink(temporary)


class OnnxEmbedder:
    """The `Embedder` protocol over two ONNX Runtime sessions (thread-safe).

    Documents are encoded by the float model with `default_threads()`: the same vectors as
    sentence-transformers. Queries run on a one-thread session, of the int8 copy by default
    (`query_precision`).
    """

    def __init__(
        self,
        document_session: Any,
        query_session: Any,
        tokenizer: Any,
        max_length: int,
        dim: int,
        model_name: str,
        query_precision: str = "float32",
    ) -> None:
        self._document_session = document_session
        self._query_session = query_session
        self._tokenizer = tokenizer
        self._max_length = max_length
        self._inputs = {item.name for item in document_session.get_inputs()}
        self.query_precision = query_precision
        self.model_name = model_name
        self.dim = dim

    def embed(self, texts: list[str]) -> list[list[float]]:
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # less padding
        vectors: list[list[float]] = [[] for _ in texts]
        for start in range(0, len(order), BATCH_SIZE):
            chunk = order[start : start + BATCH_SIZE]
            encoded = self.encode(self._document_session, [texts[i] for i in chunk])
            for position, row in zip(chunk, encoded, strict=True):
                vectors[position] = row
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return list(self._query_vector(text))

    @functools.lru_cache(maxsize=QUERY_CACHE_SIZE)  # noqa: B019 - one embedder per process
    def _query_vector(self, text: str) -> tuple[float, ...]:
        """Cached: the tool loop ranks the same query on every model call of a turn."""
        return tuple(self.encode(self._query_session, [text])[0])

    def encode(self, session: Any, texts: list[str]) -> list[list[float]]:
        """Mean-pooled, unit-length vectors of one batch."""
        import numpy as np

        if not texts:
            return []
        encoded = self._tokenizer(
            texts,
            padding=True,
            truncation=True,
            max_length=self._max_length,
            return_tensors="np",
        )
        feeds = {k: np.asarray(v, dtype=np.int64) for k, v in encoded.items() if k in self._inputs}
        hidden = session.run(["last_hidden_state"], feeds)[0]  # run() is thread-safe
        mask = feeds["attention_mask"][:, :, None].astype(np.float32)
        pooled = (hidden * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
        norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        result: list[list[float]] = (pooled / norms).astype(np.float32).tolist()
        return result


def onnx_embedder(
    st_model: Any, location: str, model_name: str, query_precision: str = "int8"
) -> OnnxEmbedder:
    """An ONNX Runtime embedder for a loaded sentence-transformers model (export if needed).

    Raises when onnxruntime (or, for a first export, onnx) is missing or the export fails.
    When the int8 query model cannot be made, queries use the float model (logged).
    """
    import onnxruntime  # noqa: F401 - fail before a pointless export

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
    query, precision = _query_session(path, model_name, query_precision)
    return OnnxEmbedder(
        documents,
        query,
        st_model.tokenizer,
        int(st_model.max_seq_length),
        int(dimension()),
        model_name,
        precision,
    )


def _query_session(path: Path, model_name: str, precision: str) -> tuple[Any, str]:
    """The one-thread query session and its precision (float when int8 cannot be had)."""
    if precision == "int8":
        target = quantized_path(path)
        failure: Exception | None = None
        for _attempt in range(2):  # a damaged cached copy is made again, once
            try:
                if not target.exists():
                    logger.info("quantising %s to int8 for queries", path)
                    quantize(path, target)
                return session_for(target, QUERY_THREADS), "int8"
            except Exception as exc:  # tools missing, a damaged copy, an unsupported model
                target.unlink(missing_ok=True)
                failure = exc
        logger.warning(
            "int8 query model unavailable for %s (%s: %s); queries use the float model",
            model_name,
            type(failure).__name__,
            failure,
        )
    return session_for(path, QUERY_THREADS), "float32"
