"""Reflector extraction: think-stripping, transcript rendering, prompt, reply parsing."""

from __future__ import annotations

import json

import pytest

from core.storage.store import StoredMessage
from reflector.extraction import (
    MAX_CANDIDATES,
    MESSAGE_MAX_CHARS,
    TRANSCRIPT_MAX_CHARS,
    Candidate,
    ExistingMemory,
    ReplyInvalid,
    build_messages,
    parse_reply,
    render_transcript,
    repair_messages,
    strip_think,
)

CATEGORIES = ("PROFILE", "KNOWLEDGE", "EVENT")


def message(id_: int, content: str, role: str = "user", sender: str = "alice") -> StoredMessage:
    return StoredMessage(id_, 1, role, sender, content, None, None, "2026-01-01T00:00:00Z", 1)


def test_strip_think_removes_closed_and_unterminated_blocks() -> None:
    assert strip_think("<think>plan</think>Alice likes tea") == "Alice likes tea"
    assert strip_think("A <THINKING>x\ny</THINKING>B") == "A B"
    assert strip_think("Answer first <think>never closed") == "Answer first"
    assert strip_think("no blocks") == "no blocks"


def test_transcript_uses_sender_lines_and_skips_tool_messages() -> None:
    messages = [
        message(5, "I moved to Lisbon <think>secret reasoning</think>"),
        message(6, "", role="assistant", sender=""),
        message(7, '{"result": 1}', role="tool", sender=""),
        message(8, "<think>only thoughts</think>Nice!", role="assistant", sender=""),
    ]
    transcript = render_transcript(messages)
    assert transcript is not None
    assert transcript.text == "[alice]: I moved to Lisbon\n[assistant]: Nice!"
    assert (transcript.first_id, transcript.last_id, transcript.count) == (5, 8, 4)
    assert "secret reasoning" not in transcript.text


def test_transcript_respects_the_size_budget_but_always_progresses() -> None:
    huge = "x" * (MESSAGE_MAX_CHARS * 10)
    one = render_transcript([message(1, huge)])
    assert one is not None and one.last_id == 1
    assert len(one.text) < MESSAGE_MAX_CHARS + 100 and "[truncated:" in one.text
    many = [message(i, "y" * 1000) for i in range(1, 200)]
    cut = render_transcript(many)
    assert cut is not None
    assert len(cut.text) <= TRANSCRIPT_MAX_CHARS + 1100
    assert 1 < cut.last_id < 199 and cut.count == cut.last_id
    assert render_transcript([]) is None


def test_prompt_lists_existing_memories_with_ids_and_tags_the_data() -> None:
    transcript = render_transcript([message(1, "I am vegetarian now")])
    assert transcript is not None
    request = build_messages(transcript, [ExistingMemory(3, "PROFILE", "Alice eats meat.")])
    assert request[0]["role"] == "system" and "JSON" in request[0]["content"]
    user = request[1]["content"]
    assert "[id=3] [PROFILE] Alice eats meat." in user
    assert "<new_messages>\n[alice]: I am vegetarian now\n</new_messages>" in user
    repair = repair_messages(request, "oops", "no JSON object in the reply")
    assert repair[-2] == {"role": "assistant", "content": "oops"}
    assert "no JSON object" in repair[-1]["content"]


def test_parse_plain_fenced_and_prose_wrapped_json() -> None:
    body = {"memories": [{"content": "Alice lives in Lisbon.", "category": "profile"}]}
    expected = [Candidate("Alice lives in Lisbon.", "PROFILE", None)]
    assert parse_reply(json.dumps(body), CATEGORIES) == (expected, 0)
    fenced = f"Here you go:\n```json\n{json.dumps(body)}\n```\nDone."
    assert parse_reply(fenced, CATEGORIES) == (expected, 0)
    prose = f"<think>hmm</think>Sure! {json.dumps(body)} Hope that helps."
    assert parse_reply(prose, CATEGORIES) == (expected, 0)
    trailing = '{"memories": [{"content": "Alice lives in Lisbon.", "category": "PROFILE",},]}'
    assert parse_reply(trailing, CATEGORIES) == (expected, 0)
    bare_list = json.dumps(body["memories"])
    assert parse_reply(bare_list, CATEGORIES) == (expected, 0)


def test_items_are_validated_one_by_one() -> None:
    reply = json.dumps(
        {
            "memories": [
                {"content": "Bob is a nurse.", "category": "PROFILE", "supersedes_id": "12"},
                {"content": "Bob likes cats.", "category": "OPINION"},  # unknown category
                {"content": 42, "category": "PROFILE"},  # not text
                {"text": "wrong key", "category": "PROFILE"},
                {"content": "Bob ran a marathon.", "category": "EVENT", "supersedes_id": "x"},
                {"content": "Bob knows Go.", "category": "KNOWLEDGE", "supersedes_id": -4},
                {"content": "Bob sings.", "category": "EVENT", "supersedes_id": "²"},  # isdigit()
                "just a string",
            ]
        }
    )
    candidates, dropped = parse_reply(reply, CATEGORIES)
    assert candidates == [
        Candidate("Bob is a nurse.", "PROFILE", 12),
        Candidate("Bob ran a marathon.", "EVENT", None),
        Candidate("Bob knows Go.", "KNOWLEDGE", None),
        Candidate("Bob sings.", "EVENT", None),
    ]
    assert dropped == 4


def test_the_number_of_candidates_is_capped() -> None:
    items = [{"content": f"Fact number {i} here.", "category": "KNOWLEDGE"} for i in range(80)]
    candidates, dropped = parse_reply(json.dumps({"memories": items}), CATEGORIES)
    assert len(candidates) == MAX_CANDIDATES and dropped == 80 - MAX_CANDIDATES


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I could not find any facts.",
        '{"memories": [{"content": "Alice lives in',  # partial (cut off)
        '{"memories": "none"}',
        '{"facts": []}',
        "```json\n{broken json}\n```",
        "null",
    ],
)
def test_unusable_replies_raise(reply: str) -> None:
    with pytest.raises(ReplyInvalid):
        parse_reply(reply, CATEGORIES)


def test_empty_list_is_a_valid_answer() -> None:
    assert parse_reply('{"memories": []}', CATEGORIES) == ([], 0)
