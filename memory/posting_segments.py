"""The segments of a chat's keyword posting lists (`memory.posting_lists.PostingLists`):
each a fixed set of tokenised memories and their postings by term, built from the memories
(`Segment.build`) or made from other segments' postings with no memory tokenised again
(`joined`, `appended`: how the small recent segment joins the middle one, and both the base).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

CONTEXT_WEIGHT = 0.5  # a memory's context counts half as much as its content


@dataclass(frozen=True)
class Tokenised:
    """One memory's term numbers (content, then context) and the texts they were made from."""

    content: str
    context: str
    terms: Any  # numpy int64
    content_terms: int  # how many of `terms` are the content's
    distinct: int  # distinct content stems, stop words dropped (Jaccard's set size)


class Positions(Mapping[int, int]):
    """Memory id -> position in `ids`, the dictionary made at its first lookup: a loaded
    snapshot's lists (`memory.posting_snapshot`) need none until a memory changes."""

    def __init__(self, ids: Any) -> None:
        self.ids = ids
        self._places: dict[int, int] | None = None
        self._lock = threading.Lock()

    def _built(self) -> dict[int, int]:
        with self._lock:
            if self._places is None:
                self._places = {
                    memory_id: place for place, memory_id in enumerate(self.ids.tolist())
                }
            return self._places

    def __getitem__(self, memory_id: int) -> int:
        return self._built()[memory_id]

    def __iter__(self) -> Iterator[int]:
        return iter(self.ids.tolist())

    def __len__(self) -> int:
        return len(self.ids)


class PackedRows(Mapping[int, Tokenised]):
    """A loaded segment's memories (`memory.rank_snapshots`): term numbers in one array,
    made into a `Tokenised` (with no text) when asked for."""

    def __init__(self, ids: Any, bounds: Any, terms: Any, content: Any, distinct: Any) -> None:
        self.ids, self.bounds, self.terms = ids, bounds, terms
        self.content, self.distinct = content, distinct
        self.where = Positions(ids)

    def __getitem__(self, memory_id: int) -> Tokenised:
        place = self.where[memory_id]
        start, end = int(self.bounds[place]), int(self.bounds[place + 1])
        terms = self.terms[start:end].astype(np.int64)
        return Tokenised("", "", terms, int(self.content[place]), int(self.distinct[place]))

    def __iter__(self) -> Iterator[int]:
        return iter(self.where)

    def __len__(self) -> int:
        return len(self.where)


