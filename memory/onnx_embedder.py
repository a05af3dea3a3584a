"""ONNX Runtime encoding of a sentence-transformers model: export once, cache, run fast.

Documents get the same vectors as sentence-transformers: the exported graph is the model's
transformer; mean pooling and L2 normalisation run here in numpy, exactly as the
sentence-transformers pipeline `Transformer -> Pooling(mean) -> Normalize` does. Models with
any other pipeline are not converted (`OnnxUnsupported`), and the caller keeps torch.
Queries run by default on a fused int8 model of the same weights (`memory.onnx_query`), and
a single query is tokenised without the transformers wrapper (same ids, ~0.35 ms less).

The exported graph is cached under `$MNEMO_CACHE_DIR/onnx` (default `~/.cache/mnemo/onnx`),
named by a hash of the model location, name and weight files, with the int8 query model
beside it; both are written to a temporary file and renamed into place, so concurrent
processes never see a partial file.
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

from core.errors import EmbeddingUnavailable

logger = logging.getLogger(__name__)

BATCH_SIZE = 64
QUERY_CACHE_SIZE = 512
OPSET = 17


class OnnxUnsupported(EmbeddingUnavailable):
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


def export(st_model: Any, path: Path, attention: str = "") -> None:
    """Export the model's transformer to `path` (atomically: temp file, then rename).

    `attention` ("eager", ...) traces with that attention implementation instead of the
    model's own, which is restored afterwards.
    """
    bert = check_pipeline(st_model)
    previous = getattr(bert.config, "_attn_implementation", None)
    switch = bool(attention) and previous is not None and attention != previous
    if switch:
        _set_attention(bert, attention)
    try:
        _export_graph(bert, path)
    finally:
        if switch:
            _set_attention(bert, str(previous))


def _set_attention(bert: Any, implementation: str) -> None:
    if hasattr(bert, "set_attn_implementation"):
        bert.set_attn_implementation(implementation)
    else:  # older transformers
        bert.config._attn_implementation = implementation


def _export_graph(bert: Any, path: Path) -> None:
    import torch

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


QUERY_PRECISIONS = ("int8", "float32")


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Mean of the unmasked token vectors, scaled to unit length (float32 rows)."""
    import numpy as np

    weights = mask[:, :, None].astype(np.float32)
    pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
    norms = np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
    return (pooled / norms).astype(np.float32)


def single_text_tokenizer(tokenizer: Any, max_length: int) -> Any | None:
    """A private copy of a fast tokenizer's backend that truncates and never pads, for queries.

    Same ids as calling the tokenizer, without its ~0.35 ms of per-call wrapping; a copy
    because the wrapper reconfigures its backend on every call. None for slow tokenizers.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    from tokenizers import Tokenizer

    single = Tokenizer.from_str(backend.to_str())
    single.no_padding()
    single.enable_truncation(max_length, direction=getattr(tokenizer, "truncation_side", "right"))
    return single


class OnnxEmbedder:
    """The `Embedder` protocol over two ONNX Runtime sessions (thread-safe).

    Documents are encoded by the float model with `default_threads()`: the same vectors as
    sentence-transformers. Queries run on a one-thread session, of the fused int8 model by
    default (`query_precision`).
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
        self._single = single_text_tokenizer(tokenizer, max_length)
        # What `encode` feeds: the tokenizer's outputs that the graph takes.
        self._single_inputs = self._inputs & set(getattr(tokenizer, "model_input_names", ()))
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
        return tuple(self.encode_one(self._query_session, text))

    def encode_one(self, session: Any, text: str) -> list[float]:
        """The vector of one text: the same as `encode`, without the tokenizer's wrapper."""
        import numpy as np

        if self._single is None:
            return self.encode(session, [text])[0]
        encoding = self._single.encode(text)
        columns = {
            "input_ids": encoding.ids,
            "attention_mask": encoding.attention_mask,
            "token_type_ids": encoding.type_ids,
        }
        feeds = {k: np.array([v], np.int64) for k, v in columns.items() if k in self._single_inputs}
        hidden = session.run(["last_hidden_state"], feeds)[0]
        mask = np.array([encoding.attention_mask], np.int64)
        result: list[float] = mean_pool(hidden, mask)[0].tolist()
        return result

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
        result: list[list[float]] = mean_pool(hidden, feeds["attention_mask"]).tolist()
        return result
