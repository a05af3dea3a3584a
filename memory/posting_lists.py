"""Keyword ranking (BM25 and Jaccard) of a chat's memories from in-memory posting lists.

FTS5's `bm25()` costs about 1.5 µs for every matching row, and a chat of 10,000 short
memories easily has 2,000+ rows matching some query word: 5-6 ms a query. Here a chat's
active memories (its own and the global ones) are turned into posting lists (Porter stems,
as FTS5's `porter` tokenizer makes them) and scored with numpy in well under a millisecond.
`PostingLists` takes changes without a rebuild: a changed memory is masked out of the large
base segment (or the middle one) and indexed again in a small recent one of at most
NEWEST_MAX memories, which then joins the middle one by its postings; all merge into a new
base once the later memories or the masked share grow (`memory.posting_segments`;
`memory.keyword_cache` keeps the lists and feeds them the changes). A change costs what it
changes, not what came since the last merge.

BM25 is FTS5's (k1 1.2, b 0.75, IDF floored at 1e-6) with a memory's `context` weighing
CONTEXT_WEIGHT of its content; the statistics are those of the chat's live candidates, so the
scores equal those of a fresh build. Jaccard compares the sets of content stems (stop words
dropped; CJK as character bigrams).
"""

from __future__ import annotations

import math
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import Stemmer

from memory.posting_segments import CONTEXT_WEIGHT as CONTEXT_WEIGHT
from memory.posting_segments import EMPTY, Segment, Tokenised, appended, joined
from memory.posting_segments import PackedRows as PackedRows
from memory.posting_segments import Positions as Positions
from memory.terms import content_terms, token_list

K1 = 1.2
B = 0.75
MIN_IDF = 1e-6
MAX_QUERY_TERMS = 32
VOCABULARY_SLACK = 1000  # terms no memory holds any more, kept before renumbering
NEWEST_MAX = 64  # the recent segment joins the middle one past this many memories
RECENT_MIN = 256  # the middle and recent segments merge into the base past this many ...
RECENT_SHARE = 0.05  # ... or past this share of them, whichever is more
MASKED_SHARE = 0.25  # the base is rebuilt when this share of it is masked out

STEM_CACHE_SIZE = 200_000  # distinct tokens remembered; the cache starts over past it

_stemmer = Stemmer.Stemmer("porter")
_stemmer_lock = threading.Lock()  # a PyStemmer object is not safe to share across threads
_stems: dict[str, str] = {}


def stem(token: str) -> str:
    """A token as the index holds it: diacritics removed, then Porter-stemmed (3+ letters)."""
    found = _stems.get(token)
    if found is None:
        if len(_stems) >= STEM_CACHE_SIZE:
            _stems.clear()
        found = _stems[token] = _stem(token)
    return found


def _stem(token: str) -> str:
    if not token.isascii():
        folded = unicodedata.normalize("NFKD", token)
        token = "".join(char for char in folded if not unicodedata.combining(char))
    if len(token) < 3 or not token.isascii():
        return token
    with _stemmer_lock:
        return str(_stemmer.stemWord(token))


def index_terms(text: str) -> list[str]:
    """The stemmed tokens of a memory's text, in order, with repeats."""
    return [stem(token) for token in token_list(text)]


def query_terms(text: str) -> list[str]:
    """The distinct stems of a query's content words (stop words dropped), at most 32."""
    return list(dict.fromkeys(stem(term) for term in content_terms(text)[:MAX_QUERY_TERMS]))


def memory_stems(content: str) -> set[str]:
    """The distinct stems of a memory's content words: what Jaccard compares."""
    return {stem(term) for term in content_terms(content)}


