"""Text that came from a candidate, made safe for a terminal, Markdown and XML.

A candidate's name, its exception messages and its declared reasons are
written by whoever wrote the candidate. ANSI escape sequences could rewrite
a terminal line ("PASS" over "FAIL"), and Unicode bidirectional overrides
can make a name read differently from what it is; both are shown as visible
escapes instead.
"""

from __future__ import annotations

import re

__all__ = ["CELLS_NOTE", "HUGE_ULP", "clean", "plural", "tie_group_matters", "ulp_meaning"]

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


# A note the tally writes on the capped cells starts so; the reports show it once, as their note on the cells.
CELLS_NOTE = "mismatch cells:"

# Clauses about the weights (or the answer's form), where which experts tie at the cutoff explains nothing.
_NOT_ABOUT_SELECTION = frozenset({"bias_in_weight", "renorm_guard", "scaling", "weight_accuracy", "renormalization",
                                  "softmax_scope", "validity", "determinism", "signed_zero"})  # fmt: skip


def tie_group_matters(clause: str, verdict: str) -> bool:
    """Whether a row example's tie group at the cutoff helps explain it: a near tie, or a clause about which experts
    were taken or in which order (not a weight clause: there the ids agree and the tie group is noise)."""
    return verdict == "near_tie" or clause not in _NOT_ABOUT_SELECTION


# fp32 ULPs between 1.0 and 0.0 are 1,065,353,216; rounding differences are a few ULPs. Past this the distance is a
# different number, not a rounding: zero, NaN or a wrong sign against a number, or a factor such as a missing scaling.
HUGE_ULP = 1 << 20


def ulp_meaning(ulp: float) -> str:
    """What the largest weight distance (fp32 ULPs, on rows whose ids agree) says, in words."""
    if ulp != ulp or ulp == float("inf"):
        return "a NaN or an infinity against a number"
    if ulp <= 4:
        return "rounding (a few units in the last place)"
    if ulp < HUGE_ULP:
        return "more than rounding: an operation done in another order or precision"
    return ("not a rounding difference: a weight of the wrong sign, zero or NaN against a number, or off by a factor "
            "(about 1e9 ULP is the distance from 0 to 1; a factor of 2 is 8.4e6)")
