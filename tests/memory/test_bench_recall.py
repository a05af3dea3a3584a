"""`mnemo bench recall` on a tiny synthetic LoCoMo-shaped file: the evidence said before
many compactions still reaches the request, through the recalled section."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from bots.cli import cli

FILLER = "We talked about the weather and the traffic again, nothing new happened. " * 10


def synthetic(path: Path) -> Path:
    early = [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "My new puppy is called Biscuit."},
        {"speaker": "Bob", "dia_id": "D1:2", "text": "I started pottery classes in Lyon."},
    ]
    later = [
        {"speaker": "Ann" if n % 2 else "Bob", "dia_id": f"D2:{n + 1}", "text": f"{n}. {FILLER}"}
        for n in range(60)
    ]
    sample = {
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bob",
            "session_1": early,
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_2": later,
            "session_2_date_time": "10:00 am on 20 June, 2023",
        },
        "qa": [
            {"question": "What is Ann's puppy called?", "answer": "Biscuit",
             "evidence": ["D1:1"], "category": 4},
            {"question": "Where does Bob take pottery classes?", "answer": "Lyon",
             "evidence": ["D1:2"], "category": 4},
            {"question": "What is missing?", "answer": "x", "evidence": ["D9:9"], "category": 4},
        ],
    }  # fmt: skip
    path.write_text(json.dumps([sample]), encoding="utf-8")
    return path


def test_bench_recall_finds_compacted_evidence_in_the_request(tmp_path: Path) -> None:
    done = CliRunner().invoke(
        cli, ["bench", "recall", str(synthetic(tmp_path / "t.json")), "--json"]
    )
    assert done.exit_code == 0, done.output
    result = json.loads(done.output)
    assert result["questions"] == 2 and result["skipped_no_evidence"] == 1
    assert result["compactions"] >= 1
    assert result["evidence_in_request"] == 1.0
    found = result["evidence_found_in"]
    assert "missing" not in found and found["recalled"] >= 1  # (a kept block is history)
    assert 0 < result["tokens"]["memory_and_recall_max"] <= 2000
