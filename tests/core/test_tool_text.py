"""Tool calls written as text are cut out; a repeated call is recognised whatever its layout."""

from __future__ import annotations

import pytest

from core.model.client import ToolCall
from core.tools.text_calls import strip_tool_text
from core.turn.loop_guard import RepeatGuard, call_key


@pytest.mark.parametrize(
    "text",
    [
        'functions.structured_memory_delete: {"id": 3}',
        'functions.structured_memory_delete:\n{ "id": 3 }\nfunctions.get_current_time:\n{}',
        '<tool_call>\n{"name": "get_current_time", "arguments": {}}\n</tool_call>',
        '<tool_call>{"name": "get_current_time", "arguments": {"tz": "UTC"',  # cut
        '{"name": "structured_memory_add", "arguments": {"content": "likes tea"}}',
        '```json\n{"name": "get_current_time", "parameters": {}}\n```',
        '[TOOL_CALLS] [{"name": "get_current_time", "arguments": {}}]',
        '{"tool_calls": [{"type": "function", "function": {"name": "x", "arguments": "{}"}}]}',
        'functions.get_current_time: {"broken": ',
    ],
)
def test_a_reply_that_is_only_a_written_call_leaves_nothing(text: str) -> None:
    rest, found = strip_tool_text(text)
    assert rest == "" and found >= 1


def test_text_around_a_written_call_is_kept() -> None:
    text = (
        "Let me check.\n\n"
        '<tool_call>{"name": "get_current_time", "arguments": {}}</tool_call>\n\n\n'
        'functions.read_memory: {"scope": "chat"}\nDone, see above.'
    )
    assert strip_tool_text(text) == ("Let me check.\n\nDone, see above.", 2)


@pytest.mark.parametrize(
    "text",
    [
        "Plain prose with no call at all.",
        'Your settings: {"name": "Ana", "city": "Porto"} are saved.',
        "Use functions.py: it holds the helpers.",
        'The list [1, 2, {"name": "x"}] has three items.',
        '{"config": {"name": "x", "arguments": []}}',  # a call nested in other JSON stays
        "Braces { without JSON } and [brackets].",
    ],
)
def test_ordinary_text_and_json_are_untouched(text: str) -> None:
    assert strip_tool_text(text) == (text, 0)


def test_call_key_ignores_key_order_and_spacing() -> None:
    first = ToolCall("c1", "search", '{"query": "tea", "k": 5}')
    second = ToolCall("c2", "search", '{ "k":5,"query":"tea" }')
    other = ToolCall("c3", "search", '{"query": "coffee", "k": 5}')
    assert call_key(first) == call_key(second) != call_key(other)
    assert call_key(ToolCall("c4", "search", "{not json")) == ("search", "{not json")


def test_repeat_guard_lets_each_call_through_once() -> None:
    guard = RepeatGuard()
    tea = ToolCall("c1", "search", '{"query": "tea"}')
    coffee = ToolCall("c2", "search", '{"query": "coffee"}')
    assert guard.fresh([tea]) == [tea]
    again = ToolCall("c3", "search", '{"query":"tea"}')
    assert guard.fresh([coffee, again]) == [coffee]
    assert guard.fresh([tea, tea]) == []
