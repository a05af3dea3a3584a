"""Section budgets: per-section caps, total cap, priorities, protection, metadata."""

from __future__ import annotations

from pathlib import Path

from core.api import ContextSection
from core.config import Config
from core.context.budget import SectionBudget, apply_budget, section_budget
from tests.conftest import make_config


def _section(key: str, chars: int, priority: int = 50, protected: bool = False) -> ContextSection:
    return ContextSection(key, "test", "a" * chars, priority, protected)


def test_default_budget_is_a_quarter_of_the_window_clamped(tmp_path: Path) -> None:
    config: Config = make_config(tmp_path, "http://127.0.0.1:9/v1")
    budget = section_budget(config, 4.0, 32_768 - 2_048)
    assert budget.total_chars == (32_768 - 2_048) * 4 // 4
    assert budget.section_chars == 20_000
    assert section_budget(config, 4.0, 196) == SectionBudget(1_000, 1_000)
    assert section_budget(config, 4.0, 1_999_000).total_chars == 150_000
    config.context.dynamic_total_max_chars = 5_000
    config.context.dynamic_section_max_chars = 2_000
    assert section_budget(config, 4.0, 30_000) == SectionBudget(5_000, 2_000)


def test_within_budget_nothing_changes() -> None:
    result = apply_budget([_section("a", 100), _section("b", 200)], SectionBudget(1_000, 1_000))
    assert [m.final_chars for m in result.meta] == [100, 200]
    assert not any(m.truncated for m in result.meta)
    assert all(m.included for m in result.meta)


def test_per_section_cap_uses_head_tail_marker() -> None:
    section = ContextSection("notes", "file", "H" * 3_000 + "T" * 2_000)
    result = apply_budget([section], SectionBudget(100_000, 1_000))
    text = result.sections[0].text
    assert text.startswith("H" * 700)
    assert text.endswith("T" * 200)
    assert "[truncated: 4100 chars]" in text
    meta = result.meta[0]
    assert (meta.original_chars, meta.final_chars, meta.truncated) == (5_000, len(text), True)
    assert meta.final_chars <= 1_000


def test_lowest_priority_is_cut_first_and_protected_never() -> None:
    sections = [
        _section("rules", 3_000, priority=10, protected=True),
        _section("memories", 2_000, priority=80),
        _section("strategies", 2_000, priority=20),
    ]
    result = apply_budget(sections, SectionBudget(5_500, 5_000))
    by_key = {m.key: m for m in result.meta}
    assert by_key["rules"].final_chars == 3_000 and not by_key["rules"].truncated
    assert by_key["memories"].final_chars == 2_000
    assert by_key["strategies"].truncated and by_key["strategies"].final_chars <= 500
    assert result.total_chars <= 5_500


def test_sections_too_small_to_be_useful_are_dropped_in_priority_order() -> None:
    sections = [
        _section("high", 1_000, priority=90),
        _section("low", 1_000, priority=5),
        _section("mid", 1_000, priority=50),
    ]
    result = apply_budget(sections, SectionBudget(1_100, 1_000))
    by_key = {m.key: m for m in result.meta}
    assert not by_key["low"].included and by_key["low"].final_chars == 0
    assert not by_key["mid"].included
    assert by_key["high"].included and by_key["high"].final_chars == 1_000
    assert [s.key for s in result.sections] == ["high"]
    assert result.meta[1].to_dict() == {
        "key": "low",
        "source": "test",
        "priority": 5,
        "protected": False,
        "original_chars": 1_000,
        "final_chars": 0,
        "included": False,
        "truncated": True,
        "scope": "",
        "reason": "",
    }


def test_protected_sections_over_budget_stay_whole() -> None:
    result = apply_budget([_section("p", 30_000, protected=True)], SectionBudget(1_000, 1_000))
    assert result.meta[0].final_chars == 30_000 and not result.meta[0].truncated
