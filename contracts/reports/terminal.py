"""What a check prints in a terminal: the verdict table, one line per check."""

from __future__ import annotations

from .schema import Status, Summary
from .text import clean

__all__ = ["note_for", "verdict_table"]


def note_for(s: Summary) -> str:
    """The note column: why it did not run, what broke, what declared deviations showed or no longer show."""
    if s.reason:
        return clean(s.reason)
    parts = [f"{k}:{v}" for k, v in s.clauses.items() if v]
    if s.determinism and s.determinism.rows_differing:
        parts.append(f"determinism:{s.determinism.rows_differing}")
    if s.status is Status.ERROR and s.error:
        parts.insert(0, clean(f"{s.error.kind}: {s.error.message}")[:120])
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


def verdict_table(summaries: list[Summary]) -> str:
    import pandas as pd

    rows = [
        {
            "candidate": clean(s.label),
            "contract": s.contract,
            "device": s.device,
            "status": s.status.word,
            "rows": s.rows_checked,
            "skipped": s.rows_skipped,
            "mismatched": s.mismatched_rows,
            "near ties": s.near_tie_rows,
            "declared": s.expected_deviation_rows,
            "rows/s": f"{s.rows_per_s:,.0f}" if s.rows_per_s else "-",
            "note": note_for(s),
        }
        for s in summaries
    ]
    return pd.DataFrame(rows).to_string(index=False)
