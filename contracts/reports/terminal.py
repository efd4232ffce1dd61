"""What a check prints in a terminal: the verdict table, one line per check.

Below a failing check's line: its note (clause counts, the error), then why, in the words of the first example of
its top clause, with the fix where the reason names one ("return weights.contiguous()"), and the contract its rows
match (the diagnosis), so that the reason is on the console, not only in report.md. The rows column counts the rows
the candidate answered: a check whose every call raised shows 0 and says so."""

from __future__ import annotations

from .schema import Status, Summary
from .text import clean

__all__ = ["note_for", "reason_lines", "verdict_table"]


def note_for(s: Summary) -> str:
    """The note column: why it did not run, what broke, what declared deviations showed or no longer show."""
    if s.reason:
        return clean(s.reason)
    parts = [f"{k}:{v}" for k, v in s.clauses.items() if v]
    if s.raised_rows:
        answered = s.answered_rows
        parts.insert(0, "0 rows answered (every call raised)" if not answered else f"{s.raised_rows:,} rows raised")
    if s.determinism and s.determinism.rows_differing:
        parts.append(f"determinism:{s.determinism.rows_differing}")
    if s.status is Status.ERROR and s.error:
        parts.insert(1 if s.raised_rows else 0, _shortened(clean(f"{s.error.kind}: {s.error.message}"), ERROR_NOTE_CHARS))
    if s.status is Status.INTERRUPTED:
        parts.insert(0, f"interrupted ({s.interrupted or 'signal'})")
    skipped: dict[str, int] = {}
    for f in s.families.values():
        for why, n in f.skip_reasons.items():
            skipped[why] = skipped.get(why, 0) + n
    if skipped:
        parts.append("skipped " + "; ".join(f"{n:,} rows: {clean(why)}" for why, n in skipped.items()))
    declared = [f"{k}:{v.rows}" for k, v in s.expected_deviations.items() if v.rows]
    if declared:
        parts.append("declared " + ", ".join(declared))
    gone = [k for k, v in s.expected_deviations.items() if not v.observed]
    if gone:
        parts.append("declared but not seen: " + ", ".join(gone))
    return ", ".join(parts)


ERROR_NOTE_CHARS = 240  # an error's note: the message ends with its cause, which a cut must keep
REASON_CHARS = 400  # the reason below a failing check: one example's words (a reason of a few lines is cut in the middle)


def reason_lines(s: Summary) -> list[tuple[str, str]]:
    """(label, text) lines below a failing check: why its top clause broke (with the fix where the reason names one),
    and the nearest contract its rows meet (the diagnosis' best combination of single-field changes)."""
    if not s.status.failed:
        return []
    out = []
    if s.top_reason:
        out.append(("why", _shortened(clean(f"{s.top_clause}: {s.top_reason}" if s.top_clause else s.top_reason), REASON_CHARS)))
    best = next((d for d in s.diagnosis or () if isinstance(d, dict) and d.get("kind") == "combination"), None)
    if best and best.get("text"):
        out.append(("diagnosis", _shortened(clean(best["text"]), REASON_CHARS)))
    return out


def _shortened(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters: its start and its end (where a message names the cause: "... while
    running case C: raised AcceleratorError: CUDA error: misaligned address"), the middle elided."""
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head]} ... {text[-(limit - head - 5):]}"


NOTE_WIDTH = 110  # notes wrap below their row: the table stays readable at 100-120 columns
NAME_WIDTH = 32  # a longer candidate name gets a line of its own


def _cells(s: Summary) -> dict[str, str]:
    return {
        "candidate": clean(s.label),
        "contract": s.contract,
        "device": s.device,
        "status": s.verdict,  # "PASS (quick)" for a quick look
        "rows": f"{s.answered_rows:,}",  # answered: a call that raised answered none of its rows
        "skipped": f"{s.rows_skipped:,}",
        "mismatched": f"{s.mismatched_rows:,}",
        "near ties": f"{s.near_tie_rows:,}",
        "declared": f"{s.expected_deviation_rows:,}",
        "rows/s": f"{s.rows_per_s:,.0f}" if s.rows_per_s and s.answered_rows else "-",
    }


_LEFT = ("candidate", "contract", "device", "status")


def verdict_table(summaries: list[Summary], *, links: dict[str, str] | None = None) -> str:
    """One line per check (text left-aligned, numbers right-aligned), each check's note wrapped below its line;
    ``links``: candidate label -> its report, listed after the table (index.md)."""
    import textwrap

    rows = [_cells(s) for s in summaries]
    columns = list(rows[0]) if rows else list(_cells(Summary(candidate="", status=Status.PASS)))
    width = {c: max([len(c)] + [len(r[c]) for r in rows if c != "candidate" or len(r[c]) <= NAME_WIDTH]) for c in columns}

    def line(values: dict[str, str]) -> str:
        return "  ".join(values[c].ljust(width[c]) if c in _LEFT else values[c].rjust(width[c]) for c in columns).rstrip()

    out = [line({c: c for c in columns})]
    for s, r in zip(summaries, rows):
        if len(r["candidate"]) > width["candidate"]:  # a long name on a line of its own, its figures below it
            out.append(r["candidate"])
            r = {**r, "candidate": ""}
        out.append(line(r))
        note = note_for(s)
        if note:
            out += textwrap.wrap(note, NOTE_WIDTH, initial_indent="    note: ", subsequent_indent="          ", break_on_hyphens=False)
        for label, text in reason_lines(s):
            out += textwrap.wrap(text, NOTE_WIDTH, initial_indent=f"    {label}: ", subsequent_indent="          ", break_on_hyphens=False)
    if links:
        out.append("")
        out += [f"{label}: {target}" for label, target in links.items()]
    return "\n".join(out)
