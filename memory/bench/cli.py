"""`mnemo bench locomo PATH` (evidence recall on LoCoMo) and `mnemo bench memory` (latency).

They build throwaway databases in a temporary directory through the real memory store and
rank through the real `rank_memories`. Figures are printed, never asserted.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import click

from core.storage.database import PostgresDatabase, SqliteDatabase
from core.storage.engine import Storage
from memory.bench.techniques import TECHNIQUES

RETRIEVERS = ["hybrid", "knn", "bm25", "jaccard"]
CHANGED_QUERIES = 100  # `bench memory`: queries each just after a new memory
BURST_SHARE = 0.03  # `bench memory`: new memories (of the chat) before "after a burst" ...
BURST_MAX = 3_000  # ... at most: the recent segments stay below their merge (5%)
FILL_BATCH = 2_000  # `bench memory`: memories embedded at a time
LOCOMO_CREDIT = "LoCoMo (Maharana et al., ACL 2024), CC BY-NC 4.0; evidence recall (cov@k)"


def _embedder_for(retriever: str, query_precision: str) -> Any:
    from memory.embeddings import load_embedder

    return load_embedder("", query_precision) if retriever in ("hybrid", "knn") else None


query_precision_option = click.option(
    "--query-precision",
    type=click.Choice(["int8", "float32"]),
    default="int8",
    show_default=True,
    help="What queries are embedded with (documents are always float32).",
)


@click.command("locomo")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--retriever", type=click.Choice(RETRIEVERS), default="hybrid", show_default=True)
@click.option(
    "--memories",
    "kind",
    type=click.Choice(["turns", "observations"]),
    default="turns",
    show_default=True,
    help="One memory per dialog turn, or the dataset's observation facts.",
)
@click.option(
    "--technique",
    "techniques",
    multiple=True,
    type=click.Choice([*TECHNIQUES, "none"]),
    help="Repeatable; default: the kept ones (see `memory.bench.techniques.DEFAULT`). "
    "`none`: the plain ranking.",
)
@click.option(
    "--compare",
    is_flag=True,
    help="Run the plain ranking, each technique alone, the defaults and all together.",
)
@click.option(
    "--embedding-cache",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file keeping vectors between runs (made when missing).",
)
@click.option(
    "--gap",
    is_flag=True,
    help="With the kept techniques: where each question's evidence ranks (top 100), an "
    "oracle re-ranker of the top 50, evidence out of reach of both rankers "
    "(docs/notes/locomo-gap.md). Always JSON.",
)
@query_precision_option
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable result.")
def bench_locomo(
    path: Path,
    retriever: str,
    kind: str,
    techniques: tuple[str, ...],
    compare: bool,
    embedding_cache: Path | None,
    gap: bool,
    query_precision: str,
    as_json: bool,
) -> None:
    """Evidence recall cov@5/cov@10 and ranking latency on a LoCoMo file."""
    from memory.bench.techniques import DEFAULT

    embedder = _embedder_for(retriever, query_precision)
    if embedder is not None:
        from memory.bench.embedding_cache import CachingEmbedder

        embedder = CachingEmbedder(embedder, embedding_cache)
    if gap:
        _locomo_gap(path, kind, embedder)
        return
    chosen = DEFAULT if not techniques else frozenset(techniques) - {"none"}
    runs = _compare_runs(chosen) if compare else {_run_name(chosen): chosen}
    summaries = {}
    for name, selected in runs.items():
        summaries[name] = _locomo_once(path, retriever, kind, embedder, selected, as_json)
        summaries[name].update(
            retriever=retriever,
            memories=kind,
            query_precision=query_precision,
            techniques=sorted(selected),
        )
        if not as_json:
            _print_locomo(name, summaries[name])
    if embedder is not None:
        embedder.save()
    if as_json:
        click.echo(json.dumps(summaries if compare else summaries[name], indent=2))


def _locomo_gap(path: Path, kind: str, embedder: Any) -> None:
    from memory.bench.locomo_gap import run_gap

    with tempfile.TemporaryDirectory(prefix="mnemo-locomo-gap-") as work:
        report = run_gap(path, Path(work), embedder, kind == "observations")
    if embedder is not None:
        embedder.save()
    summary = {"credit": LOCOMO_CREDIT, "memories": kind, **report.summary()}
    click.echo(json.dumps(summary, indent=2))


def _run_name(techniques: frozenset[str]) -> str:
    return "+".join(sorted(techniques)) or "none"


def _compare_runs(chosen: frozenset[str]) -> dict[str, frozenset[str]]:
    from memory.bench.techniques import DEFAULT, TECHNIQUES

    runs = {"none": frozenset[str]()}
    runs.update({name: frozenset({name}) for name in TECHNIQUES})
    runs["default"] = DEFAULT
    runs["all"] = frozenset(TECHNIQUES)
    if chosen not in runs.values():
        runs[_run_name(chosen)] = chosen
    return runs


def _locomo_once(
    path: Path, retriever: str, kind: str, embedder: Any, techniques: frozenset[str], quiet: bool
) -> dict[str, Any]:
    from memory.bench.locomo import run_locomo

    with tempfile.TemporaryDirectory(prefix="mnemo-locomo-") as work:
        result = run_locomo(
            path,
            Path(work),
            retriever=retriever,
            embedder=embedder,
            use_observations=kind == "observations",
            on_sample=None if quiet else lambda sid: click.echo(f"  {sid} done", err=True),
            techniques=techniques,
        )
    return result.summary()


def _print_locomo(name: str, summary: dict[str, Any]) -> None:
    click.echo(
        f"{LOCOMO_CREDIT}; retriever={summary['retriever']}, memories={summary['memories']}, "
        f"queries={summary['query_precision']}, techniques={name}"
    )
    click.echo(
        f"questions: {summary['n_questions']} "
        f"(skipped without evidence: {summary['n_skipped_no_evidence']})"
    )
    click.echo(f"cov@5 {summary['cov@5']:.3f}  cov@10 {summary['cov@10']:.3f}")
    for category, figures in summary["by_category"].items():
        click.echo(f"  {category:<12} cov@5 {figures['cov@5']:.3f}  cov@10 {figures['cov@10']:.3f}")
    per = "  ".join(f"{sid} {cov:.3f}" for sid, cov in summary["by_conversation"]["cov@10"].items())
    click.echo(f"  cov@10 by conversation: {per}")
    click.echo(
        f"ranking latency ms: p50 {summary['latency_ms_p50']:.2f}  "
        f"p95 {summary['latency_ms_p95']:.2f}"
    )


_PEOPLE = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goro", "Hana", "Ivan", "Jo"]
_VERBS = ["likes", "visited", "bought", "is learning", "fixed", "cooked", "painted", "sold"]
_THINGS = [
    "guitar",
    "bicycle",
    "garden",
    "python",
    "pasta",
    "kayak",
    "violin",
    "camera",
    "chess",
    "pottery",
    "marathon",
    "telescope",
    "sourdough",
    "piano",
    "drone",
]
_PLACES = ["Berlin", "Lisbon", "Kyoto", "Austin", "Oslo", "Cairo", "Lima", "Hanoi"]
_WHEN = ["last week", "in May", "yesterday", "two years ago", "on Sunday", "this morning"]


def synthetic_memory(rng: random.Random) -> str:
    return (
        f"{rng.choice(_PEOPLE)} {rng.choice(_VERBS)} a {rng.choice(_THINGS)} in "
        f"{rng.choice(_PLACES)} {rng.choice(_WHEN)} (note {rng.randrange(10**6)})"
    )


def synthetic_query(rng: random.Random) -> str:
    return (
        f"What did {rng.choice(_PEOPLE)} do with the {rng.choice(_THINGS)} "
        f"in {rng.choice(_PLACES)}? ({rng.randrange(10**6)})"
    )


@click.command("memory")
@click.option("--n", "count", default=10_000, show_default=True, type=click.IntRange(1))
@click.option("--queries", default=200, show_default=True, type=click.IntRange(1))
@click.option(
    "--retriever",
    "retrievers",
    multiple=True,
    type=click.Choice(RETRIEVERS),
    help="Repeatable; default: all four.",
)
@query_precision_option
@click.option(
    "--gap",
    type=click.FloatRange(0),
    default=0.0,
    show_default=True,
    help="Idle seconds before each timed query, as between a bot's messages.",
)
@click.option(
    "--storage-url",
    default=None,
    help="Bench on this (empty) PostgreSQL database instead of a throwaway SQLite file.",
)
@click.option(
    "--test-postgres",
    is_flag=True,
    help="Bench on a throwaway PostgreSQL server started for the run (core.bench.fakes.postgres).",
)
@click.option(
    "--embedding-cache",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file keeping the synthetic memories' vectors between runs (queries are always"
    " embedded, and timed).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_memory(
    count: int,
    queries: int,
    retrievers: tuple[str, ...],
    query_precision: str,
    gap: float,
    storage_url: str | None,
    test_postgres: bool,
    embedding_cache: Path | None,
    as_json: bool,
) -> None:
    """Ranking latency (query embedding included) for one chat of N memories."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mnemo-bench-")))
        if test_postgres:
            from core.bench.fakes.postgres import PostgresServer

            server = stack.enter_context(PostgresServer())
            storage_url = server.create_database("bench")
        url = storage_url or f"sqlite:///{work / 'bench.db'}"
        storage = _bench_storage(url)
        stack.callback(storage.close)
        options = MemoryBenchOptions(retrievers, query_precision, gap, embedding_cache, url)
        _bench_memory_on(storage, count, queries, options, as_json, partial(_bench_storage, url))


