"""The ONNX Runtime embedder: same document vectors as sentence-transformers, int8 queries
(fused graph) close to them, a cache keyed by the model's content, reuse and repair,
fallbacks."""

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

from core.errors import EmbeddingUnavailable
from memory import embeddings, onnx_export
from memory.embeddings import DEFAULT_MODEL_NAME, SentenceTransformerEmbedder
from memory.model_files import ModelFiles, model_files
from memory.onnx_embedder import (
    OnnxEmbedder,
    exported_model,
    model_tokenizer,
    open_embedder,
    session_for,
)
from tests import onnx_steps

TEXTS = [
    "The user's dog is a golden retriever called Rex",
    "What is my dog called?",
    "记住：我住在上海",
    "a",
    "long " * 400,  # longer than max_seq_length: truncated the same way
]


@pytest.fixture(scope="session")
def files() -> ModelFiles:
    return model_files("")


@pytest.fixture(scope="session")
def st_model(files: ModelFiles) -> Any:
    return onnx_export.load_st_model(files)


# Its session fixtures load torch and hold a cache: one xdist worker runs the whole module.
pytestmark = pytest.mark.xdist_group("onnx")


@pytest.fixture(scope="session")
def cache_root(
    tmp_path_factory: pytest.TempPathFactory, files: ModelFiles, embedder: object
) -> Iterator[Path]:
    """A cache of the module's own, holding a copy of the run's export (which `embedder`
    made, or found): the tests below damage and remake files in it. Making the export is
    what `embedder` did, and what the tests that remake files do again."""
    shared = exported_model(files).folder
    root = tmp_path_factory.mktemp("mnemo-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MNEMO_CACHE_DIR", str(root))
        shutil.copytree(shared, exported_model(files).folder)
        yield root


@pytest.fixture(scope="module", autouse=True)
def steps_made_once() -> Iterator[None]:
    """The export's steps (torch export, fuse, quantise: ~9 CPU-s a query model) run for real
    once per test run, in whichever process needs each first (here, in
    `test_a_damaged_cache_file_is_exported_again`, or the cold start of
    `tests/e2e/test_startup.py`); later calls for the same input get a copy of that step's
    output (`tests/onnx_steps.py`). The tests test what is remade and when, which the copy
    keeps; a step a test replaces (a broken fuse, a tampered quantiser) is the test's own and
    runs each time."""
    with onnx_steps.steps_made_once():
        yield


def prepared(files: ModelFiles, st_model: Any, precision: str = "int8") -> OnnxEmbedder:
    """Export what is missing in the current cache (with the shared model), then open it."""
    exported = exported_model(files)
    if not exported.ready(precision):
        onnx_export.make_export(exported, precision, st_model)
    return open_embedder(exported, precision)


@pytest.fixture(scope="session")
def onnx(files: ModelFiles, st_model: Any, cache_root: Path) -> OnnxEmbedder:
    return prepared(files, st_model)


