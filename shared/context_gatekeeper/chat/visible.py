"""How both chats show text they did not write: every character a screen would act on,
drawn as one visible character.

A model's answer, an edit or a stored message may hold control characters (an escape
sequence that retitles the window, clears the screen or hides text; a carriage return
or backspace that overprints what came before) or bidi overrides, isolates and marks
(which reorder what is shown, so a diff reads other than it is).  The terminal chat
(:mod:`.render`) and the web page (``static/app.js``, which receives :func:`table_json`
in its ``<meta name="gatekeeper-visible">``) apply the same :data:`VISIBLE` table.
Standard library only.
"""

from __future__ import annotations

import json

__all__ = ["VISIBLE", "visible", "table_json"]

BIDI_MARKS = (0x200E, 0x200F, 0x061C)
"""The bidi marks (LEFT-TO-RIGHT, RIGHT-TO-LEFT and ARABIC LETTER MARK): invisible
characters with a direction, which move the punctuation and spaces around them as an
override does."""

VISIBLE: dict[int, int] = {
    **{code: 0x2400 + code for code in range(0x20) if chr(code) not in "\n\t"},  # C0 controls: their pictures (ESC -> U+241B)
    0x7F: 0x2421,  # DEL
    **{code: 0xFFFD for code in range(0x80, 0xA0)},  # C1 controls (CSI, OSC, ...)
    **{code: 0xFFFD for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))},  # bidi overrides and isolates
    **{code: 0xFFFD for code in BIDI_MARKS},
}
"""Characters a screen would act on instead of showing, each to one visible character
(code point to code point; newline and tab are kept)."""


def visible(text: str) -> str:
    """``text`` with every character of :data:`VISIBLE` shown as its visible stand-in
    (U+241B for ESC, U+240D for a carriage return, U+FFFD for a bidi override or mark); newlines
    and tabs stay.  One character for one, so styled spans stay in place."""
    return text.translate(VISIBLE)


def table_json() -> str:
    """:data:`VISIBLE` as the page reads it: a JSON list of ``[code, stand-in]`` pairs."""
    return json.dumps(sorted(VISIBLE.items()), separators=(",", ":"))
