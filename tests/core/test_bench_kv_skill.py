"""`mnemo bench kv --skill-at N`: the skill it installs, and the figure it reports."""

from __future__ import annotations

from bots.runtime import Runtime
from core.bench.kv import SKILL_DESCRIPTION, SKILL_NAME, TurnRow, install_skill, skill_turn


def _row(turn: int, first_cached: int, first_prompt: int) -> TurnRow:
    return TurnRow(turn, 1, first_prompt, first_cached, first_prompt - first_cached,
                   False, False, False, 1.0, first_cached, first_prompt)  # fmt: skip


def test_the_skill_turn_compares_with_the_previous_turns_first_request() -> None:
    rows = [_row(1, 0, 400), _row(2, 390, 520), _row(3, 519, 700)]
    kept = skill_turn(rows, 3)
    assert kept is not None and kept["previous_request_all_cached"]
    assert (kept["first_request_cached"], kept["previous_turn_prompt"]) == (519, 520)
    broken = skill_turn([*rows[:2], _row(3, 300, 700)], 3)
    assert broken is not None and not broken["previous_request_all_cached"]
    assert skill_turn(rows, 0) is None and skill_turn(rows, 1) is None


async def test_the_installed_skill_is_listed_for_every_chat(runtime: Runtime) -> None:
    assert install_skill(runtime) == SKILL_NAME
    skills = [e for e in runtime.extensions if e.name == "skills"]
    [listed], problems = skills[0].catalog.for_chat("bench", "kv")  # type: ignore[attr-defined]
    assert problems == [] and (listed.name, listed.description) == (SKILL_NAME, SKILL_DESCRIPTION)
