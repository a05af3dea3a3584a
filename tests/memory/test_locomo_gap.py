"""`mnemo bench locomo --gap`: evidence ranks, the oracle re-ranker, reach, a tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory.bench.cli import bench_locomo
from memory.bench.locomo_gap import evidence_ranks, oracle_cov, run_gap
from tests.memory.test_bench_techniques import SAMPLE


def test_evidence_ranks_are_the_best_positions() -> None:
    ranking = [frozenset({"D1:1"}), frozenset({"D1:2", "D1:1"}), frozenset({"D2:1"})]
    ranks = evidence_ranks(ranking, frozenset({"D1:1", "D2:1", "D9:9"}))
    assert ranks == {"D1:1": 1, "D2:1": 3, "D9:9": None}


def test_oracle_takes_the_evidence_of_the_pool_first() -> None:
    evidence = frozenset({"D1:1", "D1:2", "D1:3"})
    pool = [frozenset({"D5:5"})] * 20 + [frozenset({"D1:1", "D1:2"}), frozenset({"D1:3"})]
    assert oracle_cov(pool, evidence, k=1) == pytest.approx(2 / 3)
    assert oracle_cov(pool, evidence, k=2) == 1.0
    assert oracle_cov(pool[:20], evidence) == 0.0


def test_a_tiny_gap_run_without_vectors(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    sample = json.loads(json.dumps(SAMPLE))
    sample["conversation"]["session_1"][1]["blip_caption"] = "a photo of a lake"
    sample["qa"].append(
        {
            "question": "What is the cat called?",
            "answer": "Miso",
            "evidence": ["D1:3"],
            "category": 4,
        }
    )
    sample["qa"].append(
        {"question": "Which pet?", "answer": "cat", "evidence": ["D1:3", "D1:2"], "category": 1}
    )
    path.write_text(json.dumps([sample]), encoding="utf-8")
    summary = run_gap(path, tmp_path, None, observations=False).summary()
    assert summary["questions"] == 3
    every = summary["by_category"]["all"]
    assert every["cov@10"] == every["oracle_top50_cov@10"] == pytest.approx(2 / 3, abs=1e-4)
    # "Which pet?" shares no word with either of its turns and there are no vectors: out of
    # reach of both rankers, so not ranked at all
    multi = summary["by_category"]["multi-hop"]
    assert (multi["cov@100"], multi["missed_at_10"]) == (0.0, 1)
    assert multi["missing_by_rank"]["beyond_100"] == 2
    reach = multi["missing_reach"]
    assert reach["no_shared_stem"] == reach["no_stem_and_vector_rank_over_100"] == 2
    assert multi["missed_with_a_turn_out_of_reach"] == 1
    assert summary["by_evidence_count"]["2"] == {
        **summary["by_evidence_count"]["2"],
        "questions": 1,
        "one_in_top10": 0.0,
    }
    assert summary["images"]["evidence_turns_with_photo"] == 2


def test_the_gap_option_prints_the_report_as_json(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps([SAMPLE]), encoding="utf-8")
    result = CliRunner().invoke(bench_locomo, [str(path), "--retriever", "bm25", "--gap"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["memories"] == "turns" and "CC BY-NC 4.0" in report["credit"]
    assert report["by_category"]["temporal"]["cov@10"] == 1.0
    assert report["by_conversation"] == {
        "tiny": {"cov@10": 1.0, "cov@50": 1.0, "oracle_top50_cov@10": 1.0}
    }
