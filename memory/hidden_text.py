"""Hidden characters in text written to memory: what is stored (`visible_text`) and what
the quality gate reads (`judged_text`).

A fact can carry more than it shows: Unicode tag characters (U+E0000 block) spelling a
hidden sentence, zero-width characters or a soft hyphen inside a word, an RTL override,
fullwidth or mathematical letters, a Cyrillic `і` standing in for a Latin `i`. Memory
stores and injects only the visible text, with every format character (category Cf:
zero-width, soft hyphen, direction overrides, tags) and other default-ignorable character
removed. The gate judges a stricter reading of it: NFKC (fullwidth and mathematical
letters read plainly), hidden tag text spelled out, accents dropped and common look-alike
letters folded to Latin, so a Cyrillic "іgnore", or "ignore" with a zero-width space
inside, reads as "ignore".
"""

from __future__ import annotations

import re
import unicodedata

TAG_FIRST, TAG_LAST = 0xE0000, 0xE007F
_TAG_TEXT = {code: chr(code - TAG_FIRST) for code in range(TAG_FIRST + 0x20, TAG_LAST)}

# Letters of other scripts that look like Latin ones (the common part of Unicode's
# confusables list for Cyrillic and Greek, plus a few IPA and Latin-extended letters).
_LOOK_ALIKES = str.maketrans(
    dict(
        zip(
            "аеорсухіјѕԁһӏԛԝкмнтАВЕКМНОРСТУХІЈЅԌԚԜαεικνορτυχΑΒΕΖΗΙΚΜΝΟΡΤΥΧϲϳɡɩıȷ",
            "aeopcyxijsdhlqwkmhtABEKMHOPCTYXIJSGQWaeikvoptuxABEZHIKMNOPTYXcjgiij",
            strict=True,
        )
    )
)


# Default-ignorable characters that are not format characters: fillers, variation
# selectors (which can smuggle bytes), the combining grapheme joiner. U+FE0F stays: it
# asks for an emoji's colour form.
_IGNORABLE = (
    (0x034F, 0x034F),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0E),
    (0xFFA0, 0xFFA0),
    (0x1BCA0, 0x1BCA3),
    (TAG_FIRST, 0xE0FFF),
)
ZWJ = "\u200d"
_OVERRIDE = re.compile("\u202e([^\u202a-\u202e\u2066-\u2069\n]*)")


def is_hidden(char: str) -> bool:
    """A character that shows nothing: a format character (Cf), a tag or another
    default-ignorable character."""
    code = ord(char)
    return unicodedata.category(char) == "Cf" or any(a <= code <= b for a, b in _IGNORABLE)


def _emoji_joiner(text: str, index: int) -> bool:
    """A zero-width joiner inside an emoji sequence (👩‍💻): it shows, as one emoji."""
    before = text[index - 1] if index > 0 else " "
    after = text[index + 1] if index + 1 < len(text) else " "
    emoji_before = before == "\ufe0f" or unicodedata.category(before) == "So"
    return emoji_before and unicodedata.category(after) == "So"


def visible_text(text: str) -> str:
    """`text` as memory stores and injects it: without hidden characters (NFC, so CJK
    punctuation and fullwidth forms stay as written)."""
    kept = (
        char
        for index, char in enumerate(text)
        if not is_hidden(char) or (char == ZWJ and _emoji_joiner(text, index))
    )
    return unicodedata.normalize("NFC", "".join(kept))


def _overridden(text: str) -> list[str]:
    """Each run after a right-to-left override (U+202E) as a reader sees it: reversed."""
    runs = _OVERRIDE.findall(text)
    return [visible_text(run[::-1]) for run in runs]


def judged_text(text: str) -> str:
    """How the gate reads `text`: its visible text, then on lines of their own what hidden
    tag characters spell and each right-to-left override's run as a reader sees it; all
    NFKC, accents dropped, look-alike letters folded to Latin."""
    hidden = "".join(_TAG_TEXT.get(ord(char), "") for char in text)
    shown = "\n".join([visible_text(text), *_overridden(text), hidden.strip()]).strip()
    bare = "".join(
        char
        for char in unicodedata.normalize("NFKD", shown)  # compatibility forms read plainly
        if not unicodedata.combining(char)
    )
    return unicodedata.normalize("NFC", bare).translate(_LOOK_ALIKES)
