"""Budgets for the dynamic context: per-section caps, a total cap, per-section metadata.

Unprotected sections are cut to the per-section cap first; if the total is still over
budget the lowest-priority sections are cut further (70% head / 20% tail / marker) or
dropped. Protected sections are never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from core.api import ContextSection
from core.config import Config
from core.text import clip_middle

TOTAL_MIN, TOTAL_MAX = 1_000, 150_000
SECTION_MIN, SECTION_MAX = 1_000, 20_000
MIN_USEFUL_CHARS = 300  # a section cut below this is dropped instead


@dataclass(frozen=True)
class SectionBudget:
    total_chars: int
    section_chars: int


@dataclass(frozen=True)
class SectionMeta:
    """What happened to one section in one build (shown by /context)."""

    key: str
    source: str
    priority: int
    protected: bool
    original_chars: int
    final_chars: int
    included: bool
    truncated: bool
    scope: str = ""
    reason: str = ""  # why it was included (ranking, state, request focus)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class BudgetedSections:
    sections: list[ContextSection]  # the included ones, in their original order
    meta: list[SectionMeta]

    @property
    def total_chars(self) -> int:
        return sum(len(section.text) for section in self.sections)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


def section_budget(config: Config, chars_per_token: float, window: int) -> SectionBudget:
    """Configured caps, else a quarter of the effective `window` (1k-150k) and 1k-20k each."""
    total = config.context.dynamic_total_max_chars
    if total is None:
        window_chars = int(window * chars_per_token)
        total = _clamp(window_chars // 4, TOTAL_MIN, TOTAL_MAX)
    section = config.context.dynamic_section_max_chars
    if section is None:
        section = _clamp(total, SECTION_MIN, SECTION_MAX)
    return SectionBudget(total, section)


def apply_budget(sections: Sequence[ContextSection], budget: SectionBudget) -> BudgetedSections:
    """Cap every unprotected section, then cut the lowest priority ones until the total fits."""
    texts = [section.text.strip() for section in sections]
    for index, section in enumerate(sections):
        if not section.protected:
            texts[index] = clip_middle(texts[index], budget.section_chars)
    excess = sum(len(text) for text in texts) - budget.total_chars
    # Lowest priority first; among equals the later section (the less central) goes first.
    order = sorted(range(len(sections)), key=lambda i: (sections[i].priority, -i))
    for index in order:
        if excess <= 0:
            break
        if sections[index].protected or not texts[index]:
            continue
        target = len(texts[index]) - excess
        clipped = clip_middle(texts[index], target) if target >= MIN_USEFUL_CHARS else ""
        excess -= len(texts[index]) - len(clipped)
        texts[index] = clipped
    return _result(sections, texts)


def _result(sections: Sequence[ContextSection], texts: list[str]) -> BudgetedSections:
    kept: list[ContextSection] = []
    meta: list[SectionMeta] = []
    for section, text in zip(sections, texts, strict=True):
        original = section.text.strip()
        included = bool(text)
        if included:
            kept.append(replace(section, text=text))
        meta.append(
            SectionMeta(
                key=section.key,
                source=section.source,
                priority=section.priority,
                protected=section.protected,
                original_chars=len(original),
                final_chars=len(text),
                included=included,
                truncated=text != original,
                scope=section.scope,
                reason=section.reason,
            )
        )
    return BudgetedSections(kept, meta)
