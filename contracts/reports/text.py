"""Text that came from a candidate, made safe for a terminal, Markdown and XML.

A candidate's name, its exception messages and its declared reasons are
written by whoever wrote the candidate. ANSI escape sequences could rewrite
a terminal line ("PASS" over "FAIL"), and Unicode bidirectional overrides
can make a name read differently from what it is; both are shown as visible
escapes instead.
"""

from __future__ import annotations

import re

__all__ = ["clean", "plural"]

# C0/C1 controls (but tab and, optionally, newline), DEL, and the bidi controls U+202A-202E, U+2066-2069, U+200E/F, U+061C.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")
_UNSAFE_NO_NEWLINE = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\u200e\u200f\u061c\u202a-\u202e\u2066-\u2069]")


def clean(value, *, keep_newlines: bool = False) -> str:
    """``str(value)`` with control and bidi characters replaced by visible ``\\xNN`` / ``\\uNNNN`` escapes."""
    text = "" if value is None else str(value)
    pattern = _UNSAFE if keep_newlines else _UNSAFE_NO_NEWLINE

    def visible(match: re.Match) -> str:
        code = ord(match.group())
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"

    return pattern.sub(visible, text)


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 expert``, ``2 experts``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"
