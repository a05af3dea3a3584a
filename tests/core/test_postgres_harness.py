"""The test PostgreSQL server: it starts, and pgvector, row locks and advisory locks behave
as the PostgreSQL store will rely on (issue 17). A real server, no mocks."""

from __future__ import annotations

import math

import psycopg
import pytest

from core.bench.fakes.postgres import PostgresServer, PostgresUnavailable, bin_dir, has_pgvector

DIMENSIONS = 384


def unit_vector(hot: int, warm: int | None = None) -> str:
    """A pgvector literal: weight on dimension `hot` (and a little on `warm`), normalised."""
    values = [0.0] * DIMENSIONS
    values[hot] = 1.0
    if warm is not None:
        values[warm] = 0.3
    norm = math.sqrt(sum(v * v for v in values))
    return "[" + ",".join(f"{v / norm:.6f}" for v in values) + "]"


def test_the_server_runs_postgresql_18_with_pgvector(postgres_server: PostgresServer) -> None:
    assert has_pgvector(bin_dir())
    assert postgres_server.timings.start_s < 10
    with psycopg.connect(postgres_server.url()) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        encoding = conn.execute("SHOW server_encoding").fetchone()
    assert version is not None and int(version[0]) >= 180000
    assert encoding == ("UTF8",)


def test_hnsw_cosine_knn_returns_the_nearest_row(fresh_postgres_url: str) -> None:
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION vector")
        conn.execute(
            f"CREATE TABLE memories (id int PRIMARY KEY, chat text, embedding vector({DIMENSIONS}))"
        )
        conn.execute("CREATE INDEX ON memories USING hnsw (embedding vector_cosine_ops)")
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO memories VALUES (%s, 'c1', %s::vector)",
                [(i, unit_vector(i)) for i in range(50)],
            )
        conn.execute("SET enable_seqscan = off")  # 50 rows: make the planner show the index
        query = unit_vector(7, warm=8)
        sql = "SELECT id FROM memories ORDER BY embedding <=> %s::vector LIMIT 2"
        plan = "\n".join(row[0] for row in conn.execute(f"EXPLAIN {sql}", (query,)))
        nearest = [row[0] for row in conn.execute(sql, (query,))]
    assert "memories_embedding_idx" in plan
    assert nearest == [7, 8]


def test_skip_locked_skips_the_row_another_connection_holds(fresh_postgres_url: str) -> None:
    with psycopg.connect(fresh_postgres_url, autocommit=True) as setup:
        setup.execute("CREATE TABLE leases (chat text PRIMARY KEY)")
        setup.execute("INSERT INTO leases VALUES ('a'), ('b')")
    claim = "SELECT chat FROM leases ORDER BY chat LIMIT 1 FOR UPDATE SKIP LOCKED"
    with (
        psycopg.connect(fresh_postgres_url) as first,
        psycopg.connect(fresh_postgres_url) as second,
    ):
        assert first.execute(claim).fetchone() == ("a",)
        assert second.execute(claim).fetchone() == ("b",)  # 'a' is held, not waited for
        assert second.execute(claim).fetchone() == ("b",)
        first.rollback()
        second.rollback()
        assert second.execute(claim).fetchone() == ("a",)


def test_an_advisory_lock_is_exclusive_across_connections(fresh_postgres_url: str) -> None:
    take = "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))"
    release = "SELECT pg_advisory_unlock(hashtextextended(%s, 0))"
    with (
        psycopg.connect(fresh_postgres_url, autocommit=True) as first,
        psycopg.connect(fresh_postgres_url, autocommit=True) as second,
    ):
        assert first.execute(take, ("chat:1",)).fetchone() == (True,)
        assert second.execute(take, ("chat:1",)).fetchone() == (False,)
        assert second.execute(take, ("chat:2",)).fetchone() == (True,)
        assert first.execute(release, ("chat:1",)).fetchone() == (True,)
        assert second.execute(take, ("chat:1",)).fetchone() == (True,)


def test_a_missing_package_names_the_fix() -> None:
    with pytest.raises(PostgresUnavailable, match=r"make install-dev"):
        bin_dir("no_such_postgres_package")
