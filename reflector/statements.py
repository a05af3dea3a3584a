"""What people said about themselves, as facts, when the model extracts none.

A small local model (SmolLM2-135M on a 2,048-token window) often answers the reflector with
`{"memories": []}` or with nothing usable, even for a batch in which a person plainly says
who they are. Compaction then summarises those messages away and the facts are lost. This
module is the fallback: each user sentence that states something durable about its speaker
("I live in Lisbon.", "My dog is a beagle called Biscuit.", "I work as a night nurse.")
becomes a candidate fact, attributed to the speaker and quoted in their own words, so it is
grounded by construction. Questions, requests, hedged and conditional sentences are not
statements. The candidates still pass the same quality gate and the forgotten-facts check
as the model's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from core.storage.store import StoredMessage
from core.text import strip_think
from reflector.extraction import Candidate

MIN_CHARS = 12
MAX_CHARS = 240
MAX_PER_BATCH = 20

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_GREETING = re.compile(
    r"^(?:hi|hello|hey|hiya|yo|good (?:morning|afternoon|evening)|well|so|oh|ok(?:ay)?|btw|"
    r"by the way)\b[\s,!.:;-]*",
    re.IGNORECASE,
)
# A first-person subject followed by a verb that says something durable about the speaker.
_DURABLE = re.compile(
    r"^(?:(?:i|we)\s+(?:am|'m|was|were|have|'ve|had|live|lived|work|worked|study|studied|"
    r"play|played|like|love|hate|prefer|enjoy|own|speak|grew|moved|come|came|got|"
    r"teach|drive|ride|use|eat|drink|keep|collect|volunteer|run|go|went|visit|visited|"
    r"was born|'re|are|need|want|plan|am planning|'m planning)\b"
    r"|i'm\b|i've\b|we're\b|we've\b"
    r"|(?:my|our)\s+(?:[\w'-]+\s+){0,3}(?:is|are|was|were|'s|has|have|lives|works|called|"
    r"named)\b)",
    re.IGNORECASE,
)
_NOT_A_STATEMENT = re.compile(
    r"\?|^(?:if|when|whether|can|could|would|should|please|let's|do|does|did|what|why|how|"
    r"who|where|which)\b|\b(?:you|your)\b",
    re.IGNORECASE,
)


def sentences(text: str) -> Iterable[str]:
    """The sentences of one message, greetings at their start removed."""
    for raw in _SENTENCE_END.split(strip_think(text)):
        sentence = raw.strip()
        while True:
            trimmed = _GREETING.sub("", sentence, count=1).strip()
            if trimmed == sentence:
                break
            sentence = trimmed
        # "Hi, I'm Marta and I live in Lisbon." → "I'm Marta and I live in Lisbon."
        sentence = re.sub(r"^[,;:\s-]+", "", sentence)
        if sentence:
            yield sentence


def is_statement(sentence: str) -> bool:
    """A first-person sentence that says something durable, not a question or a request."""
    if not MIN_CHARS <= len(sentence) <= MAX_CHARS:
        return False
    return bool(_DURABLE.match(sentence)) and not _NOT_A_STATEMENT.search(sentence)


def attributed(sender: str, sentence: str) -> str:
    """The statement as a fact that names its speaker and keeps their words."""
    speaker = sender.strip() or "The user"
    text = sentence[0].upper() + sentence[1:]
    if text[-1] not in ".!":
        text += "."
    return f"{speaker} said: {text}"


def self_statements(messages: Sequence[StoredMessage]) -> list[Candidate]:
    """The batch's user statements about their speakers, as PROFILE candidates, oldest
    first, at most `MAX_PER_BATCH`, without repeats."""
    found: dict[str, Candidate] = {}
    for message in messages:
        if message.role != "user":
            continue
        for sentence in sentences(message.content):
            if is_statement(sentence):
                fact = attributed(message.sender, sentence)
                found.setdefault(fact.lower(), Candidate(fact, "PROFILE"))
    return list(found.values())[:MAX_PER_BATCH]