@dataclass(frozen=True)
class Segment:
    """Posting lists of a fixed set of memories, their terms numbered by a shared vocabulary.

    The postings of term t are `positions[bounds[t]:bounds[t + 1]]` (positions in `ids`),
    with the memory's weighted count of the term in `weights` and whether it occurs in the
    content in `in_content`, the same slice. Terms numbered past `bounds` came later and
    have no postings here. A sparse segment (the small recent one) has `numbers`, the term
    numbers it holds, ascending: term `numbers[i]`'s postings are then at `bounds[i]`.
    """

    ids: Any  # numpy int64: the memory id at each position
    lengths: Any  # numpy float64: tokens per memory, content and context
    distinct: Any  # numpy float64: Jaccard set size per memory
    bounds: Any  # numpy int64
    positions: Any  # numpy int64
    weights: Any  # numpy float64
    in_content: Any  # numpy bool
    rows: Mapping[int, Tokenised]  # a `PackedRows` when loaded from a snapshot
    where: Mapping[int, int]  # memory id -> position
    numbers: Any = None  # numpy int64: the terms `bounds` is over (None: all, dense)

    @classmethod
    def build(cls, rows: dict[int, Tokenised], terms: int, *, sparse: bool = False) -> Segment:
        """Index tokenised memories whose term numbers are below `terms`.

        `bounds` ends after the highest term the memories hold; `sparse` (the recent
        segment): it covers only the terms they hold, so a memory bringing a new word into a
        large vocabulary (a name, a number) costs no pass over the whole vocabulary.
        """
        items = list(rows.values())
        size = max(len(items), 1)
        span = np.asarray(
            [(item.content_terms, len(item.terms) - item.content_terms) for item in items],
            dtype=np.int64,
        ).reshape(-1, 2)  # token counts: content, context
        numbers = np.concatenate([item.terms for item in items]) if items else np.zeros(0, int)
        owners = np.repeat(np.arange(len(items), dtype=np.int64), span.sum(axis=1))
        content = np.repeat(np.tile([True, False], len(items)), span.ravel())
        # One (term, position) key per token: sorting groups each term's postings, and
        # summing equal keys gives a memory's weighted count of the term.
        keys = numbers.astype(np.int64) * size + owners
        order = np.argsort(keys, kind="stable")
        keys, content = keys[order], content[order]
        firsts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else keys
        weights = np.where(content, 1.0, CONTEXT_WEIGHT)
        summed = np.add.reduceat(weights, firsts) if len(keys) else weights
        in_content = np.logical_or.reduceat(content, firsts) if len(keys) else content
        keys = keys[firsts]
        numbers, bounds = _term_bounds(keys // size, terms, sparse)
        return cls(
            ids=np.fromiter(rows, dtype=np.int64, count=len(items)),
            lengths=span.sum(axis=1).astype(np.float64),
            distinct=np.asarray([item.distinct for item in items], dtype=np.float64),
            bounds=bounds,
            positions=keys % size,
            weights=np.asarray(summed, dtype=np.float64),
            in_content=np.asarray(in_content, dtype=bool),
            rows=rows,
            where={memory_id: place for place, memory_id in enumerate(rows)},
            numbers=numbers,
        )

    def postings(self, number: int) -> tuple[Any, Any, Any]:
        """(positions, weights, in_content) of term `number`."""
        place = number
        if self.numbers is not None:
            place = int(np.searchsorted(self.numbers, number))
            if place < len(self.numbers) and self.numbers[place] != number:
                place = len(self.numbers)
        if place + 1 >= len(self.bounds):
            return self.positions[:0], self.weights[:0], self.in_content[:0]
        start, end = int(self.bounds[place]), int(self.bounds[place + 1])
        return self.positions[start:end], self.weights[start:end], self.in_content[start:end]

    def term_numbers(self) -> Any:
        """The term number of each posting, in order."""
        held = np.arange(len(self.bounds) - 1) if self.numbers is None else self.numbers
        return np.repeat(held, np.diff(self.bounds))


def _term_bounds(term_of: Any, terms: int, sparse: bool) -> tuple[Any, Any]:
    """(numbers, bounds) of `Segment` from each posting's term number (ascending)."""
    if sparse:
        starts = (
            np.flatnonzero(np.r_[True, term_of[1:] != term_of[:-1]]) if len(term_of) else term_of
        )
        return term_of[starts], np.r_[starts, len(term_of)].astype(np.int64)
    terms = min(terms, int(term_of[-1]) + 1) if len(term_of) else 0
    return None, np.concatenate([[0], np.cumsum(np.bincount(term_of, minlength=terms))])


def joined(parts: list[tuple[Segment, Any]], terms: int) -> Segment:
    """One sparse segment of the memories `parts` keep ((segment, alive or None), in order),
    made from their postings with no tokenised memory read again: the same arrays as
    `Segment.build` of those memories in that order (a memory's postings are its own)."""
    ids, lengths, distinct, term_of, positions, weights, content = ([] for _ in range(7))
    rows: dict[int, Tokenised] = {}
    offset = 0
    for segment, alive in parts:
        keep = np.ones(len(segment.ids), bool) if alive is None else alive
        place = np.cumsum(keep) - 1 + offset  # each kept memory's position in the result
        held = keep[segment.positions]
        term_of.append(segment.term_numbers()[held])
        positions.append(place[segment.positions[held]])
        weights.append(segment.weights[held])
        content.append(segment.in_content[held])
        kept_ids = segment.ids[keep]
        ids.append(kept_ids)
        lengths.append(segment.lengths[keep])
        distinct.append(segment.distinct[keep])
        rows.update((memory_id, segment.rows[memory_id]) for memory_id in kept_ids.tolist())
        offset += len(kept_ids)
    keys = np.concatenate(term_of) * max(offset, 1) + np.concatenate(positions)
    order = np.argsort(keys, kind="stable")
    numbers, bounds = _term_bounds(keys[order] // max(offset, 1), terms, True)
    all_ids = np.concatenate(ids)
    return Segment(
        ids=all_ids,
        lengths=np.concatenate(lengths),
        distinct=np.concatenate(distinct),
        bounds=bounds,
        positions=np.concatenate(positions)[order],
        weights=np.concatenate(weights)[order],
        in_content=np.concatenate(content)[order],
        rows=rows,
        where={memory_id: place for place, memory_id in enumerate(all_ids.tolist())},
        numbers=numbers,
    )


def appended(
    base: Segment, alive: Any, later: Segment, rows: dict[int, Tokenised], terms: int
) -> Segment:
    """One dense segment of the memories of `base` that `alive` keeps, then those of `later`
    (`rows`: their tokenisations, in that order): both hold their postings in (term,
    position) order, so the two are interleaved in one pass (no sort of the whole chat's
    postings, no memory tokenised again) into the arrays `Segment.build` makes of them."""
    place = np.cumsum(alive) - 1
    held = alive[base.positions]
    kept = int(alive.sum())
    size = max(kept + len(later.ids), 1)
    old_terms = base.term_numbers()[held]
    old_keys = old_terms * size + place[base.positions[held]]
    new_terms = later.term_numbers()
    new_keys = new_terms * size + later.positions + kept
    new_at = np.searchsorted(old_keys, new_keys) + np.arange(len(new_keys))
    from_later = np.zeros(len(old_keys) + len(new_keys), bool)
    from_later[new_at] = True

    def woven(old: Any, new: Any) -> Any:
        out = np.empty(len(from_later), np.result_type(old, new))
        out[~from_later], out[from_later] = old, new
        return out

    keys = woven(old_keys, new_keys)
    numbers, bounds = _term_bounds(keys // size, terms, False)
    ids = np.concatenate([base.ids[alive], later.ids])
    return Segment(
        ids=ids,
        lengths=np.concatenate([base.lengths[alive], later.lengths]),
        distinct=np.concatenate([base.distinct[alive], later.distinct]),
        bounds=bounds,
        positions=keys % size,
        weights=woven(base.weights[held], later.weights),
        in_content=woven(base.in_content[held], later.in_content),
        rows=rows,
        where=Positions(ids),
        numbers=numbers,
    )


EMPTY = Segment.build({}, 0)
