"""A backward result as text: the console lines, ``backward.md`` and ``backward.json`` of its bundle folder.

The bundle's files are named ``backward.*``, not ``summary.json`` / ``report.md``: the forward readers
(``reports.bundle.find_checks``) look for every ``summary.json`` under a folder and would read this one as a
forward check's.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from ..reports._atomic import write_json, write_text
from .check import BackwardResult
from .clauses import GRAD_CLAUSES, statement

__all__ = ["console_lines", "detail_lines", "markdown", "write_bundle"]

MAX_LISTED = 200  # mismatched rows listed in backward.md (backward.json keeps every one, each with its replay line)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}:{v}" for k, v in counts.items() if v)


def console_lines(r: BackwardResult) -> list[str]:
    w = max(12, len(r.contract))
    head = f"{'candidate':<14} {'contract':<{w}} {'device':<6} {'status':<18} {'rows':>6} {'skipped':>8} {'mismatched':>10} {'declared':>8}"
    skipped = r.skipped_selection + r.skipped_uncovered
    name = r.candidate if len(r.candidate) <= 14 else ""  # a long name (module:attr) gets a line of its own, as check's table
    row = f"{name:<14} {r.contract:<{w}} {r.device:<6} {r.status:<18} {r.rows_checked:>6,} {skipped:>8,} {r.mismatched:>10,} {r.declared:>8,}"
    lines = [head] + ([r.candidate] if not name else []) + [row]
    if r.error:
        lines.append(f"    error: {r.error}")
    if r.skipped_selection:
        lines.append(f"    skipped: {r.skipped_selection:,} rows chose other experts than the oracle (the forward check's rows)")
    if r.skipped_uncovered:
        lines.append(f"    skipped: {r.skipped_uncovered:,} rows the candidate's covered gate declined")
    if r.mismatched:
        lines.append(f"    note: {_counts(r.clauses)}")
        top = max(GRAD_CLAUSES, key=lambda k: r.clauses[k])
        lines.append(f"    why: {top}: {statement(top)}")
        first = next(m for m in r.mismatches if not m.declared)
        lines.append(f"    replay: {first.replay}")
    if r.declared:
        lines.append(f"    declared: {_counts(r.declared_clauses)}")
    if r.status == "NOT COVERED":
        lines.append("    no row compared: no evidence, no PASS")
    return lines


def detail_lines(r: BackwardResult) -> list[str]:
    """A replayed row: the chosen experts' gradients and every other expert whose gradient is not 0 on either side
    (an expert not chosen has none under most contracts), the candidate's against the contract's."""
    d = r.detail
    if d is None:
        return []
    lines = [f"case {d.case} row {d.row}: chosen experts {d.ids}" + ("" if d.checked else " (not compared: another selection than the oracle's)"),
             f"{'expert':>6} {'chosen':>6} {'expected dL/dx':>16} {'actual dL/dx':>16}"]  # fmt: skip
    shown = 0
    for e, (exp, act) in enumerate(zip(d.expected, d.actual)):
        if e not in d.ids and exp == 0 and act == 0:
            continue
        off = not abs(act - exp) <= r.tolerance.atol * d.scale + r.tolerance.rtol * abs(exp)
        lines.append(f"{e:>6} {'*' if e in d.ids else '':>6} {exp:>16.9g} {act:>16.9g}{'  <- differs' if off else ''}")
        shown += 1
    hidden = len(d.expected) - shown
    if hidden:
        lines.append(f"({hidden} experts not chosen, with gradient 0 on both sides, not shown)")
    return lines


def markdown(r: BackwardResult) -> str:
    out = [f"# Backward check: {r.candidate} under {r.contract} ({r.device}): {r.status}", ""]
    out += [f"- rows compared: {r.rows_checked:,} in {r.cases} cases ({r.options})",
            f"- rows not compared: {r.skipped_selection:,} chose other experts than the oracle (the forward check owns "
            f"them), {r.skipped_uncovered:,} declined by the candidate's covered gate",
            f"- mismatched rows: {r.mismatched:,}; declared: {r.declared:,}",
            f"- tolerance: |a - e| <= {r.tolerance.atol:g} * scale + {r.tolerance.rtol:g} * |e|, scale = |rsf| * max |upstream| of the row"]  # fmt: skip
    if r.error:
        out.append(f"- error: {r.error}")
    out += ["", "## Clauses", "", "| clause | rows | declared | statement |", "|---|---:|---:|---|"]
    out += [f"| {k} | {r.clauses[k]} | {r.declared_clauses[k]} | {statement(k)} |" for k in GRAD_CLAUSES]
    if r.deviations:
        out += ["", "## Declared", ""] + [f"- {k}: {v}" for k, v in r.deviations.items()]
    if r.mismatches:
        out += ["", "## Mismatched rows", "", "| case | row | clause | of | expert | expected | actual | rsf | renormalize | replay |",
                "|---:|---:|---|---|---:|---:|---:|---:|---|---|"]  # fmt: skip
        for m in r.mismatches[:MAX_LISTED]:
            clause = m.clause + (" (declared)" if m.declared else "")
            out.append(f"| {m.case} | {m.row} | {clause} | {m.of} | {m.expert} | {m.expected:.9g} | {m.actual:.9g} | "
                       f"{m.routed_scaling_factor:g} | {m.renormalize} | `{m.replay}` |")  # fmt: skip
        if len(r.mismatches) > MAX_LISTED:
            out.append(f"\n{len(r.mismatches) - MAX_LISTED:,} more in backward.json, each with its replay line.")
    return "\n".join(out) + "\n"


def write_bundle(r: BackwardResult, root: Path | None = None, out: Path | None = None) -> Path:
    """The folder ``out`` (default ``root/<UTC time>-backward-<candidate>``) with backward.json and backward.md."""
    if out is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = Path(root or "reports") / f"{stamp}-backward-{re.sub(r'[^A-Za-z0-9_.-]+', '_', r.candidate)}"
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "backward.json", r.as_dict())
    write_text(out / "backward.md", markdown(r))
    return out