def _bench_storage(url: str) -> Storage:
    """A throwaway SQLite file, or the (migrated) PostgreSQL database `url`."""
    from core.config import StorageConfig
    from core.storage.engine import open_storage

    return open_storage(StorageConfig(url=url))


@dataclass(frozen=True)
class MemoryBenchOptions:
    retrievers: tuple[str, ...] = ()
    query_precision: str = "int8"
    gap: float = 0.0
    embedding_cache: Path | None = None  # documents' vectors kept between runs
    url: str | None = None  # the database, for a serving process's memory use


def _bench_memory_on(
    storage: Storage,
    count: int,
    queries: int,
    options: MemoryBenchOptions,
    as_json: bool,
    reopen: Callable[[], Storage] | None = None,
) -> None:
    from memory.bench.restart import restart_figures, vector_recall
    from memory.stores import memory_store

    rng = random.Random(7)
    embedder = _documents_cached(options)
    gap = options.gap
    chat_id, other_id = _bench_chats(storage)
    memories = memory_store(storage, embedder)
    started = time.perf_counter()
    _fill(memories, embedder, (chat_id, other_id), count, rng)
    ingest_s = time.perf_counter() - started
    if hasattr(embedder, "inner"):  # the cached document vectors go: not part of the RSS
        embedder = embedder.inner
        memories = memory_store(storage, embedder)
    results = _first_builds(memories, chat_id)
    modes = list(options.retrievers or RETRIEVERS)
    for mode in modes:
        asked = [synthetic_query(rng) for _ in range(queries)]  # fresh: no cached vectors
        results[mode] = _timed(asked, partial(_rank_once, memories, chat_id, mode), gap)
    results[f"{modes[0]}, just after a new memory"] = _after_changes(
        memories, chat_id, modes[0], rng, gap
    )
    results[f"{modes[0]}, after a burst of new memories"] = _after_burst(
        memories, chat_id, modes[0], rng, gap, min(BURST_MAX, int(count * BURST_SHARE))
    )
    results.update(_side_figures(storage, memories, embedder, chat_id, rng, queries, gap))
    if reopen is not None:
        asked = [synthetic_query(rng) for _ in range(queries)]
        results.update(restart_figures(reopen, embedder, chat_id, asked, memories))
    if options.url is not None:
        results["(a serving process: memory use)"] = _serving(options.url, chat_id, options)
    if embedder is not None and memories.vectors_unavailable() is None:
        asked = [synthetic_query(rng) for _ in range(min(queries, 100))]
        results["(vectors: recall@10 against exact)"] = vector_recall(
            memories, embedder, chat_id, asked
        )
    precision = getattr(embedder, "query_precision", "none (no model)")
    results["(ingest)"] = {"per_s": round(count / max(ingest_s, 1e-9), 1)}
    _print_memory_bench(
        count, queries, ingest_s, precision, gap, results, as_json, storage.describe()
    )


