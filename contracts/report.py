"""Write a check's bundle: summary.json, mismatches.csv (+ .parquet), report.md, report.html.

Everything is written atomically; text is made here, from the data the
runner gathered, and nowhere else.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from ._atomic import write_atomic, write_json, write_text
from .html_report import write_html
from .runner import CheckResult

__all__ = ["CELL_COLUMNS", "render_markdown", "write_bundle"]

CELL_COLUMNS = [
    "family", "case_seed", "case", "row", "col", "expected_id", "actual_id", "expected_weight", "actual_weight",
    "weight_ulp", "clause", "verdict", "reason", "tie_group_size", "straddles_cutoff", "nan_count",
]  # fmt: skip

VERDICT_WORD = {"pass": "PASS", "fail": "FAIL", "unavailable": "UNAVAILABLE", "error": "ERROR", "interrupted": "INTERRUPTED"}


def cells_frame(cells: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(cells, columns=CELL_COLUMNS)


def _md_table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "_none_\n"
    cols = list(frame.columns)
    lines = ["| " + " | ".join(map(str, cols)) + " |", "|" + "---|" * len(cols)]
    for _, row in frame.iterrows():
        lines.append("| " + " | ".join(str(row[c]).replace("|", "\\|") for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _fmt(value) -> str:
    return f"{value:.8g}" if isinstance(value, float) else str(value)


def _side_by_side(d: dict) -> str:
    e, a = d.get("expected_ids") or [], d.get("actual_ids") or []
    we, wa = d.get("expected_weights") or [], d.get("actual_weights") or []

    def at(seq, j):
        return _fmt(seq[j]) if j < len(seq) else ""

    lines = [f"{'col':>4} {'exp id':>7} {'act id':>7} {'exp weight':>15} {'act weight':>15}"]
    for j in range(max(len(e), len(a))):
        differs = j >= len(e) or j >= len(a) or e[j] != a[j]
        lines.append(f"{j:>4} {at(e, j):>7} {at(a, j):>7} {at(we, j):>15} {at(wa, j):>15}{'  <-' if differs else ''}")
    return "```\n" + "\n".join(lines) + "\n```\n"


def render_markdown(result: CheckResult) -> str:
    s = result.summary
    verdict = VERDICT_WORD.get(s["status"], s["status"].upper())
    against = f" against `{s['against']}`" if s.get("against") else ""
    out = [f"# {verdict}: `{s['candidate']}`{against} under contract `{s['contract']}`\n"]
    if s["status"] == "unavailable":
        out.append(f"Not run on this host: {s.get('reason', '')}\n")
        return "\n".join(out)
    rate = f"{s['rows_per_s']:,.0f} rows/s" if s.get("rows_per_s") else ""
    out.append(
        f"- rows checked: {s['rows_checked']:,}; skipped (not covered): {s['rows_skipped']:,}; {rate}\n"
        f"- unexpected mismatched rows: **{s['mismatched_rows']:,}**; near ties (spec §9, not failures): {s['near_tie_rows']:,}; "
        f"declared deviations seen: {s['expected_deviation_rows']:,}\n"
        f"- weights: {s['exact_rows']:,} rows bit-exact, {s['within_tolerance_rows']:,} within tolerance; "
        f"max weight distance on equal ids {s['max_weight_ulp']:g} ULP\n"
        f"- device: {s['device']} ({(s.get('environment') or {}).get('device_name', '')}); seed {s['seed']}\n"
    )
    sides = s.get("against_sides")
    if sides and any(sides.values()):
        out.append(
            f"\n- where `{s['candidate']}` and `{s['against']}` differ, the oracle agrees with `{s['candidate']}` on "
            f"{sides['candidate']:,} rows, with `{s['against']}` on {sides['against']:,}, with neither on {sides['neither']:,}\n"
        )
    if s.get("interrupted"):
        out.append(f"\n**Interrupted** ({s['interrupted']}): the counts cover the rows checked before the stop.\n")
    det = s.get("determinism") or {}
    if det.get("repeat", 1) > 1 or det.get("rows_differing"):
        how = f"each case run {det.get('repeat')} times" + (" and once through a CUDA graph replay" if det.get("graph_replay") else "")
        verdict = "all identical" if not det.get("rows_differing") else f"**{det['rows_differing']:,} rows differed** in {det.get('cases', 0)} cases"
        out.append(f"\n- determinism: {how}; {verdict}\n")
    if s.get("error"):
        out.append(f"\nFirst error, in case `{s['error']['case']}`:\n\n```\n{s['error']['traceback']}\n```\n")
    out.append("\n## Clauses\n")
    clause_rows = [{"clause": k, "unexpected rows": v} for k, v in s["clauses"].items()]
    out.append(_md_table(pd.DataFrame(clause_rows)))
    if s["expected_deviations"]:
        out.append("\n## Declared deviations\n")
        dev = [
            {"clause": k, "rows": v["rows"], "observed": "yes" if v["observed"] else "NO (no longer happens?)", "why": v["reason"]}
            for k, v in s["expected_deviations"].items()
        ]
        out.append(_md_table(pd.DataFrame(dev)))
    out.append("\n## Families\n")
    fam = [
        {
            "family": name,
            "rows": f["rows"],
            "skipped": f["rows_skipped"],
            "mismatched": f["mismatched_rows"],
            "near ties": f["near_tie_rows"],
            "declared": f["expected_rows"],
            "clauses": ", ".join(f"{k}: {v}" for k, v in f["clauses"].items()) or "",
        }
        for name, f in s["families"].items()
    ]
    out.append(_md_table(pd.DataFrame(fam)))
    if result.details:
        out.append("\n## First mismatches per clause (tie-straddling cases first)\n")
        for d in result.details:
            out.append(
                f"\n### `{d['clause']}` ({d['verdict']}): family `{d['family']}`, case `{d['case']}`, row {d['row']}\n\n"
                f"{d['reason']}. Tie group at the cutoff: {d.get('tie_group_size')} experts"
                f"{' (straddles the cutoff)' if d.get('straddles_cutoff') else ''}; NaN in row: {d.get('nan_count')}; "
                f"renormalize={d.get('renormalize')}, routed_scaling_factor={d.get('routed_scaling_factor')}"
                f"{'; the oracle agrees with: ' + d['oracle_agrees_with'] if d.get('oracle_agrees_with') else ''}.\n\n"
            )
            if d.get("expected_ids") is not None:
                out.append(_side_by_side(d))
            out.append(f"\nReplay: `{d['replay']}`\n")
    out.append(f"\nCommand: `{s['command']}`\n")
    return "".join(x if x.endswith("\n") else x + "\n" for x in out)


def write_bundle(out_dir: Path, result: CheckResult) -> Path:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    frame = cells_frame(result.cells)
    write_atomic(out_dir / "mismatches.csv", lambda p: frame.to_csv(p, index=False))
    if importlib.util.find_spec("pyarrow") is not None:
        write_atomic(out_dir / "mismatches.parquet", lambda p: frame.to_parquet(p, index=False))
    write_text(out_dir / "report.md", render_markdown(result))
    write_json(out_dir / "details.json", result.details)
    # summary.json after the data files: its presence means they are complete.
    write_json(out_dir / "summary.json", result.summary)
    write_html(out_dir)  # derived from the files above
    return out_dir
