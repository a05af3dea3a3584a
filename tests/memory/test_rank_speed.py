"""The speed-minded parts of ranking at 100,000 memories, checked for what they must keep:
snapshot arrays read back without a copy, the Hamming cut, a recent keyword segment sized
by its own terms (and sparse, after a change), lazy positions of loaded lists, blobs read in
binary on both engines, a query's vector as the batch path makes it, and rows made into
memories whole."""

from __future__ import annotations

import io
from dataclasses import fields

import numpy as np
import pytest

from memory.embeddings import Embedder
from memory.onnx_embedder import OnnxEmbedder, encode_batch, encode_one
from memory.posting_lists import PostingLists, Segment, index_terms, query_terms, tokenise
from memory.posting_snapshot import lists_arrays, lists_from_arrays
from memory.snapshot_arrays import pack_arrays, unpack_arrays
from memory.store import Marks, Memory, RankSnapshot, memory_from_row
from memory.vector_cache import ChatVectors, hamming, nearest_codes, sign_codes
from tests.memory.conftest import Engine


def test_snapshot_arrays_come_back_equal_and_without_a_copy() -> None:
    arrays = {
        "scalar": np.asarray(7),
        "floats": np.arange(10, dtype=np.float16),
        "strided": np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2],
        "empty": np.zeros(0, np.int32),
        "flags": np.asarray([True, False, True]),
    }
    blob = pack_arrays(arrays)
    found = unpack_arrays(blob)
    assert found is not None and set(found) == set(arrays)
    for name, value in arrays.items():
        assert found[name].dtype == value.dtype and np.array_equal(found[name], value)
        assert not found[name].flags.owndata and not found[name].flags.writeable  # views
    assert int(found["scalar"]) == 7


def test_an_earlier_npz_snapshot_is_still_read_and_a_cut_one_refused() -> None:
    buffer = io.BytesIO()
    np.savez(buffer, format=np.asarray(1), ids=np.arange(3))
    old = unpack_arrays(buffer.getvalue())
    assert old is not None and old["ids"].tolist() == [0, 1, 2]
    blob = pack_arrays({"ids": np.arange(1000)})
    with pytest.raises(ValueError):
        unpack_arrays(blob[:200])
    with pytest.raises(ValueError):
        unpack_arrays(blob[:14])


def test_the_hamming_cut_takes_exactly_the_nearest_codes() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.normal(size=(5000, 128)).astype(np.float32)
    codes = sign_codes(matrix)
    query_vector = rng.normal(size=(1, 128)).astype(np.float32)
    query = sign_codes(query_vector)
    distance = hamming(codes, query)
    query_signs = np.packbits(query_vector[0] > 0)
    assert distance[0] == int(np.unpackbits(np.packbits(matrix[0] > 0) ^ query_signs).sum())
    reference = np.sort(distance)
    for count in (1, 200, 777, 4999, 5000, 6000):
        chosen = nearest_codes(distance, count)
        assert len(chosen) == min(count, 5000) and len(set(chosen.tolist())) == len(chosen)
        assert np.array_equal(np.sort(distance[chosen]), reference[: len(chosen)])
        assert np.all(np.diff(chosen) > 0)  # in position order


def _counted_cut(distance: np.ndarray, count: int, bits: int) -> np.ndarray:
    """The cut as it was made before: a count of every distance, the ties' first ones."""
    cut = int(np.searchsorted(np.cumsum(np.bincount(distance, minlength=bits + 2)), count))
    inside = np.flatnonzero(distance < cut)
    at_cut = np.flatnonzero(distance == cut)[: count - len(inside)]
    return np.sort(np.concatenate([inside, at_cut]))


def test_the_hamming_cut_is_the_counted_one_ties_and_masks_included() -> None:
    """`nearest_codes` guesses a bound from a sample; whatever the guess, the positions are
    the counted cut's: the same ties kept at the cut, masked rows (past every real
    distance) last, a guess that falls short (most distances equal) made up for."""
    rng = np.random.default_rng(5)
    spread = np.clip(rng.normal(150, 25, 90_000), 0, 384).astype(np.uint16)
    ties = rng.integers(100, 104, 90_000).astype(np.uint16)  # four values: ties everywhere
    masked = spread.copy()
    masked[rng.random(90_000) < 0.3] = 385
    short = np.full(90_000, 200, np.uint16)
    short[: 64 * 40 : 64] = 7  # near ones only where the sample looks: the guess falls short
    for distance in (spread, ties, masked, short):
        for count in (0, 1, 200, 280, 1_000, 89_999):
            chosen = nearest_codes(distance, count)
            assert np.array_equal(chosen, _counted_cut(distance, count, 384))


def test_masked_codes_are_never_candidates() -> None:
    rng = np.random.default_rng(4)
    matrix = rng.normal(size=(3000, 64)).astype(np.float32)
    rows = [(i + 1, matrix[i].tobytes()) for i in range(3000)]
    vectors = ChatVectors.build(rows)
    nearest, _ = vectors.search(matrix[10].tolist(), 5)
    assert nearest[0][0] == 11
    changed = vectors.apply([], [11, 12, 2999])
    assert not changed.alive[[10, 11, 2998]].any() and int(changed.alive.sum()) == 2997
    found, _ = changed.search(matrix[10].tolist(), 2000)
    assert {11, 12, 2999}.isdisjoint(mid for mid, _ in found)