def tokenise(content: str, context: str, vocabulary: dict[str, int]) -> Tokenised:
    """Number a memory's stems, adding new ones to `vocabulary` (which only grows)."""
    text = [vocabulary.setdefault(term, len(vocabulary)) for term in index_terms(content)]
    around = [vocabulary.setdefault(term, len(vocabulary)) for term in index_terms(context)]
    terms = np.asarray(text + around, dtype=np.int64)
    return Tokenised(content, context, terms, len(text), len(memory_stems(content)))


def _tokenised(
    rows: Iterable[tuple[int, str, str]], known: dict[int, Tokenised], vocabulary: dict[str, int]
) -> dict[int, Tokenised]:
    """Each row's tokenisation: `known`'s when its texts are unchanged, else made anew."""
    found: dict[int, Tokenised] = {}
    for memory_id, content, context in rows:
        item = known.get(memory_id)
        if item is None or item.content != content or item.context != context:
            item = tokenise(content, context, vocabulary)
        found[memory_id] = item
    return found


def renumbered(
    items: dict[int, Tokenised], vocabulary: dict[str, int]
) -> tuple[dict[int, Tokenised], dict[str, int]]:
    """`items` with their terms numbered afresh by a vocabulary of only the terms they hold
    (from the term numbers: a memory loaded from a snapshot keeps no text)."""
    names = [""] * len(vocabulary)
    for term, number in vocabulary.items():
        names[number] = term
    held = [item.terms for item in items.values()]
    used = np.unique(np.concatenate(held)) if held else np.zeros(0, np.int64)
    mapping = np.zeros(len(vocabulary) + 1, np.int64)
    mapping[used] = np.arange(len(used))
    fresh = {names[int(number)]: place for place, number in enumerate(used.tolist())}
    return {
        memory_id: Tokenised(
            item.content, item.context, mapping[item.terms], item.content_terms, item.distinct
        )
        for memory_id, item in items.items()
    }, fresh


@dataclass(frozen=True)
class Limits:
    """When the segments merge: the recent one into the middle past `newest` memories; both
    into the base past `recent_min` (or `recent_share` of the chat, whichever is more) or when
    `masked_share` of the base is masked out."""

    newest: int
    recent_min: int
    recent_share: float
    masked_share: float


def default_limits() -> Limits:
    """The module's limits, read at each change."""
    return Limits(NEWEST_MAX, RECENT_MIN, RECENT_SHARE, MASKED_SHARE)


