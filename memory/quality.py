"""The quality gate: every write to memory passes it (`remember:`, the memory tools,
`mnemo memory add`, the reflector's facts and strategies).

A fact is dropped when it is too short or long, hedged, small talk, carries a secret
(`memory.secrets`: keys, tokens, passwords, card numbers, private keys) or tries to
instruct the assistant (role markers or prompt tags anywhere in it). Both are judged on the
text with its hidden characters seen through (`memory.hidden_text`); what is kept is the
visible text. Reasons never quote the fact, so a rejected secret does not reach a log or
the runs table. AGENTS.md notes pass `refused_content` (no instruction, no secret).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from unicodedata import east_asian_width

from memory.hidden_text import judged_text, visible_text
from memory.secrets import has_card_number, has_secret, luhn_valid, secret_kind

__all__ = [
    "Verdict",
    "check_fact",
    "has_card_number",
    "has_secret",
    "is_instruction",
    "is_small_talk",
    "luhn_valid",
    "normalise",
    "refused_content",
    "secret_kind",
]

MIN_CHARS = 8
MAX_CHARS = 240
LIMIT_NOTE = f"one memory holds at most {MAX_CHARS}"
INSTRUCTION = "instruction to the assistant"
SECRET = "contains a secret"

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_SPACE = re.compile(r"\s+")
_LEAD = re.compile(r"^(?:[-*•]\s+|\d+[.)]\s+)")

_HEDGES = re.compile(
    r"\b(maybe|perhaps|possibly|probably|presumably|might|i think|i guess|i believe|"
    r"i suppose|not sure|unsure|it seems|seems to|seemingly|uncertain|not certain)\b",
    re.IGNORECASE,
)

_CHATTER_WORDS = frozenset(
    {
        "hi",
        "hello",
        "hey",
        "there",
        "thanks",
        "thank",
        "you",
        "ok",
        "okay",
        "lol",
        "haha",
        "cool",
        "nice",
        "great",
        "good",
        "morning",
        "afternoon",
        "evening",
        "night",
        "bye",
        "goodbye",
        "see",
        "later",
        "sure",
        "yes",
        "yeah",
        "no",
        "nope",
        "welcome",
        "how",
        "are",
        "is",
        "it",
        "going",
        "doing",
        "fine",
        "well",
        "all",
        "right",
        "alright",
        "cheers",
        "np",
        "the",
        "user",
        "assistant",
    }
)
_WORD = re.compile(r"[^\W\d_]+")

_SMALL_TALK = re.compile(
    r"\b(greet(ed|s|ing)?|said (hi|hello|hey|goodbye|bye|thanks)|says? (hi|hello)|"
    r"how are you|how's it going|small talk|chit-?chat|thanked|nice to meet|"
    r"you're welcome|exchanged pleasantries|asked how the assistant)\b",
    re.IGNORECASE,
)

# Anything that reads as a turn of a transcript or a fence of the prompt, wherever it is:
# role markers after a boundary ("Bob; assistant: …", "</memories> SYSTEM: …"), tags of
# the context blocks with any spacing or case, chat-template tokens.
_ROLE = r"(?:system|assistant|developer|user|human)"
_INJECTION = re.compile(
    r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(instructions?|prompts?|rules|"
    r"guidelines|directions|messages)\b"
    r"|\byou (must|should|shall|will|need to|have to|are required to|are now)\b"
    r"|\b(always|never) (respond|reply|answer|say|tell|call|use|obey|follow|include|"
    r"mention|refuse|reveal|output|print|write|address)\b"
    r"|\b(from now on|system prompt|new instructions|developer mode|jailbreak|"
    r"do anything now|act as|pretend (to be|you are)|reveal (your|the) (prompt|system|rules))\b"
    r"|<\||\|>|\[/?INST\]|<<\s*/?\s*SYS\s*>>|^\s*#{2,}\s*(instruction|system|response)\b"
    r"|<\s*/?\s*(system|assistant|user|memories|context|instructions?|strategies|tool\w*|"
    r"file_memory\w*)\b"
    rf"|(?:^|[\n;.!?>)\]}}|\"'`*#:,])\s*{_ROLE}\s*:"
    r"|^(please\s+)?(ignore|disregard|forget|always|never|respond|reply|answer|obey|"
    r"execute|run|do not|don't)\b",
    re.IGNORECASE | re.MULTILINE,
)
_SHOUTED_ROLE = re.compile(r"\b(?:SYSTEM|ASSISTANT|DEVELOPER)\s*:")


@dataclass(frozen=True)
class Verdict:
    """The gate's decision: the normalised fact if accepted, else the reason."""

    content: str
    accepted: bool
    reason: str = ""


def normalise(text: str) -> str:
    """One line, no control characters, no list bullet or wrapping quotes."""
    text = _SPACE.sub(" ", _CONTROL.sub(" ", text)).strip()
    text = _LEAD.sub("", text)
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return text


def is_instruction(text: str) -> bool:
    """Whether `text` tries to instruct the assistant rather than state a fact."""
    return bool(_INJECTION.search(text) or _SHOUTED_ROLE.search(text))


def weighted_length(text: str) -> int:
    """Length with wide (CJK) characters counted twice: "我喜欢喝绿茶" says as much as
    "I like green tea", in 6 characters."""
    return sum(2 if east_asian_width(char) in "WF" else 1 for char in text)


def is_small_talk(text: str) -> bool:
    """Greetings, thanks and pleasantries, or a fact that only reports them."""
    words = _WORD.findall(text.lower())
    if words and all(word in _CHATTER_WORDS for word in words):
        return True
    return bool(_SMALL_TALK.search(text))


def refused_content(text: str) -> str | None:
    """Why `text` may not be written to memory at all (an instruction or a secret), judged
    as `judged_text` reads it: hidden tag text, look-alike letters and direction overrides
    are seen through. None when it may."""
    judged = judged_text(text)
    if is_instruction(judged) or is_instruction(normalise(judged)):
        return INSTRUCTION
    kind = secret_kind(judged) or secret_kind(normalise(judged))
    if kind is not None:
        return f"{SECRET}: it looks like {kind}"
    return None


def check_fact(text: str) -> Verdict:
    """Run the gate on one fact. The fact kept is its visible text (`visible_text`: no
    hidden characters); instructions and secrets are looked for in the judged text, before
    it is made one line, so a role marker after a line break counts."""
    content = normalise(visible_text(text))
    if weighted_length(content) < MIN_CHARS:
        return Verdict(content, False, f"too short ({len(content)} chars)")
    if len(content) > MAX_CHARS:
        return Verdict("", False, f"too long: {len(content):,} characters; {LIMIT_NOTE}")
    refused = refused_content(text)
    if refused is not None:
        return Verdict("", False, refused)
    if _HEDGES.search(content):
        return Verdict(content, False, "hedged")
    if is_small_talk(content):
        return Verdict(content, False, "small talk")
    return Verdict(content, True)
