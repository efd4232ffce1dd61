"""``report.md``: a check's result as text a reviewer reads in a terminal or a pull request.

Rendered from the records only (``CheckResult``); the text is made here and
nowhere else.
"""

from __future__ import annotations

from .expert_load import load_rows
from .schema import CheckResult, RowDetail, Status, Summary
from .sets import expert_sets, shown_as_sets
from .text import CELLS_NOTE, clean, tie_group_matters, ulp_meaning

__all__ = ["as_sets", "md_table", "option_rows", "render_markdown", "side_by_side"]


def md_table(rows: list[dict]) -> str:
    """A Markdown table of ``rows`` (dicts with the same keys); ``_none_`` for no rows."""
    if not rows:
        return "_none_\n"
    cols = list(rows[0])
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for row in rows:
        lines.append("| " + " | ".join(clean(row[c]).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def option_rows(s) -> list[dict]:
    """``Summary.by_option`` as table rows: each option's values, their rows and unexpected mismatches by clause."""
    return [
        {"option": option, "value": value, "rows": f"{c.rows:,}", "mismatched": f"{c.mismatched_rows:,}",
         "clauses": ", ".join(f"{k}: {v:,}" for k, v in c.clauses.items() if v)}
        for option, values in s.by_option.items()
        for value, c in values.items()
    ]  # fmt: skip


def _fmt(value) -> str:
    return f"{value:.8g}" if isinstance(value, float) else str(value)


def side_by_side(d: RowDetail) -> str:
    """Expected against actual, slot by slot, differing slots marked; as sets of experts where the output order is
    "any" (``as_sets``)."""
    if shown_as_sets(d):
        return as_sets(d)
    e, a = d.expected_ids or [], d.actual_ids or []
    we, wa = d.expected_weights or [], d.actual_weights or []

    def at(seq, j):
        return _fmt(seq[j]) if j < len(seq) else ""

    lines = [f"{'col':>4} {'exp id':>7} {'act id':>7} {'exp weight':>15} {'act weight':>15}"]
    for j in range(max(len(e), len(a))):
        differs = j >= len(e) or j >= len(a) or e[j] != a[j]
        mark = ("  ~ near tie" if d.verdict == "near_tie" else "  <-") if differs else ""
        if j == len(e) - 1:
            mark += "  (cutoff: slot topk-1)"
        lines.append(f"{j:>4} {at(e, j):>7} {at(a, j):>7} {at(we, j):>15} {at(wa, j):>15}{mark}")
    return "```\n" + "\n".join(lines) + "\n```\n"


def as_sets(d: RowDetail) -> str:
    """A row of an order-free contract: matched experts (weights compared by expert), missing and extra ones."""
    near = d.verdict == "near_tie"

    def w(value) -> str:
        return "-" if value is None else _fmt(value)

    def col(value) -> str:
        return "-" if value is None else str(value)

    lines = ['output order "any": the experts compared as sets, weights by expert',
             f"{'expert':>6} {'exp col':>7} {'act col':>7} {'exp weight':>15} {'act weight':>15}"]  # fmt: skip
    for x in expert_sets(d):
        if x.kind == "matched":
            mark = "" if x.same_weight else "  <- weight"
        else:
            mark = f"  ~ near tie, {x.kind}" if near else f"  <- {x.kind}"
        lines.append(f"{x.expert:>6} {col(x.expected_column):>7} {col(x.actual_column):>7} "
                     f"{w(x.expected_weight):>15} {w(x.actual_weight):>15}{mark}")  # fmt: skip
    return "```\n" + "\n".join(lines) + "\n```\n"


def _detail_line(d: RowDetail) -> str:
    facts = [f"{clean(d.reason)}."]
    if d.tie_group_size is not None and tie_group_matters(d.clause, d.verdict):
        facts.append(f"Tie group at the cutoff: {d.tie_group_size} expert{'s' if d.tie_group_size != 1 else ''}"
                     + (" (straddles the cutoff)" if d.straddles_cutoff else "") + ";")  # fmt: skip
    if d.nan_count is not None:
        facts.append(f"NaN logits in row: {d.nan_count};")
    facts.append(f"renormalize={d.renormalize}, routed_scaling_factor={d.routed_scaling_factor}")
    if d.oracle_agrees_with:
        facts.append(f"; the oracle agrees with: {d.oracle_agrees_with}")
    if d.clauses and len(d.clauses) > 1:
        facts.append(f"; the row also breaks: {', '.join(c for c in d.clauses if c != d.clause)}")
    return " ".join(facts).replace(" ;", ";") + "."


def _declared_rows(v) -> str:
    """A declared deviation's rows; for weight_accuracy also the rows within tolerance yet not bit-exact, which show it."""
    if v.inexact_rows:
        return f"{v.rows:,} beyond tolerance, {v.inexact_rows:,} within tolerance but not bit-exact"
    return f"{v.rows:,}"


def render_markdown(result: CheckResult) -> str:
    s = result.summary
    against = f" against `{clean(s.against)}`" if s.against else ""
    out = [f"# {s.verdict}: `{clean(s.candidate)}`{against} under contract `{s.contract}`\n"]
    if s.status is Status.UNAVAILABLE:
        out.append(f"Not run on this host: {clean(s.reason)}\n")
        out.append(f"\nCommand: `{clean(s.command)}`\n")
        return "".join(x if x.endswith("\n") else x + "\n" for x in out)
    out += _counts(s)
    out += _sections(s)
    out += _examples(result.details)
    out.append(f"\nCommand: `{clean(s.command)}`\n")
    return "".join(x if x.endswith("\n") else x + "\n" for x in out)


def _counts(s: Summary) -> list[str]:
    """The counts and facts above the sections: rows, mismatches, weights, skips, notes and the first error."""
    out: list[str] = []
    rate = f"{s.rows_per_s:,.0f} rows/s" if s.rows_per_s else ""
    out.append(
        f"- rows checked: {s.rows_checked:,}; skipped (not covered): {s.rows_skipped:,}; {rate}\n"
        f"- unexpected mismatched rows: **{s.mismatched_rows:,}**; near ties (not failures, docs/contracts.md): {s.near_tie_rows:,}; "
        f"declared deviations seen: {s.expected_deviation_rows:,}\n"
        f"- weights: {s.exact_rows:,} rows bit-exact, {s.within_tolerance_rows:,} within tolerance; "
        f"max weight distance on equal ids {s.max_weight_ulp:g} fp32 ULP: {ulp_meaning(s.max_weight_ulp)}\n"
        f"- device: {s.device} ({(s.environment or {}).get('device_name', '')}); seed {s.seed}\n"
    )
    skips = {}
    for f in s.families.values():
        for why, n in f.skip_reasons.items():
            skips[why] = skips.get(why, 0) + n
    for why, n in skips.items():
        out.append(f"- skipped {n:,} rows: {clean(why)}\n")
    sides = s.against_sides
    if sides and (sides.candidate or sides.against or sides.neither):
        out.append(
            f"\n- where `{clean(s.candidate)}` and `{clean(s.against)}` differ, the oracle agrees with `{clean(s.candidate)}` on "
            f"{sides.candidate:,} rows, with `{clean(s.against)}` on {sides.against:,}, with neither on {sides.neither:,}\n"
        )
    if s.interrupted:
        out.append(f"\n**Interrupted** ({s.interrupted}): the counts cover the rows checked before the stop.\n")
    det = s.determinism
    if det and (det.repeat > 1 or det.rows_differing):
        how = f"each case run {det.repeat} times" + (" and once through a CUDA graph replay" if det.graph_replay else "")
        verdict = "all identical" if not det.rows_differing else f"**{det.rows_differing:,} rows differed** in {det.cases} cases"
        out.append(f"\n- determinism: {how}; {verdict}\n")
    for note in s.notes:
        out.append(f"\n- note: {clean(note)}\n")
    if s.cells_capped and not any(note.startswith(CELLS_NOTE) for note in s.notes):  # the tally's note says it already
        out.append(f"\n- mismatch cells: {s.cells_recorded:,} of {s.cells_total:,} recorded (capped; the first of every family and clause are kept; counts above are exact)\n")
    if s.error:
        where = f", in case `{s.error.case}`" if s.error.case else ""
        out.append(f"\nFirst error ({s.error.kind}){where}:\n\n{clean(s.error.message)}\n\n```\n{clean(s.error.traceback or s.error.message, keep_newlines=True)}\n```\n")
        if s.error.replay:
            out.append(f"\nReplay: `{clean(s.error.replay)}`\n")
    return out


def _sections(s: Summary) -> list[str]:
    """The sections of the counts: diagnosis, ranks, clauses, declared deviations, call options, expert load, families."""
    out: list[str] = []
    if s.diagnosis:
        out.append("\n## Diagnosis\n")
        for d in s.diagnosis:
            out.append(f"- {clean(d.get('text', ''))}\n")
    if s.ranks:
        out.append(f"\n## Ranks ({s.world_size} under torchrun; counts above are their sum)\n")
        out.append(md_table([{k: r.get(k, "") for k in ("rank", "host", "device", "shard", "rows_checked", "status", "duration_s", "reason")}
                             for r in s.ranks]))  # fmt: skip
    out.append("\n## Clauses\n")
    out.append(md_table([{"clause": k, "unexpected rows (primary)": v, "rows breaking it": s.clauses_broken.get(k, v)} for k, v in s.clauses.items()]))
    if s.expected_deviations:
        out.append("\n## Declared deviations\n")
        out.append(md_table([
            {"clause": k, "rows": _declared_rows(v), "observed": "yes" if v.observed else "NO (no longer happens?)", "why": v.reason}
            for k, v in s.expected_deviations.items()
        ]))  # fmt: skip
    if s.by_option:
        out.append("\n## Mismatched rows by call option (exact counts)\n")
        out.append(md_table(option_rows(s)))
    if s.expert_load:
        out.append("\n## Expert load (captured logits)\n\nTokens per expert, per layer: the oracle's histogram and the candidate's difference "
                   "from it (every count is in summary.json, `expert_load`).\n\n")  # fmt: skip
        out.append(md_table(load_rows(s.expert_load)))
    out.append("\n## Families\n")
    out.append(md_table([
        {
            "family": name,
            "rows": f.rows,
            "skipped": f.rows_skipped,
            "mismatched": f.mismatched_rows,
            "near ties": f.near_tie_rows,
            "declared": f.expected_rows,
            "clauses": ", ".join(f"{k}: {v}" for k, v in f.clauses.items()),
        }
        for name, f in s.families.items()
    ]))  # fmt: skip
    return out


def _examples(details: list[RowDetail]) -> list[str]:
    """The first mismatched rows per clause, side by side, each with its replay line."""
    out: list[str] = []
    if details:
        out.append("\n## First mismatches per clause (tie-straddling cases first)\n")
        for d in details:
            out.append(f"\n### `{d.clause}` ({d.verdict}): family `{d.family}`, case `{d.case}`, row {d.row}\n\n{_detail_line(d)}\n\n")
            if d.expected_ids is not None:
                out.append(side_by_side(d))
            if d.replay:
                out.append(f"\nReplay: `{clean(d.replay)}`\n")
    return out
