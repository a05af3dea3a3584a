"""Splitting long replies for Telegram (4,096 UTF-16 units) and Discord (2,000 characters)."""

from __future__ import annotations

import pytest
import telegramify_markdown

from bots.message_split import split_message
from bots.telegram_delivery import format_reply

PARAGRAPH = "The quick brown fox jumps over the lazy dog near the river bank. " * 4


def test_short_text_is_one_message_and_blank_text_none() -> None:
    assert split_message("hello", 2000) == ["hello"]
    assert split_message("  \n\n ", 2000) == []


def test_splits_at_paragraph_boundaries() -> None:
    text = "\n\n".join(f"{i}. {PARAGRAPH}" for i in range(30))
    parts = split_message(text, 2000)
    assert len(parts) > 1
    assert all(len(part) <= 2000 for part in parts)
    for part in parts:  # every part holds whole paragraphs
        assert part.startswith(tuple(f"{i}. " for i in range(30)))
        assert part.rstrip().endswith("river bank.")
    assert "\n\n".join(parts) == text


def test_code_block_is_closed_and_reopened_with_its_language() -> None:
    code = "\n".join(f"    total += item_{i}  # keep going" for i in range(200))
    text = f"Intro line.\n\n```python\n{code}\n```\n\nOutro line."
    parts = split_message(text, 1000)
    assert all(len(part) <= 1000 for part in parts)
    code_parts = [part for part in parts if "total +=" in part]
    assert len(code_parts) >= 3
    for part in code_parts:
        assert part.count("```") == 2, part[:60]
        assert part[part.index("```") :].startswith("```python\n")
        assert part.rstrip().endswith("```") or part.endswith("Outro line.")
    lines = [line for part in parts for line in part.splitlines() if "total +=" in line]
    assert lines == code.splitlines()  # no line lost, duplicated or cut


def test_prefers_breaking_outside_code_blocks() -> None:
    small_code = "```sh\necho one\necho two\n```"
    text = "\n\n".join([PARAGRAPH * 3, small_code, PARAGRAPH * 3, small_code, PARAGRAPH * 3])
    parts = split_message(text, 1000)
    for part in parts:
        assert part.count("```") % 2 == 0
        assert "```sh\necho one\necho two\n```" in part or "echo" not in part


def test_a_line_longer_than_the_limit_is_cut_at_spaces() -> None:
    words = " ".join(f"word{i}" for i in range(1000))
    parts = split_message(words, 500)
    assert all(len(part) <= 500 for part in parts)
    assert "".join(parts) == words
    assert all(part.endswith(" ") or part == parts[-1] for part in parts)


def test_measures_in_the_units_it_is_given() -> None:
    text = "😀" * 3000  # 3,000 code points, 6,000 UTF-16 code units
    parts = split_message(text, 4096, telegramify_markdown.utf16_len)
    assert len(parts) >= 2
    assert all(telegramify_markdown.utf16_len(part) <= 4096 for part in parts)
    assert "".join(parts) == text


def test_unclosed_fence_is_closed_when_split() -> None:
    text = "```\n" + "\n".join(f"line {i}" for i in range(600))
    parts = split_message(text, 1000)
    assert all(part.count("```") == 2 for part in parts)


def test_limit_too_small_is_refused() -> None:
    with pytest.raises(ValueError):
        split_message("x" * 100, 10)


def test_telegram_parts_carry_entities_within_the_limit() -> None:
    code = "```python\n" + "\n".join(f"x_{i} = {i}" for i in range(900)) + "\n```"
    parts = format_reply(f"**Result:**\n\n{code}")
    assert len(parts) >= 2
    assert all(telegramify_markdown.utf16_len(part.text) <= 4096 for part in parts)
    assert parts[0].entities[0].type == "bold"
    assert all(any(e.type == "pre" for e in part.entities) for part in parts)