@dataclass(frozen=True)
class PostingLists:
    """A chat's posting lists in three segments: a large base with a mask of its memories
    that still count, a middle one with its own mask, and a small recent one of the memories
    added or changed last. A change rebuilds only the recent one (at most `Limits.newest`
    memories); past that it joins the middle one (numpy over their postings, no memory
    tokenised again), and past `Limits.recent_min` / `recent_share` all merge into a new base.
    Positions: the base's, then the middle's, then the recent's; the live memories keep the
    order they would have in two segments (base, then every later change in order), so ties
    break as they did.

    Immutable: `apply()` returns new lists, so a reader keeps a consistent snapshot.
    """

    vocabulary: dict[str, int]  # term -> number; shared by the segments, only grows
    base: Segment
    alive: Any  # numpy bool per base position (False: changed or gone since)
    recent: Segment
    count: int  # live memories
    masked: int  # base memories masked out
    base_length: float  # tokens of the live base memories (a whole number: sums are exact)
    average: float  # mean tokens of the live memories (BM25's length normalisation)
    middle: Segment = EMPTY
    middle_alive: Any = None  # numpy bool per middle position (None: all live)
    limits: Limits | None = None  # None: the module's (`default_limits`)

    @classmethod
    def build(
        cls,
        rows: Iterable[tuple[int, str, str]],
        previous: PostingLists | None = None,
        limits: Limits | None = None,
    ) -> PostingLists:
        """Index (id, content, context) rows, reusing `previous`'s tokenisation of unchanged ones.

        Term numbers carry over from `previous` (copied: it stays valid for its readers);
        once most of them no longer occur in any memory, everything is numbered afresh.
        """
        vocabulary = dict(previous.vocabulary) if previous is not None else {}
        known = previous.memories() if previous is not None else {}
        limits = limits if limits is not None or previous is None else previous.limits
        return cls._merged(_tokenised(rows, known, vocabulary), vocabulary, limits)

    @classmethod
    def _merged(
        cls, items: dict[int, Tokenised], vocabulary: dict[str, int], limits: Limits | None = None
    ) -> PostingLists:
        """One base segment of `items`; numbered afresh when most of `vocabulary` is unused."""
        base = Segment.build(items, len(vocabulary))
        alive = np.ones(len(base.ids), bool)
        lists = cls._assemble(vocabulary, base, alive, EMPTY, limits=limits)
        if not lists.stale():
            return lists
        return cls._merged(*renumbered(items, vocabulary), limits)

    @classmethod
    def _assemble(
        cls,
        vocabulary: dict[str, int],
        base: Segment,
        alive: Any,
        recent: Segment,
        base_length: float | None = None,
        middle: tuple[Segment, Any] = (EMPTY, None),
        limits: Limits | None = None,
    ) -> PostingLists:
        """The lists of these segments. `base_length`: the live base memories' tokens, when
        the caller kept it current (a change then costs no pass over the base's 90,000)."""
        if base_length is None:
            base_length = float(base.lengths[alive].sum())
        segment, middle_alive = middle
        if middle_alive is not None and middle_alive.all():
            middle_alive = None
        middle_lengths = segment.lengths if middle_alive is None else segment.lengths[middle_alive]
        live_base = int(alive.sum())
        count = live_base + len(middle_lengths) + len(recent.ids)
        # Token counts are whole numbers, so these sums are exact in any order: the same
        # average, to the bit, as the mean over every live memory.
        total = base_length + float(middle_lengths.sum()) + float(recent.lengths.sum())
        return cls(
            vocabulary=vocabulary,
            base=base,
            alive=alive,
            recent=recent,
            count=count,
            masked=len(alive) - live_base,
            base_length=base_length,
            average=max(total / count, 1e-9) if count else 1.0,
            middle=segment,
            middle_alive=middle_alive,
            limits=limits,
        )

    @cached_property
    def ids(self) -> Any:
        """The memory id at each position: the base's, the middle's, then the recent's
        (joined at the first ask of these lists, not at each change)."""
        return np.concatenate([self.base.ids, self.middle.ids, self.recent.ids])

    @property
    def size(self) -> int:
        """Positions: base memories (masked ones included), middle ones, then recent ones."""
        return len(self.base.ids) + len(self.middle.ids) + len(self.recent.ids)

    def _segments(self) -> list[tuple[Segment, Any, int]]:
        """(segment, mask or None, first position) of the three segments."""
        alive = self.alive if self.masked else None
        middle_start = len(self.base.ids)
        return [
            (self.base, alive, 0),
            (self.middle, self.middle_alive, middle_start),
            (self.recent, None, middle_start + len(self.middle.ids)),
        ]

    def _ids_at(self, positions: Any) -> Any:
        """The memory ids at `positions`, without joining the segments' ids."""
        if len(self.base.ids) == self.size:
            return self.base.ids[positions]
        found = np.empty(len(positions), np.int64)
        for segment, _, start in self._segments():
            inside = (positions >= start) & (positions < start + len(segment.ids))
            found[inside] = segment.ids[positions[inside] - start]
        return found

    def _norms(self, lengths: Any) -> Any:
        """K1 * (1 - B + B * length / average) of the postings' memories, in place (the
        same operations in the same order as over every memory: the same bits); only the
        postings a query reads, so a change recomputes nothing for the whole chat."""
        norms = np.multiply(B, lengths)
        norms /= self.average
        norms += 1.0 - B
        norms *= K1
        return norms

    def __len__(self) -> int:
        return self.count

    def stale(self) -> bool:
        """Whether most of the vocabulary no longer occurs in any memory."""
        used = np.zeros(len(self.vocabulary) + 1, bool)
        for segment, mask, _ in self._segments():
            if len(segment.positions):
                owners = segment.term_numbers()
                kept = owners if mask is None else owners[mask[segment.positions]]
                used[kept] = True
        return len(self.vocabulary) > 2 * int(used.sum()) + VOCABULARY_SLACK

    def memories(self) -> dict[int, Tokenised]:
        """The tokenisation of every live memory."""
        return {**self._unmasked(self.alive), **self._middle_rows(), **self.recent.rows}

    def item(self, memory_id: int) -> Tokenised | None:
        """A live memory's tokenisation (with its texts unless loaded from a snapshot)."""
        for segment, mask, _ in reversed(self._segments()):
            place = segment.where.get(memory_id)
            if place is not None and (mask is None or mask[place]):
                found: Tokenised = segment.rows[memory_id]
                return found
        return None

    def _unmasked(self, alive: Any) -> dict[int, Tokenised]:
        """The base memories that `alive` keeps."""
        rows = self.base.rows.items()
        return {
            memory_id: item for (memory_id, item), keep in zip(rows, alive, strict=True) if keep
        }

    def _middle_rows(self, alive: Any = None) -> dict[int, Tokenised]:
        """The middle memories that `alive` (by default the lists' mask) keeps."""
        alive = self.middle_alive if alive is None else alive
        rows = self.middle.rows
        if alive is None:
            return dict(rows)
        return {
            mid: rows[mid]
            for mid, keep in zip(self.middle.ids.tolist(), alive, strict=True)
            if keep
        }

    def apply(
        self, changed: Iterable[tuple[int, str, str]], removed: Iterable[int]
    ) -> PostingLists:
        """These lists with `changed` rows (new or edited) indexed and `removed` ids gone.

        The base and middle segments are masked and only the small recent one is rebuilt
        (past `Limits.newest` memories it joins the middle one). Past `recent_min` /
        `recent_share` memories after the base, or `masked_share` masked, all merge into a
        new base.
        """
        changed = list(changed)
        limits = self.limits or default_limits()
        alive, middle_alive, recent, base_length = self._masked(
            [*removed, *(r[0] for r in changed)]
        )
        known = {row[0]: item for row in changed if (item := self.item(row[0])) is not None}
        vocabulary = self.vocabulary  # appended to in place: older readers check bounds
        recent.update(_tokenised(changed, known, vocabulary))
        later = int(middle_alive.sum()) + len(recent)
        masked = len(alive) - int(alive.sum())
        if later > max(limits.recent_min, limits.recent_share * self.count) or (
            masked > limits.masked_share * max(len(alive), 1)
        ):
            return self._merged_into_base(alive, middle_alive, recent)
        if len(recent) > limits.newest:
            segment = Segment.build(recent, len(vocabulary), sparse=True)
            middle = joined([(self.middle, middle_alive), (segment, None)], len(vocabulary))
            return self._assemble(
                vocabulary, self.base, alive, EMPTY, base_length, (middle, None), self.limits
            )
        return self._assemble(
            vocabulary,
            self.base,
            alive,
            Segment.build(recent, len(vocabulary), sparse=True),
            base_length,
            (self.middle, middle_alive),
            self.limits,
        )

    def _merged_into_base(
        self, alive: Any, middle_alive: Any, recent: dict[int, Tokenised]
    ) -> PostingLists:
        """One base of the live memories, from the segments' postings (`joined`,
        `appended`): a pass over the chat's postings in numpy, not a rebuild of each memory's;
        numbered afresh (a rebuild) when most of the vocabulary is unused."""
        terms = len(self.vocabulary)
        newest = Segment.build(recent, terms, sparse=True)
        later = joined([(self.middle, middle_alive), (newest, None)], terms)
        rows = {**self._unmasked(alive), **later.rows}
        base = appended(self.base, alive, later, rows, terms)
        lists = self._assemble(
            self.vocabulary, base, np.ones(len(base.ids), bool), EMPTY, limits=self.limits
        )
        if not lists.stale():
            return lists
        return self._merged(*renumbered(rows, self.vocabulary), self.limits)

    def _masked(self, ids: list[int]) -> tuple[Any, Any, dict[int, Tokenised], float]:
        """(base mask, middle mask, recent rows, live base tokens) with `ids` taken out."""
        alive = self.alive.copy()
        middle_alive = (
            np.ones(len(self.middle.ids), bool)
            if self.middle_alive is None
            else self.middle_alive.copy()
        )
        recent = dict(self.recent.rows)
        base_length = self.base_length
        for memory_id in ids:
            place = self.base.where.get(memory_id)
            if place is not None and alive[place]:
                alive[place] = False
                base_length -= float(self.base.lengths[place])
            place = self.middle.where.get(memory_id)
            if place is not None:
                middle_alive[place] = False
            recent.pop(memory_id, None)
        return alive, middle_alive, recent, base_length

    def _postings(self, term: str) -> list[tuple[Any, Any, Any, Any]]:
        """(positions in `ids`, weights, in_content, lengths) of a term's live postings, per
        segment (`lengths`: tokens of each posting's memory)."""
        number = self.vocabulary.get(term)
        if number is None:
            return []
        found = []
        for segment, mask, start in self._segments():
            positions, weights, content = segment.postings(number)
            if len(positions) and mask is not None:
                keep = mask[positions]
                positions, weights, content = positions[keep], weights[keep], content[keep]
            if len(positions):
                lengths = segment.lengths[positions]
                found.append((positions + start, weights, content, lengths))
        return found

    def score(self, terms: list[str], depth: int) -> list[tuple[int, float]]:
        """(memory id, BM25 score) of the `depth` best memories holding any term, best first."""
        total = np.zeros(self.size)
        for term in dict.fromkeys(terms):
            postings = self._postings(term)
            matched = sum(len(positions) for positions, _, _, _ in postings)
            if not matched:
                continue
            idf = math.log((self.count - matched + 0.5) / (matched + 0.5))
            idf = idf if idf > 0 else MIN_IDF
            for positions, weights, _, lengths in postings:
                norms = self._norms(lengths)
                total[positions] += idf * weights * (K1 + 1.0) / (weights + norms)
        return self._best(total, depth)

    def jaccard(self, terms: list[str]) -> list[tuple[int, float]]:
        """(memory id, Jaccard of content-stem sets) of every memory sharing a term, best first.

        `terms`: the query's distinct content stems (`query_terms`).
        """
        shared = np.zeros(self.size)
        for term in dict.fromkeys(terms):
            for positions, _, content, _ in self._postings(term):
                shared[positions[content]] += 1.0
        hits = np.flatnonzero(shared)  # only these can score above 0: sizes of them alone
        sizes = np.empty(len(hits))
        for segment, _, start in self._segments():
            inside = (hits >= start) & (hits < start + len(segment.ids))
            sizes[inside] = segment.distinct[hits[inside] - start]
        common = shared[hits]
        scores = np.zeros(self.size)
        scores[hits] = common / np.maximum(
            len(set(terms)) + sizes - common, np.maximum(common, 1.0)
        )
        return self._best(scores, self.size)

    def _best(self, scores: Any, depth: int) -> list[tuple[int, float]]:
        hits = np.flatnonzero(scores > 0)  # on a bool array: several times faster at 100k
        if len(hits) > depth > 0:
            hits = hits[np.argpartition(-scores[hits], depth - 1)[:depth]]
        best = hits[np.argsort(-scores[hits], kind="stable")][: max(depth, 0)]
        return list(zip(self._ids_at(best).tolist(), scores[best].tolist(), strict=True))
