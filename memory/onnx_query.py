"""The int8 query model: fused, quantised, checked and cached beside the float export.

Queries run by default (`[memory] query_precision`) on an int8 model of the same weights, with
attention, LayerNorm and GELU fused into ONNX Runtime's contrib ops (`build_query_model`).
Measured on a shared 2-core AVX2 host, one thread, 200 queries of 7-23 tokens, variants
interleaved in one process: p50 0.81-0.83 times that of the unfused int8 copy used before
(3.5-4.8 ms against 4.3-6.0 ms as the host's load varied; the float model 6.7-9.1 ms, torch
17-30 ms). Cosine to the float vectors 0.9925 (min 0.987), as before; LoCoMo cov@10 knn 0.507
(float 0.507), hybrid 0.759 (float 0.758). When it cannot be made, queries use the float
export, after one warning.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from memory.onnx_embedder import check_pipeline, export, mean_pool, session_for

logger = logging.getLogger(__name__)

QUERY_THREADS = 1
"""Threads of the query session. One: a query is a handful of tokens, and on a shared 2-core
host a second thread mostly waits for the other (earlier measurement, with FTS5 running
beside it: p50 14.3 ms with two threads against 10.0 ms with one)."""


QUERY_MODEL_SUFFIX = ".query-v2.int8.onnx"
"""The int8 query model's name beside its export. v2: fused and quantised from an eager-attention
export; v1 (`.int8.onnx`, the plain export quantised) is removed, never reused."""

QUERY_SESSION_DISABLED = ("SkipLayerNormFusion",)
"""ONNX Runtime fusions kept off in the int8 query session: its SkipLayerNormalization kernel
took 46 us a call where LayerNormalization + Add took 18 us (onnxruntime 1.32, one thread)."""

PROBE_TEXTS = (
    "What is my dog called?",
    "When did Caroline go to the LGBTQ support group?",
    "What did Hana do with the piano in Hanoi? (473780)",
    "记住：我住在上海",
)
PROBE_MIN_COSINE = 0.95


def quantized_path(path: Path) -> Path:
    """Where the int8 query model of an exported model is cached."""
    return path.with_suffix(QUERY_MODEL_SUFFIX)


def build_query_model(st_model: Any, reference: Path, target: Path) -> None:
    """Write the int8 query model at `target`: an eager-attention export of the same weights,
    fused (`fuse`), quantised (`quantize`), then checked against the float export `reference`.

    Eager attention because the optimizer recognises its attention pattern and not the sdpa
    one; documents keep the export at `reference`. Everything is made in a temporary folder
    beside `target` and renamed into place.
    """
    config = check_pipeline(st_model).config
    with tempfile.TemporaryDirectory(prefix=target.stem, dir=target.parent) as folder:
        exported, fused, quantized = (Path(folder) / f"{n}.onnx" for n in ("eager", "fused", "q"))
        export(st_model, exported, attention="eager")
        fuse(exported, fused, config)
        quantize(fused, quantized)
        check_close(st_model.tokenizer, reference, quantized)
        os.replace(quantized, target)
    reference.with_suffix(".int8.onnx").unlink(missing_ok=True)  # the v1 query model


def fuse(path: Path, target: Path, config: Any) -> None:
    """Fuse attention, embeddings + LayerNorm and bias + GELU into ONNX Runtime's contrib ops.

    Residual + LayerNorm stay unfused (see `QUERY_SESSION_DISABLED`). Unrecognised patterns
    are left as they are: the graph computes the same thing, only less fused.
    """
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    _quiet_optimizer_loggers()
    options = FusionOptions("bert")
    options.enable_skip_layer_norm = False
    model = optimize_model(
        str(path),
        model_type="bert",
        num_heads=int(getattr(config, "num_attention_heads", 0)),
        hidden_size=int(getattr(config, "hidden_size", 0)),
        optimization_options=options,
        opt_level=0,  # ONNX Runtime's own fusions run when the session loads
    )
    model.save_model_to_file(str(target))


def _quiet_optimizer_loggers() -> None:
    """The optimizer's modules log every fusion at INFO, under top-level names ("onnx_model",
    "fusion_base", ...): keep those at WARNING. Found by module file, not by a list of names."""
    for name in list(logging.root.manager.loggerDict):
        module = sys.modules.get(name)
        if "onnxruntime" in str(getattr(module, "__file__", "") or ""):
            logging.getLogger(name).setLevel(logging.WARNING)


def _quiet_quantizer(record: logging.LogRecord) -> bool:
    """Drop the quantiser's own root-logger advice; every other record passes."""
    return "onnxruntime" not in record.pathname


def quantize(path: Path, target: Path) -> None:
    """Write an int8 copy of the model at `path` (dynamic, per-channel weight quantisation)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    handle, temporary = tempfile.mkstemp(dir=target.parent, suffix=".onnx.tmp")
    os.close(handle)
    root = logging.getLogger()
    root.addFilter(_quiet_quantizer)  # it advises pre-processing through the root logger
    try:
        quantize_dynamic(
            path,
            temporary,
            weight_type=QuantType.QInt8,
            per_channel=True,
            # Shape inference cannot type the outputs of the fused contrib ops.
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        os.replace(temporary, target)
    finally:
        root.removeFilter(_quiet_quantizer)
        if os.path.exists(temporary):
            os.unlink(temporary)


def check_close(tokenizer: Any, reference: Path, candidate: Path) -> None:
    """Raise unless `candidate` pools `PROBE_TEXTS` to within `PROBE_MIN_COSINE` of `reference`:
    a fusion that changed what the graph computes is refused, not cached."""
    import numpy as np

    vectors = []
    for path in (reference, candidate):
        session = session_for(path, QUERY_THREADS, QUERY_SESSION_DISABLED)
        names = {item.name for item in session.get_inputs()}
        rows = []
        for text in PROBE_TEXTS:
            feeds = {k: np.asarray(v, np.int64) for k, v in tokenizer([text]).items() if k in names}
            hidden = session.run(["last_hidden_state"], feeds)[0]
            rows.append(mean_pool(hidden, feeds["attention_mask"])[0])
        vectors.append(np.array(rows))
    worst = float((vectors[0] * vectors[1]).sum(axis=1).min())
    if worst < PROBE_MIN_COSINE:
        raise ValueError(f"{candidate.name} strays from the float model (cosine {worst:.3f})")


def query_session(st_model: Any, path: Path, model_name: str, precision: str) -> tuple[Any, str]:
    """The one-thread query session and its precision (float when int8 cannot be had)."""
    if precision == "int8":
        target = quantized_path(path)
        try:
            return _int8_session(st_model, path, target), "int8"
        except Exception as exc:  # tools missing, an unsupported model, a graph that strays
            target.unlink(missing_ok=True)
            logger.warning(
                "int8 query model unavailable for %s (%s: %s); queries use the float model",
                model_name,
                type(exc).__name__,
                exc,
            )
    return session_for(path, QUERY_THREADS), "float32"


def _int8_session(st_model: Any, path: Path, target: Path) -> Any:
    """The cached int8 query model's session; a missing or damaged copy is made (again)."""
    if target.exists():
        try:
            return session_for(target, QUERY_THREADS, QUERY_SESSION_DISABLED)
        except Exception as exc:
            logger.info("cached int8 query model %s unusable (%s); making it again", target, exc)
    logger.info("making the int8 query model %s (fused, quantised)", target)
    build_query_model(st_model, path, target)
    return session_for(target, QUERY_THREADS, QUERY_SESSION_DISABLED)