def _serving(url: str, chat_id: int, options: MemoryBenchOptions) -> dict[str, float]:
    """A serving process's memory use, on queries of its own (the later figures' stay)."""
    from memory.bench.serving_memory import SERVED_QUERIES, serving_memory

    served = random.Random(11)
    asked = [synthetic_query(served) for _ in range(SERVED_QUERIES)]
    return serving_memory(url, chat_id, options.query_precision, asked)


def _side_figures(
    storage: Storage,
    memories: Any,
    embedder: Any,
    chat_id: int,
    rng: random.Random,
    queries: int,
    gap: float,
) -> dict[str, dict[str, float]]:
    """The known-memory lookup, the engine's own keyword or KNN search, query embedding."""
    asked = [synthetic_query(rng) for _ in range(queries)]
    results = {
        "(known-memory lookup, full text)": _timed(
            asked, partial(_known_lookup, memories, chat_id), gap
        )
    }
    database = storage.database
    if isinstance(database, SqliteDatabase):
        asked = [synthetic_query(rng) for _ in range(queries)]
        fts = partial(_fts5_bm25, database.conn, chat_id)
        results["(bm25 by FTS5 itself)"] = _timed(asked, fts, gap)
    elif isinstance(database, PostgresDatabase) and embedder and database.pg.info.vector_loaded:
        results.update(_pgvector_knn(database.pg, embedder, chat_id, rng, queries, gap))
    if embedder is not None:
        asked = [synthetic_query(rng) for _ in range(queries)]
        results["(query embedding alone)"] = _timed(asked, embedder.embed_query, gap)
    return results


