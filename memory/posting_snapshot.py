"""A chat's keyword posting lists (`memory.posting_lists`) as numpy arrays to save, and back:
one base segment with each memory's term numbers, and the vocabulary (`memory.rank_snapshots`
saves them; `memory.keyword_cache` loads them).

Each memory's term numbers (`DOC_ARRAYS`, 4.7 of 16 MB at 100,000 memories) serve only to
take changes (`PostingLists.apply`, merging), never to score: they are saved apart
(`split_arrays`) and read at the first change (`DeferredRows`), so a chat's first query
after a start does not wait for them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from memory.posting_lists import PostingLists, renumbered, tokenise
from memory.posting_segments import PackedRows, Positions, Segment
from memory.store import RankingRows

DOC_ARRAYS = ("doc_bounds", "doc_terms", "doc_content")
Docs = Callable[[], "dict[str, Any] | None"]  # the saved doc arrays (None: not these lists')


def _documents(base: Segment) -> tuple[Any, Any, Any]:
    """(bounds, term numbers, content term counts) of the base's memories, in its order."""
    if isinstance(base.rows, PackedRows):
        return base.rows.bounds, base.rows.terms, base.rows.content
    items = list(base.rows.values())
    sizes = np.asarray([len(item.terms) for item in items], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    terms = np.concatenate([item.terms for item in items]) if items else sizes
    return bounds, terms, np.asarray([item.content_terms for item in items], dtype=np.int32)


def _weight_type(weights: Any) -> Any:
    """float16 where it holds every weight exactly (sums of 1 and 0.5: below 1,024), else
    float32: 1.8 MB less to read at 100,000 memories."""
    return np.float16 if not len(weights) or float(weights.max()) < 1024 else np.float32


def lists_arrays(lists: PostingLists) -> dict[str, Any]:
    """The lists as one base segment whose vocabulary holds only the terms of its memories
    (merged and renumbered first when they have a middle, recent or masked part, or a term no
    memory holds any more: a forgotten memory's words are never saved)."""
    base_terms = int((np.diff(lists.base.bounds) > 0).sum())
    later = len(lists.middle.ids) + len(lists.recent.ids)
    if lists.masked or later or base_terms != len(lists.vocabulary):
        lists = PostingLists._merged(*renumbered(lists.memories(), lists.vocabulary))
    base = lists.base
    names = [""] * len(lists.vocabulary)
    for term, number in lists.vocabulary.items():
        names[number] = term
    doc_bounds, doc_terms, doc_content = _documents(base)
    return {
        "vocabulary": np.frombuffer("\n".join(names).encode(), dtype=np.uint8),
        "terms": np.asarray(len(names)),
        "ids": base.ids,
        "lengths": base.lengths.astype(np.float32),  # token counts: exact below 2**24
        "distinct": base.distinct.astype(np.float32),
        "bounds": base.bounds.astype(np.int32 if len(base.positions) < 2**31 else np.int64),
        "positions": base.positions.astype(np.int32),
        "weights": base.weights.astype(_weight_type(base.weights)),
        "in_content": base.in_content,
        "doc_bounds": doc_bounds,
        "doc_terms": doc_terms.astype(np.int32),
        "doc_content": np.asarray(doc_content, dtype=np.int32),
    }


def split_arrays(arrays: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """`lists_arrays`' output as (what scoring needs, `DOC_ARRAYS`), saved apart."""
    docs = {name: arrays[name] for name in DOC_ARRAYS}
    return {name: value for name, value in arrays.items() if name not in docs}, docs


class DeferredRows(PackedRows):
    """`PackedRows` whose term numbers are read at the first change (`read`, by
    `memory.keyword_cache`, which holds a store then: these rows hold none, so a cached
    lists object never keeps its connection alive). When the saved ones do not belong to
    these lists (saved anew in between), the memories are tokenised again from their texts
    (their term numbers from the lists' own vocabulary)."""

    def __init__(self, ids: Any, distinct: Any, vocabulary: dict[str, int]) -> None:
        self.ids, self.distinct = ids, distinct
        self.where = Positions(ids)
        self.vocabulary = vocabulary
        self.marks: Any = None  # the lists' snapshot marks (set by their loader)
        self._arrays: tuple[Any, Any, Any] | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._arrays is not None

    @property
    def bounds(self) -> Any:
        return self._loaded()[0]

    @property
    def terms(self) -> Any:
        return self._loaded()[1]

    @property
    def content(self) -> Any:
        return self._loaded()[2]

    def read(self, docs: Docs, rows: Callable[[], RankingRows]) -> None:
        """Take the saved term numbers (`docs`), or tokenise `rows` when they do not fit."""
        with self._lock:
            if self._arrays is None:
                found = docs()
                if found is None or len(found["doc_bounds"]) != len(self.ids) + 1:
                    found = self._tokenised(rows())
                bounds, terms, content = (found[name] for name in DOC_ARRAYS)
                self._arrays = (bounds, terms, content)

    def _loaded(self) -> tuple[Any, Any, Any]:
        if self._arrays is None:
            raise RuntimeError(
                "the memories' term numbers were not read (keyword_cache reads them)"
            )
        return self._arrays

    def _tokenised(self, rows: RankingRows) -> dict[str, Any]:
        texts = {row[0]: row for row in rows}
        items = [
            tokenise(texts[i][1], texts[i][2], self.vocabulary) if i in texts else None
            for i in self.ids.tolist()
        ]
        sizes = [0 if item is None else len(item.terms) for item in items]
        terms = [item.terms for item in items if item is not None]
        return {
            "doc_bounds": np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
            "doc_terms": np.concatenate(terms) if terms else np.zeros(0, np.int64),
            "doc_content": np.asarray(
                [0 if item is None else item.content_terms for item in items], np.int32
            ),
        }


def lists_from_arrays(arrays: dict[str, Any]) -> PostingLists:
    """Lists made of `lists_arrays`' output, without tokenising or sorting anything; of
    `split_arrays`' first part, their rows are `DeferredRows`."""
    names = bytes(arrays["vocabulary"]).decode().split("\n") if int(arrays["terms"]) else []
    vocabulary = dict(zip(names, range(len(names)), strict=True))
    ids, distinct = arrays["ids"], arrays["distinct"].astype(np.float64)
    rows: PackedRows
    if "doc_terms" not in arrays:
        rows = DeferredRows(ids, distinct, vocabulary)
    else:
        bounds, terms, content = (arrays[name] for name in DOC_ARRAYS)
        rows = PackedRows(ids, bounds, terms, content, distinct)
    base = Segment(
        ids=ids,
        lengths=arrays["lengths"].astype(np.float64),
        distinct=distinct,
        bounds=arrays["bounds"].astype(np.int64),
        positions=arrays["positions"],
        weights=arrays["weights"].astype(np.float64),
        in_content=arrays["in_content"],
        rows=rows,
        where=rows.where,
    )
    return PostingLists._assemble(vocabulary, base, np.ones(len(ids), bool), Segment.build({}, 0))


def saved_docs(arrays: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The doc arrays of a saved `KEYWORD_DOCS` snapshot (None: none, or not of this layout)."""
    if arrays is None or any(name not in arrays for name in DOC_ARRAYS):
        return None
    return {name: arrays[name] for name in DOC_ARRAYS}
