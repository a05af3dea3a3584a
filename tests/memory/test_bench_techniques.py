"""`mnemo bench locomo` techniques: dated text, the refiner's steps, a tiny run end to end."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from memory.bench.locomo import run_locomo, turn_items
from memory.bench.techniques import DEFAULT, PRODUCT_STEPS, Candidates, Refiner, ranked_text
from memory.bench.trial_steps import sentence_rescore, sentences

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


class WordEmbedder:
    """A tiny deterministic embedder: one dimension per known word (a fake, not a mock)."""

    model_name = "words"
    dim = 4
    words = ("tent", "pottery", "lake", "library")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        vector = [float(word in text.lower()) for word in self.words]
        return vector if any(vector) else [0.1] * self.dim


def test_sentences_split_a_turn_and_its_photo_keeping_the_speaker() -> None:
    text = "Ann: I went camping. It was great fun! Wow. [shares a photo: a tent by a lake]"
    assert sentences(text) == [
        text,
        "Ann: I went camping.",
        "Ann: It was great fun!",
        "Ann shares a photo: a tent by a lake",
    ]
    assert sentences("Ann likes pottery.") == ["Ann likes pottery."]


def test_sentence_rescore_reorders_the_first_depth_only() -> None:
    ranking = [(1, 1.0), (2, 0.99), (3, 0.98), (4, 0.0), (5, 0.0)]
    close = {1: 0.0, 2: 0.0, 3: 1.0, 4: 0.0}
    rescored = sentence_rescore(ranking, lambda ids: {i: close[i] for i in ids}, depth=4)
    assert [item for item, _ in rescored] == [3, 1, 2, 4, 5]
    assert rescored[-1] == (5, 0.0)
    assert sentence_rescore(ranking, lambda ids: {}) == ranking


def test_the_sentences_step_finds_the_sentence_a_long_turn_hides() -> None:
    known = Candidates()
    known.add(1, "Ana: The library was closed, so the library trip is off.", None, None)
    known.add(2, "Ben: We drove to the lake and talked for hours. We slept in a tent.", None, None)
    known.embed_sentences(WordEmbedder())
    assert len(known.sentence_vectors[2]) == 3  # the whole turn and its two sentences
    # the whole turn is half about the lake (cosine 0.71); its second sentence is the tent
    assert known.best_sentence([1.0, 0.0, 0.0, 0.0], [1, 2]) == {1: 0.0, 2: 1.0}
    known.add(3, "Ana: Nothing much to say here.", None, None)
    known.embed_sentences(WordEmbedder())
    refiner = Refiner(frozenset({"sentences"}), known, WordEmbedder())
    refined = refiner.refine("a tent?", [(1, 1.0), (2, 0.99), (3, 0.0)])
    assert [item for item, _ in refined] == [2, 1, 3]