def _documents_cached(options: MemoryBenchOptions) -> Any:
    """The embedder, its document vectors kept in `options.embedding_cache` if given."""
    from memory.bench.embedding_cache import CachingEmbedder
    from memory.embeddings import load_embedder

    embedder = load_embedder("", options.query_precision)
    if embedder is None or options.embedding_cache is None:
        return embedder
    return CachingEmbedder(embedder, options.embedding_cache, queries=False)


def _fill(
    memories: Any,
    embedder: Any,
    chats: tuple[int, int],
    count: int,
    rng: random.Random,
) -> None:
    """`count` synthetic memories, one in ten in the neighbour chat (`chats[1]`), stored
    `FILL_BATCH` at a time as an import would (`MemoryStore.add_many`)."""
    from memory.store import NewMemory

    texts = [synthetic_memory(rng) for _ in range(count)]
    for start in range(0, count, FILL_BATCH):
        batch = texts[start : start + FILL_BATCH]
        vectors = embedder.embed(batch) if embedder is not None else [None] * len(batch)
        memories.add_many(
            [
                NewMemory(chats[1] if number % 10 == 9 else chats[0], text, "EVENT", "bench",
                          embedding=vector)
                for number, (text, vector) in enumerate(zip(batch, vectors, strict=True), start)
            ]
        )  # fmt: skip
    if hasattr(embedder, "save"):
        embedder.save()  # the documents' vectors, for the next run


def _first_builds(memories: Any, chat_id: int) -> dict[str, dict[str, float]]:
    """A chat's keyword lists and vectors are built at its first query (timed on their
    own), then kept up to date change by change (timed in "just after a new memory");
    left built, as they stand between changes."""
    from memory.keyword_cache import keyword_lists
    from memory.vector_cache import chat_vectors

    results = {
        "(keyword lists, first build)": _timed(
            ["build"] * 5, partial(_first_build, memories, chat_id)
        )
    }
    keyword_lists(memories, chat_id)
    results["(vectors held in memory, first build)"] = _timed(
        ["build"] * 5, partial(_first_vectors, memories, chat_id)
    )
    chat_vectors(memories, chat_id)
    return results


def _bench_chats(storage: Storage) -> tuple[int, int]:
    """The ranked chat and a neighbour's, on either engine."""
    from core.storage.stores import session_store

    sessions = session_store(storage)
    return (
        sessions.get_or_create_chat("bench", "a").id,
        sessions.get_or_create_chat("bench", "b").id,
    )


def _known_lookup(memories: Any, chat_id: int, query: str) -> object:
    return memories.matching(chat_id, query, 10)