@pytest.fixture
def private_export(
    files: ModelFiles, onnx: OnnxEmbedder, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A cache of its own holding a copy of the float export (no query model yet)."""
    shared = exported_model(files)
    monkeypatch.setenv("MNEMO_CACHE_DIR", str(tmp_path))
    private = exported_model(files)
    private.folder.mkdir(parents=True)
    shutil.copyfile(shared.float_path, private.float_path)
    private.record(private.float_path)
    return private.float_path


def tampered_copy(path: Path, target: Path) -> None:
    """A valid graph that computes something else: every token gets its neighbour's embedding."""
    import onnx as onnx_lib
    from onnx import numpy_helper

    model = onnx_lib.load(path)
    [table] = [t for t in model.graph.initializer if t.name.endswith("word_embeddings.weight")]
    rolled = np.roll(numpy_helper.to_array(table), 1, axis=0)
    table.CopyFrom(numpy_helper.from_array(rolled, table.name))
    onnx_lib.save(model, target)


def test_onnx_vectors_match_sentence_transformers(st_model: Any, onnx: OnnxEmbedder) -> None:
    reference = np.array(SentenceTransformerEmbedder(st_model, DEFAULT_MODEL_NAME).embed(TEXTS))
    batch = np.array(onnx.embed(TEXTS))
    single = np.array([onnx.embed([text])[0] for text in TEXTS])
    assert batch.shape == reference.shape == (len(TEXTS), 384)
    assert np.allclose(batch, reference, atol=1e-4)
    assert np.allclose(single, reference, atol=1e-4)
    assert np.allclose(np.linalg.norm(batch, axis=1), 1.0, atol=1e-5)
    assert onnx.model_name == DEFAULT_MODEL_NAME and onnx.dim == 384  # no reindex needed


def test_int8_queries_stay_close_to_the_float_vectors(
    files: ModelFiles, st_model: Any, onnx: OnnxEmbedder
) -> None:
    assert onnx.query_precision == "int8"
    documents = np.array(onnx.embed(TEXTS))
    queries = np.array([onnx.embed_query(text) for text in TEXTS])
    assert np.allclose(np.linalg.norm(queries, axis=1), 1.0, atol=1e-5)
    assert not np.allclose(queries, documents, atol=1e-4)  # really the quantised model
    assert (queries * documents).sum(axis=1).min() > 0.97
    # Each text still finds itself first among the documents.
    assert list((queries @ documents.T).argmax(axis=1)) == list(range(len(TEXTS)))
    exact = prepared(files, st_model, "float32")
    assert exact.query_precision == "float32"
    assert np.allclose([exact.embed_query(text) for text in TEXTS], documents, atol=1e-4)


def test_export_is_cached_and_reused(
    files: ModelFiles, onnx: OnnxEmbedder, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exported = exported_model(files)
    assert exported.folder.parent == cache_root / "onnx"
    assert exported.intact(exported.float_path) and exported.intact(exported.query_path)
    names = sorted(item.name for item in exported.folder.iterdir())
    assert names == ["manifest.json", "model.onnx", "query-v2.int8.onnx"]  # no temp files

    def no_export(*args: object) -> None:
        raise AssertionError("the cached export and int8 copy must be reused")

    for name in ("export", "fuse", "quantize", "build_query_model", "load_st_model"):
        monkeypatch.setattr(onnx_export, name, no_export)
    monkeypatch.setattr(embeddings, "_cache", {})
    again = embeddings.load_embedder()
    assert isinstance(again, OnnxEmbedder)
    assert np.allclose(again.embed(TEXTS[:2]), onnx.embed(TEXTS[:2]), atol=1e-6)
    assert np.allclose(again.embed_query(TEXTS[0]), onnx.embed_query(TEXTS[0]), atol=1e-6)


def test_the_cache_is_keyed_by_content_not_by_path(files: ModelFiles, tmp_path: Path) -> None:
    """A new virtualenv (the same model at another path) reuses the export; other bytes don't."""
    copy = tmp_path / "model"
    shutil.copytree(files.folder, copy)
    same = ModelFiles(copy, files.name)
    assert same.content_key() == files.content_key()
    assert ModelFiles(copy, "another-name").content_key() != files.content_key()
    (copy / "config.json").write_text((copy / "config.json").read_text() + " ", "utf-8")
    assert ModelFiles(copy, files.name).content_key() != files.content_key()


def test_a_damaged_cache_file_is_exported_again(
    files: ModelFiles,
    st_model: Any,
    onnx: OnnxEmbedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MNEMO_CACHE_DIR", str(tmp_path))
    exported = exported_model(files)
    exported.folder.mkdir(parents=True)
    exported.float_path.write_bytes(b"not an onnx model")  # e.g. a disk that filled up
    exported.query_path.write_bytes(b"not one either")
    with pytest.raises(EmbeddingUnavailable):
        open_embedder(exported, "int8")
    repaired = prepared(files, st_model)
    assert np.allclose(repaired.embed([TEXTS[0]]), onnx.embed([TEXTS[0]]), atol=1e-6)
    assert np.allclose(repaired.embed_query(TEXTS[0]), onnx.embed_query(TEXTS[0]), atol=1e-6)
    assert exported.float_path.stat().st_size > 1_000_000
    assert repaired.query_precision == "int8"


def test_a_damaged_query_model_alone_is_made_again(
    files: ModelFiles,
    st_model: Any,
    onnx: OnnxEmbedder,
    private_export: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    query_model = exported_model(files).query_path
    query_model.write_bytes(b"half a file")
    with caplog.at_level(logging.INFO):
        repaired = prepared(files, st_model)
    assert repaired.query_precision == "int8"
    # Only our own lines: the optimizer's per-fusion INFO lines and the quantiser's advice
    # are kept out of the log.
    assert {record.name for record in caplog.records} <= {"memory.onnx_export"}, caplog.text
    assert np.allclose(repaired.embed_query(TEXTS[1]), onnx.embed_query(TEXTS[1]), atol=1e-6)
    names = sorted(item.name for item in private_export.parent.iterdir())
    assert names == ["manifest.json", "model.onnx", "query-v2.int8.onnx"]  # no work folder


def test_making_the_export_says_what_it_does_and_how_long_it_takes(
    files: ModelFiles, st_model: Any, private_export: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="memory.onnx_export"):
        prepared(files, st_model)
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0].startswith("preparing the embedding model all-MiniLM-L6-v2")
    assert any(line.startswith("made the int8 query model") and " s" in line for line in lines)
    assert lines[-1].startswith("the embedding model is ready in ")


def test_the_query_model_is_fused_and_quantised(
    files: ModelFiles, st_model: Any, onnx: OnnxEmbedder
) -> None:
    import onnx as onnx_lib

    path = exported_model(files).query_path
    ops = collections.Counter(node.op_type for node in onnx_lib.load(path).graph.node)
    layers = st_model[0].auto_model.config.num_hidden_layers
    assert ops["QAttention"] == layers and ops["QEmbedLayerNormalization"] == 1
    assert ops["BiasGelu"] == layers and ops["MatMulInteger"] == 3 * layers  # out, FFN in, out
    assert ops["SkipLayerNormalization"] == 0 and ops["Softmax"] == 0 and ops["MatMul"] == 0
    # The shared model keeps its own attention implementation after the eager export.
    assert st_model[0].auto_model.config._attn_implementation != "eager"


def test_the_model_tokenizer_gives_the_transformers_ids(files: ModelFiles, st_model: Any) -> None:
    tokenizer, limit = st_model.tokenizer, int(st_model.max_seq_length)
    single = model_tokenizer(files, padding=False)
    batch = model_tokenizer(files, padding=True)
    assert files.max_length == limit
    for text in [*TEXTS, ""]:
        expected = tokenizer(text, truncation=True, max_length=limit)
        encoding = single.encode(text)
        assert encoding.ids == expected["input_ids"]
        assert encoding.type_ids == expected["token_type_ids"]
        assert len(encoding.ids) <= limit
    expected_batch = tokenizer(TEXTS, padding=True, truncation=True, max_length=limit)
    encodings = batch.encode_batch(TEXTS)
    assert [e.ids for e in encodings] == expected_batch["input_ids"]
    assert [e.attention_mask for e in encodings] == expected_batch["attention_mask"]


def test_a_query_model_that_strays_is_refused(
    files: ModelFiles,
    st_model: Any,
    onnx: OnnxEmbedder,
    private_export: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    onnx_export.check_close(files, private_export, private_export)  # itself: accepted
    monkeypatch.setattr(onnx_export, "quantize", tampered_copy)  # a "quantiser" gone wrong
    with caplog.at_level(logging.WARNING, logger="memory.onnx_export"):
        fallback = prepared(files, st_model)
    assert fallback.query_precision == "float32"
    assert [r.message for r in caplog.records if "strays from the float model" in r.message]
    names = sorted(item.name for item in private_export.parent.iterdir())
    assert names == ["manifest.json", "model.onnx", "query-int8.failed"]


@pytest.mark.parametrize("step", ["fuse", "quantize"])
def test_queries_use_the_float_model_when_the_int8_model_cannot_be_made(
    step: str,
    files: ModelFiles,
    st_model: Any,
    onnx: OnnxEmbedder,
    private_export: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(*args: object) -> None:
        raise ImportError(f"onnxruntime cannot {step} here")

    monkeypatch.setattr(onnx_export, step, broken)
    with caplog.at_level(logging.WARNING, logger="memory.onnx_export"):
        fallback = prepared(files, st_model)
    assert fallback.query_precision == "float32"
    warned = [r for r in caplog.records if "int8 query model unavailable" in r.message]
    assert len(warned) == 1 and f"cannot {step}" in warned[0].message
    assert np.allclose(fallback.embed_query(TEXTS[1]), onnx.embed([TEXTS[1]])[0], atol=1e-4)
    # Noted, so later starts neither try again nor need torch to find out.
    exported = exported_model(files)
    assert exported.ready("int8") and f"cannot {step}" in exported.query_failed_path.read_text()


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


def test_unsupported_pipelines_are_refused(st_model: Any, tmp_path: Path) -> None:
    class MaxPooling:
        pooling_mode = "max"

    modules = list(st_model)
    with pytest.raises(EmbeddingUnavailable):
        onnx_export.check_pipeline([modules[0], MaxPooling()])
    with pytest.raises(EmbeddingUnavailable):
        onnx_export.check_pipeline(modules[:1])
    # The same check from the model's files alone, without torch.
    folder = tmp_path / "max-pooled"
    (folder / "1_Pooling").mkdir(parents=True)
    (folder / "modules.json").write_text(
        '[{"path": "", "type": "x.Transformer"}, {"path": "1_Pooling", "type": "x.Pooling"}]'
    )
    (folder / "1_Pooling" / "config.json").write_text('{"pooling_mode_max_tokens": true}')
    with pytest.raises(EmbeddingUnavailable, match="not mean pooling"):
        ModelFiles(folder, "max-pooled").check_pipeline()


def test_pooled_sessions_do_not_spin_between_runs(files: ModelFiles, onnx: OnnxEmbedder) -> None:
    """Spinning pool threads would take the CPU from the query that follows a stored memory."""
    path = exported_model(files).float_path
    entry = "session.intra_op.allow_spinning"
    pooled = session_for(path, 2).get_session_options()
    assert pooled.get_session_config_entry(entry) == "0"
    single = session_for(path, 1).get_session_options()
    with pytest.raises(RuntimeError, match="does not have configuration"):
        single.get_session_config_entry(entry)  # one thread: no pool, left as it is


def test_a_preloaded_model_is_the_one_a_later_load_gets(embedder: embeddings.Embedder) -> None:
    """`mnemo chat` and `mnemo run` start loading the model before the runtime is built
    (`preload_embedder`); a load asked while it runs (the keeper's, at start) waits for it
    and gets that very model."""
    thread = embeddings.preload_embedder("", "float32")
    assert thread.name == "embedder-preload"
    got = embeddings.load_embedder("", "float32")
    thread.join(120)
    assert got is not None and got is embeddings.load_embedder("", "float32")
    text = "a preloaded model"
    assert np.allclose(got.embed_query(text), embedder.embed([text])[0], atol=1e-5)
