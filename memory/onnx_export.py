"""Making a model's ONNX files, once per model: the only place Mnemo imports torch.

`make_export` loads the model with sentence-transformers, exports its transformer to
`model.onnx` and builds the int8 query model beside it: an eager-attention export of the
same weights, with attention, LayerNorm and GELU fused into ONNX Runtime's contrib ops
(`fuse`), weights quantised per channel (`quantize`), and refused unless it pools probe texts
to within cosine 0.95 of the float model (`check_close`). If the int8 model cannot be made,
a note says why and queries use the float model; later starts do not try again.

Measured on a shared 2-core AVX2 host, one thread, 200 queries of 7-23 tokens: the fused
int8 model p50 0.81-0.83 times the unfused int8 copy (3.5-4.8 ms against 4.3-6.0 ms; the
float model 6.7-9.1 ms, torch 17-30 ms); cosine 0.9925 (min 0.987) to the float vectors;
LoCoMo cov@10 hybrid 0.759 (float 0.758).

Every step says what it does and how long it took on the `memory.onnx_export` logger,
which the CLI shows on the terminal. Files are written to temporary names and renamed, so
concurrent processes never see a partial file.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from core.errors import EmbeddingUnavailable
from memory.model_files import ModelFiles
from memory.onnx_embedder import (
    QUERY_SESSION_DISABLED,
    QUERY_THREADS,
    ExportedModel,
    encode_batch,
    model_tokenizer,
    session_for,
)

logger = logging.getLogger(__name__)

OPSET = 17
PROBE_TEXTS = (
    "What is my dog called?",
    "When did Caroline go to the LGBTQ support group?",
    "What did Hana do with the piano in Hanoi? (473780)",
    "记住：我住在上海",
)
PROBE_MIN_COSINE = 0.95


def make_export(exported: ExportedModel, precision: str, st_model: Any | None = None) -> None:
    """Make whatever `exported` lacks for `precision` queries (the float model, the int8
    query model), loading the model with torch unless `st_model` is given."""
    began = time.monotonic()
    name = exported.files.name
    logger.info("preparing the embedding model %s for ONNX Runtime (once per model)", name)
    exported.folder.mkdir(parents=True, exist_ok=True)
    if st_model is None:
        st_model = load_st_model(exported.files)
    check_pipeline(st_model)
    if not exported.intact(exported.float_path):
        step = time.monotonic()
        export(st_model, exported.float_path)
        exported.record(exported.float_path)
        logger.info("exported %s to ONNX in %.1f s", name, time.monotonic() - step)
    if precision == "int8" and not exported.intact(exported.query_path):
        make_query_model(st_model, exported)
    logger.info("the embedding model is ready in %.1f s: %s", time.monotonic() - began,
                exported.folder)  # fmt: skip


def load_st_model(files: ModelFiles) -> Any:
    """The model on torch (offline: a missing model fails, it is never downloaded)."""
    step = time.monotonic()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import transformers  # only to silence its "Loading weights" progress bar
    from sentence_transformers import SentenceTransformer

    transformers.utils.logging.disable_progress_bar()  # type: ignore[no-untyped-call]
    # One thread: on a shared CPU extra threads mostly wait on each other.
    torch.set_num_threads(1)
    model = SentenceTransformer(str(files.folder), device="cpu")
    logger.info("loaded %s with torch in %.1f s", files.name, time.monotonic() - step)
    return model


def check_pipeline(st_model: Any) -> Any:
    """The model's transformer module, if the pipeline is transformer + mean pooling."""
    modules = list(st_model)
    kinds = [type(module).__name__ for module in modules]
    if kinds[:2] != ["Transformer", "Pooling"] or any(k != "Normalize" for k in kinds[2:]):
        raise EmbeddingUnavailable(f"pipeline {kinds} is not Transformer, Pooling(mean), Normalize")
    if getattr(modules[1], "pooling_mode", None) != "mean":
        raise EmbeddingUnavailable("pooling is not mean pooling")
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


def make_query_model(st_model: Any, exported: ExportedModel) -> None:
    """Build the int8 query model; if it cannot be made, leave a note saying why."""
    step = time.monotonic()
    try:
        build_query_model(st_model, exported)
    except Exception as exc:  # tools missing, an unsupported model, a graph that strays
        exported.query_path.unlink(missing_ok=True)
        reason = f"{type(exc).__name__}: {exc}"
        exported.query_failed_path.write_text(reason + "\n", encoding="utf-8")
        logger.warning(
            "int8 query model unavailable for %s (%s); queries use the float model",
            exported.files.name,
            reason,
        )
        return
    exported.query_failed_path.unlink(missing_ok=True)
    exported.record(exported.query_path)
    logger.info("made the int8 query model (fused, quantised) in %.1f s", time.monotonic() - step)


def build_query_model(st_model: Any, exported: ExportedModel) -> None:
    """Write the int8 query model: an eager-attention export of the same weights, fused,
    quantised, then checked against the float export.

    Eager attention because the optimizer recognises its attention pattern and not the sdpa
    one. Everything is made in a temporary folder beside the target and renamed into place.
    """
    target = exported.query_path
    config = check_pipeline(st_model).config
    with tempfile.TemporaryDirectory(prefix=target.stem, dir=target.parent) as folder:
        eager, fused, quantized = (Path(folder) / f"{n}.onnx" for n in ("eager", "fused", "q"))
        export(st_model, eager, attention="eager")
        fuse(eager, fused, config)
        quantize(fused, quantized)
        check_close(exported.files, exported.float_path, quantized)
        os.replace(quantized, target)


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


def check_close(files: ModelFiles, reference: Path, candidate: Path) -> None:
    """Raise unless `candidate` pools `PROBE_TEXTS` to within `PROBE_MIN_COSINE` of `reference`:
    a fusion that changed what the graph computes is refused, not cached."""
    import numpy as np

    tokenizer = model_tokenizer(files, padding=False)
    vectors = []
    for path in (reference, candidate):
        session = session_for(path, QUERY_THREADS, QUERY_SESSION_DISABLED)
        vectors.append(np.array([encode_batch(session, tokenizer, [t])[0] for t in PROBE_TEXTS]))
    worst = float((vectors[0] * vectors[1]).sum(axis=1).min())
    if worst < PROBE_MIN_COSINE:
        raise ValueError(f"{candidate.name} strays from the float model (cosine {worst:.3f})")