def _pgvector_knn(
    pg: Any, embedder: Any, chat_id: int, rng: random.Random, queries: int, gap: float
) -> dict[str, dict[str, float]]:
    """pgvector KNN in the server (query embedding excluded): exact, then with an HNSW index
    (iterative scans on), and the HNSW result's recall@10 against the exact one."""
    from memory import pg_index

    asked = [embedder.embed_query(synthetic_query(rng)) for _ in range(queries)]
    exact: list[list[int]] = []
    found: list[list[int]] = []

    def knn(into: list[list[int]], vector: list[float]) -> None:
        with pg.connection() as conn:
            near = pg_index.nearest(conn, [chat_id, 0], vector, 10, True)
        into.append([memory_id for memory_id, _ in near])

    figures = {"(pgvector KNN, exact)": _timed_vectors(asked, partial(knn, exact), gap)}
    with pg.connection() as conn:
        started = time.perf_counter()
        pg_index.set_hnsw_index(conn, True)
        built_s = time.perf_counter() - started
    with pg.connection() as conn:  # iterative scans are a session setting: per query
        pg_index.set_hnsw_index(conn, True)
        timed = _timed_vectors(asked, partial(_knn_on, conn, chat_id, found), gap)
    recall = sum(len(set(a) & set(b)) for a, b in zip(exact, found, strict=True))
    timed["recall_at_10"] = round(recall / max(1, sum(len(a) for a in exact)), 3)
    timed["index_build_s"] = round(built_s, 1)
    figures["(pgvector KNN, HNSW + iterative scan)"] = timed
    with pg.connection() as conn:
        pg_index.set_hnsw_index(conn, False)
    return figures


def _knn_on(conn: Any, chat_id: int, into: list[list[int]], vector: list[float]) -> None:
    from memory import pg_index

    near = pg_index.nearest(conn, [chat_id, 0], vector, 10, True)
    into.append([memory_id for memory_id, _ in near])


def _timed_vectors(
    vectors: list[list[float]], run: Callable[[list[float]], object], gap: float
) -> dict[str, float]:
    timings = Stopwatch()
    for vector in vectors:
        time.sleep(gap)
        with timings.lap():
            run(vector)
    return timings.figures()


def _rank_once(memories: Any, chat_id: int, mode: str, query: str) -> object:
    from memory.retrieval import rank_memories

    return rank_memories(memories, chat_id, query, 10, mode=mode)


def _first_build(memories: Any, chat_id: int, _: str) -> object:
    from memory.posting_lists import PostingLists

    return PostingLists.build(memories.ranking_rows(chat_id))


def _first_vectors(memories: Any, chat_id: int, _: str) -> object:
    from memory.vector_cache import ChatVectors

    return ChatVectors.build(memories.vector_rows(chat_id))


def _fts5_bm25(conn: Any, chat_id: int, query: str) -> object:
    """The same BM25 asked of the FTS5 table, as ranking did before its in-memory lists."""
    from memory.posting_lists import CONTEXT_WEIGHT
    from memory.sqlite_index import fts_bm25_ids

    return fts_bm25_ids(conn, chat_id, query, 70, CONTEXT_WEIGHT)


def _after_changes(
    memories: Any, chat_id: int, mode: str, rng: random.Random, gap: float
) -> dict[str, float]:
    """Ranking latency of queries that each follow a new memory (the store itself untimed)."""
    timings = Stopwatch()
    for _ in range(CHANGED_QUERIES):
        time.sleep(gap)
        memories.add(chat_id, synthetic_memory(rng), "EVENT", source="bench")
        query = synthetic_query(rng)
        with timings.lap():
            _rank_once(memories, chat_id, mode, query)
    return timings.figures()


def _after_burst(
    memories: Any, chat_id: int, mode: str, rng: random.Random, gap: float, burst: int
) -> dict[str, float]:
    """ "Just after a new memory" once `burst` memories came since the last query (stored as
    an import would, then one untimed query takes them in): a chat that keeps getting new
    memories ranks with large recent segments, which a figure taken right after the lists
    were built or merged never shows."""
    from memory.store import NewMemory

    texts = [synthetic_memory(rng) for _ in range(burst)]
    for start in range(0, burst, FILL_BATCH):
        batch = texts[start : start + FILL_BATCH]
        memories.add_many([NewMemory(chat_id, text, "EVENT", "bench") for text in batch])
    _rank_once(memories, chat_id, mode, synthetic_query(rng))
    figures: dict[str, float] = {**_after_changes(memories, chat_id, mode, rng, gap)}
    figures["burst"] = burst
    return figures


