"""Second-stage ranking steps on hand-made rankings: expansion adds, re-scoring reorders."""

from __future__ import annotations

from collections.abc import Sequence

from memory.bench.trial_steps import expansion_terms, session_diverse, term_boost
from memory.expansion import (
    apply_factors,
    entity_expand,
    feedback_rescore,
    focus_boost,
    names_in,
    neighbour_expand,
)

RANKING = [(1, 1.0), (2, 0.8), (3, 0.5), (4, 0.2)]


def test_neighbours_join_at_a_share_of_the_seed_score() -> None:
    neighbours = {1: [10, 2], 2: [20]}
    expanded = neighbour_expand(RANKING, lambda i: neighbours.get(i, []), seeds=2, share=0.6)
    assert expanded[:3] == [(1, 1.0), (2, 0.8), (10, 0.6)]
    assert (20, 0.48) in [(i, round(s, 2)) for i, s in expanded]
    assert dict(expanded)[2] == 0.8  # a neighbour already ranked higher keeps its score


def test_names_skip_question_and_stop_words() -> None:
    assert names_in("When did Caroline visit Paris with The Kids?") == {"caroline", "paris", "kids"}


def test_entities_of_top_hits_pull_in_rare_mentions_only() -> None:
    texts = {1: "Ana: we hiked near Tahoe with Ben", 2: "Ana: fine", 3: "x"}
    mentions = {"tahoe": [7, 8], "ben": list(range(100, 120)), "ana": [1, 2]}
    expanded = entity_expand(
        RANKING, texts, lambda name: mentions.get(name, []), "Where did Ana hike?", seeds=1
    )
    scores = dict(expanded)
    assert scores[7] == scores[8] == 0.5
    assert 100 not in scores  # too common a name
    assert len(expanded) == len(RANKING) + 2


def test_feedback_only_rescores() -> None:
    def similarity(top: Sequence[int], ids: Sequence[int]) -> dict[int, float]:
        assert list(top) == [1]
        return {1: 1.0, 2: 0.0, 3: 1.0, 4: 0.5}

    rescored = feedback_rescore(RANKING, similarity, top=1, weight=0.5)
    assert sorted(rescored) == sorted((i, s) for i, s in rescored)
    assert [item for item, _ in rescored] == [1, 3, 2, 4]
    assert {item for item, _ in rescored} == {1, 2, 3, 4}
    assert feedback_rescore(RANKING[:1], similarity, top=1) == RANKING[:1]


def test_focus_raises_items_naming_the_query_names() -> None:
    texts = {1: "Ben: hello", 2: "Ana: my dog", 3: "Ana: my cat", 4: "x"}
    boosted = focus_boost(RANKING, texts, "What pets does Ana have?", weight=1.0)
    assert [item for item, _ in boosted] == [2, 3, 1, 4]
    assert focus_boost(RANKING, texts, "what pets?") == RANKING


def test_apply_factors() -> None:
    assert apply_factors(RANKING, {4: 10.0})[0] == (4, 2.0)


def test_session_diverse_caps_one_day_in_the_first_places() -> None:
    days = {1: "a", 2: "a", 3: "a", 4: "b", 5: "a"}
    ranking = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6), (5, 0.5)]
    diverse = session_diverse(ranking, days.__getitem__, cap=2, top=3)
    assert [item for item, _ in diverse] == [1, 2, 4, 3, 5]
    # too few days to fill the first places: the best pushed-out items fill them, in order
    alone = session_diverse(ranking[:3], days.__getitem__, cap=1, top=3)
    assert [item for item, _ in alone] == [1, 2, 3]


def test_expansion_terms_are_words_the_chat_says_with_the_query_words() -> None:
    index = {
        "hobbies": [1, 2, 3],
        "painting": [1, 2],  # said twice with "hobbies", nowhere else
        "weather": [3, *range(10, 20)],  # frequent, seldom with "hobbies"
        "the": list(range(1, 40)),
    }
    assert expansion_terms(["hobbies"], index, total=60) == ["painting"]
    assert expansion_terms(["unknown"], index, total=60) == []


def test_term_boost_raises_and_pulls_in_items_holding_the_terms() -> None:
    boosted = term_boost(RANKING, {"painting": [4, 9]}, ["painting"], share=0.5)
    assert [(item, round(score, 3)) for item, score in boosted] == [
        (1, 1.0),
        (2, 0.8),
        (4, 0.7),
        (9, 0.5),
        (3, 0.5),
    ]
    assert term_boost(RANKING, {}, [], share=0.5) == RANKING
