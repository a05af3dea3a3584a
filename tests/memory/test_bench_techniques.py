"""`mnemo bench locomo` techniques: dated text, the refiner's steps, a tiny run end to end."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from memory.bench.locomo import run_locomo, turn_items
from memory.bench.techniques import DEFAULT, PRODUCT_STEPS, Candidates, Refiner, ranked_text

SAMPLE = {
    "sample_id": "tiny",
    "conversation": {
        "speaker_a": "Ana",
        "speaker_b": "Ben",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ana", "dia_id": "D1:1", "text": "Where did you go hiking?"},
            {"speaker": "Ben", "dia_id": "D1:2", "text": "Up near the lake yesterday."},
            {"speaker": "Ana", "dia_id": "D1:3", "text": "My cat is called Miso."},
        ],
    },
    "observation": {},
    "qa": [
        {
            "question": "When did Ben go hiking?",
            "answer": "7 May 2023",
            "evidence": ["D1:2"],
            "category": 2,
        },
        {"question": "No evidence here?", "answer": "x", "evidence": ["D9:9"], "category": 4},
    ],
}


def test_ranked_text_dates_and_resolves() -> None:
    day = date(2023, 5, 8)
    assert ranked_text("went yesterday", day, {"date-prefix"}) == "[8 May 2023] went yesterday"
    both = ranked_text("went yesterday", day, {"date-prefix", "resolve-dates"})
    assert both == "[8 May 2023] went yesterday (7 May 2023)"
    assert ranked_text("went yesterday", day, set()) == "went yesterday"


def test_items_carry_their_session_date() -> None:
    items = turn_items(SAMPLE)
    assert [item.day for item in items] == [date(2023, 5, 8)] * 3
    assert items[1].context == "Ana: Where did you go hiking?"


def test_experimental_refiner_only_runs_the_bench_steps() -> None:
    known = Candidates()
    for item, text in ((1, "Ana: Where did you go hiking?"), (2, "Ben: near the lake"), (3, "x")):
        known.add(item, text, date(2023, 5, 8), None)
    assert known.today == date(2023, 5, 8)
    ranking = [(1, 1.0), (3, 0.1)]
    assert Refiner(frozenset({"neighbours"}), known).refine("hiking?", ranking) == ranking
    focused = Refiner(frozenset({"focus"}), known).refine("Where did Ben go?", [(1, 1.0), (2, 0.9)])
    assert [item for item, _ in focused] == [2, 1]
    assert {"date-prefix", *PRODUCT_STEPS} - {"name-free-query"} == DEFAULT


def test_a_tiny_run_reports_by_category_and_conversation(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    result = run_locomo(path, tmp_path, retriever="bm25", embedder=None, techniques=DEFAULT)
    summary = result.summary()
    assert (summary["n_questions"], summary["n_skipped_no_evidence"]) == (1, 1)
    assert summary["cov@5"] == 1.0
    assert summary["by_conversation"]["cov@10"] == {"tiny": 1.0}
    assert set(summary["by_category"]) == {"temporal"}
