"""Prompts as local servers' chat formats render them, for the fake model server.

`chatml_function_calling_prompt` is llama-cpp-python's `chatml-function-calling` handler's
template, in Python: every system message carries the whole tool block (each tool's name
and its parameters' JSON, not its description, then a fixed function-calling preamble), a
tool result message keeps only its header. `rendered_prompt_tokens` counts such a prompt
at SmolLM2's measured density (docs/benchmarks.md, 2026-11-27: 9 tools cost 631 tokens,
one 194, the same request's messages 110).
"""

from __future__ import annotations

import json
import math
from typing import Any

RENDERED_CHARS_PER_TOKEN = 3.3  # SmolLM2 on this template: 3.3-3.7 (9 tools: 741 real, 738 here)
FUNCTIONS_HEADER = "\n\nYou have access to the following functions:\n"
FUNCTIONS_FOOTER = (
    "\n\nYou can respond to users messages with either a single message or one or more"
    " function calls."
    "\n\nTo respond with a message begin the message with 'message:', use the following format:"
    "\n\nmessage:\n<message>"
    "\n\nTo respond with one or more function calls begin the message with"
    " 'functions.<function_name>:', use the following format:"
    "\n\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
    "\nfunctions.<function_name>:"
    '\n{ "arg1": "value1", "arg2": "value2" }'
)
_HTML_SAFE = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026", "'": "\\u0027"}


def tojson(value: Any) -> str:
    """Jinja's `tojson` filter: sorted keys, HTML-unsafe characters escaped."""
    text = json.dumps(value, sort_keys=True)
    for char, escaped in _HTML_SAFE.items():
        text = text.replace(char, escaped)
    return text


def tool_block(tools: list[dict[str, Any]]) -> str:
    listed = "".join(
        f"\nfunctions.{tool['function']['name']}:\n{tojson(tool['function'].get('parameters'))}\n"
        for tool in tools
    )
    return FUNCTIONS_HEADER + listed + FUNCTIONS_FOOTER


def _content(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    return content if isinstance(content, str) else json.dumps(content)


def _rendered(message: dict[str, Any], block: str) -> str:
    role = message.get("role")
    head = f"<|im_start|>{role}\n"
    if role == "system":
        return f"{head}{_content(message)}{block}<|im_end|>\n"
    if role == "user":
        return f"{head}{_content(message)}<|im_end|>\n"
    if role != "assistant":
        return head  # a tool result: the template renders nothing of it
    text = ""
    if _content(message):
        text += ("message:\n" if block else "") + _content(message) + "<|im_end|>\n"
    if "tool_calls" in message:
        calls = message.get("tool_calls") or []
        text += "".join(
            f"functions.{call['function']['name']}:\n{call['function']['arguments']}"
            for call in calls
        )
        text += "<|im_end|>\n"
    return head + text


def chatml_function_calling_prompt(request: dict[str, Any]) -> str:
    """The prompt llama-cpp-python's chatml-function-calling builds for `request` (tools
    only with a `tool_choice` other than "none", as the handler does)."""
    tools = request.get("tools") or []
    choice = request.get("tool_choice")
    block = tool_block(tools) if tools and choice not in (None, "none") else ""
    body = "".join(_rendered(message, block) for message in request.get("messages", []))
    return body + "<|im_start|>assistant\n"


def rendered_prompt_tokens(request: dict[str, Any]) -> int:
    return math.ceil(len(chatml_function_calling_prompt(request)) / RENDERED_CHARS_PER_TOKEN)