def test_a_recent_segment_is_sized_by_its_own_terms() -> None:
    vocabulary: dict[str, int] = {f"word{i}": i for i in range(50_000)}
    rows = {1: tokenise("tea with roses", "", vocabulary)}
    segment = Segment.build(rows, len(vocabulary))
    assert len(segment.bounds) == int(rows[1].terms.max()) + 2
    number = vocabulary["rose"]
    positions, _, _ = segment.postings(number)
    assert positions.tolist() == [0]
    assert len(segment.postings(0)[0]) == 0  # a term of the vocabulary it does not hold
    assert len(Segment.build({}, 1000).bounds) == 1


def test_loaded_lists_find_positions_only_when_a_memory_changes() -> None:
    rows = [(i, f"note {i} about tea and roses", "") for i in range(1, 200)]
    lists = lists_from_arrays(lists_arrays(PostingLists.build(rows)))
    where = lists.base.where
    assert lists.score(query_terms("roses"), 5) and where._places is None  # type: ignore[attr-defined]
    changed = lists.apply([(7, "coffee now", "")], [9])
    assert where._places is not None  # type: ignore[attr-defined]
    ids = {mid for mid, _ in changed.score(query_terms("roses"), 500)}
    assert 7 not in ids and 9 not in ids and 8 in ids
    assert [mid for mid, _ in changed.score(query_terms("coffee"), 5)] == [7]


def test_a_large_snapshot_blob_is_read_back_whole(engine: Engine) -> None:
    store, chat = engine.store(), engine.chat("a")
    data = pack_arrays({"base": np.arange(300_000, dtype=np.float16)})
    store.save_rank_snapshot(chat, "vectors", RankSnapshot(Marks(3, 4), "m/8", data))
    saved = store.rank_snapshot(chat, "vectors")
    assert saved is not None and saved.data == data and saved.marks == Marks(3, 4)
    assert isinstance(saved.data, bytes) and saved.model == "m/8"
    row = engine.storage.database.read_one("SELECT ?, ?", (5, b"\x00\xff"), binary=True)
    assert row is not None and int(row[0]) == 5 and bytes(row[1]) == b"\x00\xff"


def test_a_recent_segment_after_a_change_holds_only_its_own_terms() -> None:
    rows = [(i, f"note {i} about tea and roses", "") for i in range(1, 400)]
    lists = PostingLists.build(rows)
    changed = lists.apply([(7, "coffee with zanzibar 987654", "in Kyoto")], [9])
    recent = changed.recent
    stems = index_terms("coffee with zanzibar 987654 in Kyoto")
    held = {changed.vocabulary[stem] for stem in stems}
    assert len(held) == 6 and max(held) >= 400  # new words, numbered past the old ones
    assert recent.numbers is not None and set(recent.numbers.tolist()) == held
    assert len(recent.bounds) == len(held) + 1  # not one per vocabulary term
    assert len(recent.postings(changed.vocabulary["rose"])[0]) == 0
    assert len(recent.postings(len(changed.vocabulary) + 5)[0]) == 0  # past every term
    fresh = PostingLists.build([row for row in rows if row[0] not in (7, 9)]
                               + [(7, "coffee with zanzibar 987654", "in Kyoto")])  # fmt: skip
    for query in ("coffee in Zanzibar", "tea roses", "Kyoto 987654 note"):
        terms = query_terms(query)
        assert changed.score(terms, 50) == fresh.score(terms, 50)  # the same scores, bit for bit
    assert not changed.stale()


def test_a_query_vector_is_the_batch_paths_to_the_bit(embedder: Embedder) -> None:
    assert isinstance(embedder, OnnxEmbedder)
    session, tokenizer = embedder._query_session, embedder._single_tokenizer
    inputs = frozenset(item.name for item in session.get_inputs())
    for text in ("What did Ann do with the kayak in Berlin? (123)", "", "a", "记住 " * 300):
        assert (
            encode_one(session, tokenizer, text, inputs)
            == encode_batch(session, tokenizer, [text])[0]
        )


def test_a_row_becomes_the_memory_its_constructor_makes() -> None:
    row = (5, None, "tea", "EVENT", 1, None, "2026-01-01", "2026-01-02", "2026-01-03", 0,
           None, "m/8", None, "u1", None)  # fmt: skip
    made = memory_from_row(row)
    expected = Memory(5, None, "tea", "EVENT", 1.0, "", "2026-01-01", "2026-01-02",
                      "2026-01-03", False, None, "m/8", "", "u1", "")  # fmt: skip
    assert made == expected and hash(made) == hash(expected) and repr(made) == repr(expected)
    assert set(vars(made)) == {field.name for field in fields(Memory)}
    assert isinstance(made.confidence, float) and made.archived is False
    with pytest.raises(AttributeError):
        made.content = "changed"  # type: ignore[misc]
