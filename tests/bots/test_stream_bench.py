"""`mnemo bench stream` in small: every channel shows text, and every final text is the
stored reply (cut streams included)."""

from __future__ import annotations

from bots.bench.stream import bench_runs, summary


async def test_a_tiny_stream_bench_keeps_final_and_stored_text_identical() -> None:
    results = await bench_runs(runs=2, words=12, rate=100, cut_every=2)
    result = summary(results, 100, 12)
    assert set(result["channels"]) == {"telegram-draft", "telegram-edit", "terminal"}
    for row in result["channels"].values():
        assert row["final_equals_stored"] == 1.0
        assert row["first_visible_s_max"] < 1.0
    assert sum(row["cut_runs"] for row in result["channels"].values()) == 3
