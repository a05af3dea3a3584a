"""A chat's keyword posting lists (`memory.posting_lists`) as numpy arrays to save, and back:
one base segment with each memory's term numbers, and the vocabulary (`memory.rank_snapshots`
saves them; `memory.keyword_cache` loads them)."""

from __future__ import annotations

from typing import Any

import numpy as np

from memory.posting_lists import PackedRows, PostingLists, Segment, renumbered


def _documents(base: Segment) -> tuple[Any, Any, Any]:
    """(bounds, term numbers, content term counts) of the base's memories, in its order."""
    if isinstance(base.rows, PackedRows):
        return base.rows.bounds, base.rows.terms, base.rows.content
    items = list(base.rows.values())
    sizes = np.asarray([len(item.terms) for item in items], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    terms = np.concatenate([item.terms for item in items]) if items else sizes
    return bounds, terms, np.asarray([item.content_terms for item in items], dtype=np.int32)


def lists_arrays(lists: PostingLists) -> dict[str, Any]:
    """The lists as one base segment whose vocabulary holds only the terms of its memories
    (merged and renumbered first when they have a recent or masked part, or a term no
    memory holds any more: a forgotten memory's words are never saved)."""
    base_terms = int((np.diff(lists.base.bounds) > 0).sum())
    if lists.masked or len(lists.recent.ids) or base_terms != len(lists.vocabulary):
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
        "lengths": base.lengths,
        "distinct": base.distinct,
        "bounds": base.bounds,
        "positions": base.positions.astype(np.int32),
        "weights": base.weights.astype(np.float32),
        "in_content": base.in_content,
        "doc_bounds": doc_bounds,
        "doc_terms": doc_terms.astype(np.int32),
        "doc_content": np.asarray(doc_content, dtype=np.int32),
    }


def lists_from_arrays(arrays: dict[str, Any]) -> PostingLists:
    """Lists made of `lists_arrays`' output, without tokenising or sorting anything."""
    names = bytes(arrays["vocabulary"]).decode().split("\n") if int(arrays["terms"]) else []
    vocabulary = dict(zip(names, range(len(names)), strict=True))
    ids = arrays["ids"]
    rows = PackedRows(
        ids, arrays["doc_bounds"], arrays["doc_terms"], arrays["doc_content"], arrays["distinct"]
    )
    base = Segment(
        ids=ids,
        lengths=arrays["lengths"],
        distinct=arrays["distinct"],
        bounds=arrays["bounds"],
        positions=arrays["positions"],
        weights=arrays["weights"].astype(np.float64),
        in_content=arrays["in_content"],
        rows=rows,
        where=rows.where,
    )
    return PostingLists._assemble(vocabulary, base, np.ones(len(ids), bool), Segment.build({}, 0))
