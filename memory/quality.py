"""The quality gate every extracted fact passes before it is stored.

A fact is dropped when it is too short or long, hedged, small talk, carries a secret
(API key, token, password, card number) or tries to instruct the assistant. Reasons
never quote the fact, so a rejected secret does not reach a log or the runs table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MIN_CHARS = 8
MAX_CHARS = 240

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

_INJECTION = re.compile(
    r"\b(ignore|disregard|forget|override|bypass)\b.{0,40}\b(instructions?|prompts?|rules|"
    r"guidelines|directions|messages)\b"
    r"|\byou (must|should|shall|will|need to|have to|are required to|are now)\b"
    r"|\b(always|never) (respond|reply|answer|say|tell|call|use|obey|follow|include|"
    r"mention|refuse|reveal|output|print|write|address)\b"
    r"|\b(from now on|system prompt|new instructions|developer mode|jailbreak|"
    r"do anything now|act as|pretend (to be|you are)|reveal (your|the) (prompt|system|rules))\b"
    r"|<\||\|>|\[/?INST\]|</?(system|assistant|user|memories|context|instructions?)\b"
    r"|^\s*(system|assistant|developer)\s*:"
    r"|^(please\s+)?(ignore|disregard|forget|always|never|respond|reply|answer|obey|"
    r"execute|run|do not|don't)\b",
    re.IGNORECASE,
)

_SECRETS = re.compile(
    r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bAKIA[0-9A-Z]{16}\b|\bxox[abprs]-[A-Za-z0-9\-]{10,}|\bAIza[0-9A-Za-z_\-]{30,}"
    r"|\b\d{8,10}:[A-Za-z0-9_\-]{35}\b"
    r"|\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{5,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----|\bbearer\s+[A-Za-z0-9._\-]{16,}"
    r"|\b(password|passwd|passcode|pwd|pin|secret|api[ _-]?key|access[ _-]?token|token)"
    r"s?\b\W{0,3}(is|was|are|:|=)\s*\S+"
    r"|\b\d{3}-\d{2}-\d{4}\b"
    r"|\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}\b",
    re.IGNORECASE,
)

_CARD = re.compile(r"\b\d(?:[ \-]?\d){12,18}\b")


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


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def has_card_number(text: str) -> bool:
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            return True
    return False


def has_secret(text: str) -> bool:
    """Whether `text` holds something that looks like a credential or a card number."""
    return bool(_SECRETS.search(text)) or has_card_number(text)


def is_instruction(text: str) -> bool:
    """Whether `text` tries to instruct the assistant rather than state a fact."""
    return bool(_INJECTION.search(text))


def is_small_talk(text: str) -> bool:
    """Greetings, thanks and pleasantries, or a fact that only reports them."""
    words = _WORD.findall(text.lower())
    if words and all(word in _CHATTER_WORDS for word in words):
        return True
    return bool(_SMALL_TALK.search(text))


def check_fact(text: str) -> Verdict:
    """Run the gate on one fact."""
    content = normalise(text)
    if len(content) < MIN_CHARS:
        return Verdict(content, False, f"too short ({len(content)} chars)")
    if len(content) > MAX_CHARS:
        return Verdict("", False, f"too long ({len(content)} chars)")
    if is_instruction(content):
        return Verdict("", False, "instruction to the assistant")
    if has_secret(content):
        return Verdict("", False, "contains a secret")
    if _HEDGES.search(content):
        return Verdict(content, False, "hedged")
    if is_small_talk(content):
        return Verdict(content, False, "small talk")
    return Verdict(content, True)
