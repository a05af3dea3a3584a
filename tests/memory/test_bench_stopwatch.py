"""`mnemo bench memory`'s timings: wall and process CPU per lap, both printed, with the load."""

from __future__ import annotations

import json
import time

import pytest

from memory.bench.cli import Stopwatch, _print_memory_bench


def test_a_lap_that_waits_costs_wall_time_and_no_cpu() -> None:
    watch = Stopwatch()
    for _ in range(3):
        with watch.lap():
            time.sleep(0.02)  # waiting, as a query waits for a core on a busy host
    with watch.lap():
        deadline = time.process_time() + 0.02
        while time.process_time() < deadline:  # working
            pass
    figures = watch.figures()
    assert figures["p50_ms"] >= 19 and figures["cpu_p50_ms"] < 10
    assert figures["max_ms"] >= 19 and figures["cpu_p95_ms"] < 10  # p95 of 4 laps: the 3rd
    assert max(watch.cpu) >= 19


def test_both_figures_and_the_load_are_printed(capsys: pytest.CaptureFixture[str]) -> None:
    results = {"hybrid": {"p50_ms": 4.2, "p95_ms": 8.4, "max_ms": 9.0,
                          "cpu_p50_ms": 4.0, "cpu_p95_ms": 5.0}}  # fmt: skip
    _print_memory_bench(1000, 10, 1.0, "int8", 0.0, results, False, "test.db")
    text = capsys.readouterr().out
    assert "p50 4.20 ms  p95 8.40 ms" in text and "(CPU p50 4.00  p95 5.00)" in text
    assert "load average" in text
    _print_memory_bench(1000, 10, 1.0, "int8", 0.0, results, True, "test.db")
    printed = json.loads(capsys.readouterr().out)
    assert printed["latency"]["hybrid"]["cpu_p95_ms"] == 5.0
    assert len(printed["load_average"]) == 3
