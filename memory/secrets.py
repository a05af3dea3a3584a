"""Secrets in a fact: credentials by shape, a labelled value (`password is …`), card numbers.

`secret_kind()` names what it found ("a password", "an API key or token", …) so a refusal
can say why without quoting the secret. A label without a value is no secret: "the wifi
password is on the fridge" says where a password is, not what it is.
"""

from __future__ import annotations

import math
import re
from collections import Counter

PASSWORD = "a password"
TOKEN = "an API key or token"
CARD = "a card number"
PRIVATE_KEY = "a private key"
ID_NUMBER = "an identity number"

_PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|PuTTY-User-Key-File", re.I)

_TOKEN_SHAPES = re.compile(
    r"\bsk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{16,}"
    r"|\b(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bglpat-[A-Za-z0-9_\-]{20,}"
    r"|\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\bxox[abprs]-[A-Za-z0-9\-]{10,}|\bAIza[0-9A-Za-z_\-]{30,}"
    r"|\bhf_[A-Za-z0-9]{30,}"
    r"|\b\d{8,10}:[A-Za-z0-9_\-]{35}\b"  # a Telegram bot token
    r"|\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{5,}"  # a JWT
    r"|\bbearer\s+[A-Za-z0-9._\-]{16,}",
    re.IGNORECASE,
)

_PASSWORD_LABELS = ("password", "passwd", "passphrase", "passcode", "pwd")
_LABELLED = re.compile(
    r"\b(?P<label>password|passwd|passphrase|passcode|pwd|pin(?:\s?code)?|secret|"
    r"api[ _-]?key|access[ _-]?token|token)s?\b"
    r"\W{0,3}(?:is|was|are|:|=)\s*(?P<value>\S+)",
    re.IGNORECASE,
)
_CJK_PASSWORD = re.compile(r"(?:密码|口令|密碼)\s*(?:是|为|為|[:：=])\s*\S")

# Words that follow "password is" when no password does: where it is, what it is like.
_NOT_A_VALUE = frozenset(
    """on in at under behind inside near by with without written stored saved kept taped
    printed hidden located somewhere the a an my his her their our your its this that same
    different not no still also too very long short strong weak secure safe changed reset
    expired new old required needed missing lost forgotten wrong correct case-sensitive set
    known unknown easy hard simple complicated complex empty blank shared private personal
    protected encrypted available what how why where when""".split()  # noqa: SIM905
)

_SSN = re.compile(r"\b\d{3}-\d{2}-\d{4}\b")
_CARD = re.compile(r"\b\d(?:[ \-]?\d){12,18}\b")
_LONG_HEX_OR_MIXED = re.compile(
    r"\b(?=[A-Za-z0-9_\-]*\d)(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{32,}\b"
)
_CANDIDATE = re.compile(r"[A-Za-z0-9_\-+=]{20,}")
_DIGIT_LETTER = re.compile(r"(?<=\d)(?=[A-Za-z])|(?<=[A-Za-z])(?=\d)")
MIN_ENTROPY_BITS = 3.5


def luhn_valid(digits: str) -> bool:
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = int(char)
        if index % 2 == 1:
            value = value * 2 - 9 if value > 4 else value * 2
        total += value
    return total % 10 == 0


def has_card_number(text: str) -> bool:
    """13 to 19 digits (spaces or dashes between) that pass the Luhn check."""
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group(0))
        if 13 <= len(digits) <= 19 and luhn_valid(digits):
            return True
    return False


def entropy_bits(text: str) -> float:
    """Shannon entropy per character of `text`."""
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def looks_random(token: str) -> bool:
    """A long token that mixes letters and digits often and evenly, as generated keys do
    ("Zx8fK2pQ9mW4vB7nR1tY6uE3"), unlike a name with a number ("WeatherStation2000XL")."""
    return (
        len(token) >= 20
        and len(_DIGIT_LETTER.findall(token)) >= 4
        and entropy_bits(token) >= MIN_ENTROPY_BITS
    )


def _labelled_kind(text: str) -> str | None:
    """PASSWORD or TOKEN for a label followed by a value ("password is hunter2")."""
    if _CJK_PASSWORD.search(text):
        return PASSWORD
    for match in _LABELLED.finditer(text):
        label = match.group("label").lower()
        value = match.group("value").strip(".,;:!?\"'`()[]")
        if not value or value.lower() in _NOT_A_VALUE:
            continue
        if label.startswith("pin"):
            if sum(char.isdigit() for char in value) >= 3:
                return PASSWORD
        elif label in _PASSWORD_LABELS:
            return PASSWORD
        elif any(char.isdigit() for char in value) or len(value) >= 16:
            return TOKEN
    return None


def secret_kind(text: str) -> str | None:
    """What kind of secret `text` holds ("a password", "a card number", …), or None."""
    if _PRIVATE_KEY.search(text):
        return PRIVATE_KEY
    if _TOKEN_SHAPES.search(text) or _LONG_HEX_OR_MIXED.search(text):
        return TOKEN
    if any(looks_random(match.group(0)) for match in _CANDIDATE.finditer(text)):
        return TOKEN
    labelled = _labelled_kind(text)
    if labelled is not None:
        return labelled
    if has_card_number(text):
        return CARD
    if _SSN.search(text):
        return ID_NUMBER
    return None


def has_secret(text: str) -> bool:
    """Whether `text` holds something that looks like a credential or a card number."""
    return secret_kind(text) is not None