def _timed(queries: list[str], run: Callable[[str], object], gap: float = 0.0) -> dict[str, float]:
    timings = Stopwatch()
    for query in queries:
        time.sleep(gap)
        with timings.lap():
            run(query)
    return timings.figures()


class Stopwatch:
    """Wall and process CPU time of each lap, in ms. CPU time counts every thread of the
    process (the query's embedding worker, any BLAS threads): on a shared host it is the
    figure that the load does not inflate by waiting for a core."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    @contextlib.contextmanager
    def lap(self) -> Iterator[None]:
        wall, cpu = time.perf_counter(), time.process_time()
        yield
        self.cpu.append((time.process_time() - cpu) * 1000)
        self.wall.append((time.perf_counter() - wall) * 1000)

    def figures(self) -> dict[str, float]:
        figures = _percentiles(self.wall)
        cpu = _percentiles(self.cpu)
        figures.update({"cpu_p50_ms": cpu["p50_ms"], "cpu_p95_ms": cpu["p95_ms"]})
        return figures


def _percentiles(timings: list[float]) -> dict[str, float]:
    timings = sorted(timings)
    return {
        "p50_ms": round(timings[len(timings) // 2], 2),
        "p95_ms": round(timings[max(0, int(len(timings) * 0.95) - 1)], 2),
        "max_ms": round(timings[-1], 2),
    }


def _load_average() -> list[float]:
    """The host's load average at the end of the run: the timings are only as good as it."""
    try:
        return [round(value, 2) for value in os.getloadavg()]
    except OSError:  # not available on this platform
        return []


def rss_mb() -> float:
    from memory.bench.restart import rss_mb as measured

    return measured()


def _print_memory_bench(
    count: int,
    queries: int,
    ingest_s: float,
    precision: str,
    gap: float,
    results: dict[str, dict[str, float]],
    as_json: bool,
    where: str = "",
) -> None:
    if as_json:
        click.echo(
            json.dumps(
                {
                    "n": count,
                    "queries": queries,
                    "ingest_s": round(ingest_s, 1),
                    "query_precision": precision,
                    "gap_s": gap,
                    "storage": where,
                    "rss_mb": rss_mb(),
                    "load_average": _load_average(),
                    "latency": results,
                },
                indent=2,
            )
        )
        return
    click.echo(
        f"{count} memories ({count - count // 10} in the ranked chat) ingested in "
        f"{ingest_s:.1f}s; {queries} distinct queries, k=10, query embedding ({precision})"
        f" included; {gap:g} s idle before each; on {where}; RSS {rss_mb()} MB;"
        f" load average (1, 5, 15 min) at the end {_load_average()}"
    )
    for mode, figures in results.items():
        extra = "".join(
            f"  {key} {value}" for key, value in figures.items() if not key.endswith("_ms")
        )
        timing = (
            f"p50 {figures['p50_ms']:.2f} ms  p95 {figures['p95_ms']:.2f} ms"
            f"  max {figures['max_ms']:.2f} ms"
            if "p50_ms" in figures
            else ""
        )
        if "cpu_p50_ms" in figures:
            timing += f"  (CPU p50 {figures['cpu_p50_ms']:.2f}  p95 {figures['cpu_p95_ms']:.2f})"
        click.echo(f"  {mode:<40} {timing}{extra}")


@click.command("recall")
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--limit", type=int, default=None, help="Only the first N conversations.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def bench_recall(path: Path, limit: int | None, as_json: bool) -> None:
    """Share of LoCoMo questions whose evidence reaches the model request, end to end."""
    import asyncio

    from core.bench.support import echo_result
    from memory.bench.recall import recall_lines, run_recall_bench

    result = asyncio.run(run_recall_bench(path, limit))
    echo_result(result, as_json, lambda: recall_lines(result))
