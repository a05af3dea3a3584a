"""Citation markers (ACE attribution): the model cites the context items it used as
`[s12]` (strategy 12); the markers are taken out of the reply before the user sees it or
the history keeps it, and handed to the extensions (`TurnContext.cited`)."""

from __future__ import annotations

import re

MARKER = re.compile(r"[ \t]*\[s(\d{1,9})\]")


def split_citations(text: str) -> tuple[str, tuple[int, ...]]:
    """(`text` without its `[sN]` markers, the cited ids in order of first mention)."""
    cited = tuple(dict.fromkeys(int(number) for number in MARKER.findall(text)))
    if not cited:
        return text, ()
    clean = MARKER.sub("", text)
    clean = re.sub(r"[ \t]+([.,;:!?])", r"\1", clean)  # "works [s3]." -> "works."
    return clean.strip(), cited
