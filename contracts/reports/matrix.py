"""The agreement matrix as a person reads it: the terminal table, the heatmap PNG and the HTML page.

All three are made from a ``MatrixReport`` alone (``matrix.json``), so a
bundle can be re-rendered anywhere. Cells are the rows on which two
candidates route differently (``MatrixPair.rows_differing``), of the rows
both answered; the last column is each candidate against the oracle.

The page (``templates/matrix.html.j2``, jinja2 with autoescaping on) loads
nothing: CSS inline, the heatmap a base64 data URI, no script, and a
Content-Security-Policy that forbids any other source. Every name, reason
and message from a candidate is escaped by the template engine.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path

from .matrix_schema import MatrixPair, MatrixReport
from .schema import Status
from .text import clean

__all__ = ["CAUSES_SHOWN", "HEATMAP", "PAGE", "TABLE", "cause_rows", "cell_text", "grid", "render_heatmap_png", "render_matrix_html",
           "render_causes_table", "render_matrix_table"]

CAUSES_SHOWN = 6  # causes per pair in the console table (every unexplained one besides; matrix.json holds them all)

HEATMAP, PAGE, TABLE = "matrix.png", "matrix.html", "matrix.txt"
TEMPLATES = Path(__file__).resolve().parent / "templates"
CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"


def _oracle_label(report: MatrixReport) -> str:
    return f"oracle ({report.contract})"


def grid(report: MatrixReport) -> tuple[list[str], list[str], list[list[MatrixPair | None]]]:
    """Row names (the candidates), column names (the candidates, then the oracle) and the pair of each cell (None on the diagonal)."""
    names = [m.name for m in report.candidates]
    cells = []
    for a in names:
        line = [None if a == b else report.pair(a, b) for b in names]
        line.append(report.against_oracle(a))
        cells.append(line)
    return names, [*names, _oracle_label(report)], cells


def _percent(part: int, whole: int) -> str:
    if not whole:
        return "-"
    share = 100.0 * part / whole
    if part and share < 0.1:
        return "<0.1%"
    return f"{share:.1f}%" if share < 10 else f"{share:.0f}%"


def cell_text(p: MatrixPair | None) -> str:
    if p is None:
        return "-"
    if not p.rows_compared:
        return "n/a"
    return f"{p.rows_differing:,} ({_percent(p.rows_differing, p.rows_compared)})"


def _status_note(report: MatrixReport, name: str) -> str:
    m = report.member(name)
    if m.reason:
        return clean(m.reason)
    notes = []
    if m.error:
        notes.append(clean(f"{m.error.kind}: {m.error.message}")[:140])
    if m.rows_skipped:
        notes.append(f"skipped {m.rows_skipped:,} rows (not covered)")
    if m.rows_invalid:
        notes.append(f"{m.rows_invalid:,} rows with no valid answer")
    vs = report.against_oracle(name)
    if vs is not None and vs.rows_differing:
        causes = sorted(vs.causes.items(), key=lambda kv: -kv[1])
        notes.append(", ".join(f"{k}:{v:,}" + ("*" if k in m.declared else "") for k, v in causes))
    return "; ".join(notes)


def render_matrix_table(report: MatrixReport) -> str:
    """The terminal table: rows differing per pair, then each candidate's status and causes against the oracle."""
    import pandas as pd

    rows, columns, cells = grid(report)
    table = pd.DataFrame([[cell_text(p) for p in line] for line in cells], index=[clean(n) for n in rows], columns=[clean(c) for c in columns])
    status = pd.DataFrame(
        [{"candidate": clean(m.name), "status": m.status.word + (" (quick)" if report.quick else ""), "answered": m.rows_answered, "skipped": m.rows_skipped,
          "raised": m.rows_raised, "note (vs the oracle; * declared)": _status_note(report, m.name)} for m in report.candidates]
    )  # fmt: skip
    head = ("a quick look (matrix --quick: a thin sample of the full plan; not a full check): " if report.quick else "") + (
            f"rows routed differently, of the rows both answered ({report.rows_run:,} rows, contract {report.contract}, "
            f"device {report.device}, {report.experts}/{report.topk}): ids exactly, weights to rtol {report.weight_rtol:g} / "
            f"atol {report.weight_atol:g}, order per the contract; near ties included")  # fmt: skip
    parts = [head, table.to_string() if rows else "(no candidates)", "", status.to_string(index=False) if rows else ""]
    causes = render_causes_table(report)
    if causes:
        parts += ["", causes]
    if report.split is not None:
        s = report.split
        parts += ["", f"prefill/decode: {clean(s.below)} below {s.split} rows per batch, {clean(s.above)} at {s.split} or more: "
                      f"{cell_text(s.pair)} of {s.pair.rows_compared:,} rows routed differently"
                      + (f" ({_top_causes(s.pair)})" if s.pair.rows_differing else "")]  # fmt: skip
        for m in s.members:
            if m.status in (Status.UNAVAILABLE, Status.ERROR):
                parts.append(f"  {clean(m.name)}: {m.status.word}: {clean(m.reason or (m.error.message if m.error else ''))}")
    if report.interrupted:
        parts += ["", f"interrupted ({report.interrupted}): the counts cover the cases that ran"]
    return "\n".join(parts).rstrip()


def _cause_words(p: MatrixPair, d) -> str:
    """The cause of a line; where both sides depart, each side's, named."""
    return f"{p.a}: {d.a} | {p.b}: {d.b}" if d.departs == "both" else d.words


def cause_rows(p: MatrixPair, shown: int | None = CAUSES_SHOWN) -> list[dict]:
    """The pair's rows routed differently, a line per cause (``MatrixPair.departures``): the most rows first, up to
    ``shown`` and every unexplained one, then one line for the rest."""
    lines, rest, rest_causes = [], 0, 0
    for i, d in enumerate(p.departures):
        if shown is None or i < shown or d.unexplained:
            side = {"a": p.a, "b": p.b, "both": "both", "neither": "neither"}[d.departs]
            lines.append({"rows": d.rows, "departs": side, "cause": _cause_words(p, d), "unexplained": d.unexplained})
        else:
            rest, rest_causes = rest + d.rows, rest_causes + 1
    if rest:
        lines.append({"rows": rest, "departs": "", "cause": f"{rest_causes} more cause{'s' if rest_causes > 1 else ''} (matrix.json: departures)",
                      "unexplained": False})  # fmt: skip
    return lines


def render_causes_table(report: MatrixReport) -> str:
    """One table for the matrix: for each pair of candidates, the rows it routes differently by the side that departs
    from the contract and how (the trainer's bf16 score rounding, tie order, NaN, groups, ...; unexplained where
    nothing known explains it). Against the oracle the same lines are in matrix.json and the page."""
    records = []
    for p in report.pairs:
        if not p.rows_differing:
            continue
        for i, line in enumerate(cause_rows(p)):
            records.append((clean(p.label) if i == 0 else "", f"{line['rows']:,}", clean(line["departs"]), clean(line["cause"])))
    if not records:
        return ""
    head = (f"why they differ: each pair's rows routed differently, by the side that departs from {report.contract} and how "
            "(its own contract's fields, the diagnosis' variants, its declared clauses; unexplained: no known cause)")  # fmt: skip
    header = ("pair", "rows", "departs", "cause")
    widths = [max(len(r[i]) for r in (*records, header)) for i in range(3)]

    def line(r) -> str:
        return f"{r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip()

    return "\n".join([head, line(header), *(line(r) for r in records)])


def _top_causes(p: MatrixPair, n: int = 4) -> str:
    return ", ".join(f"{k}:{v:,}" for k, v in sorted(p.causes.items(), key=lambda kv: -kv[1])[:n])


def render_heatmap_png(report: MatrixReport) -> bytes:
    """Rows differing per pair as a heatmap (share of the rows compared; the count in each cell); PNG bytes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import PowerNorm

    rows, columns, cells = grid(report)
    n_rows, n_cols = max(len(rows), 1), len(columns)
    share = np.full((n_rows, n_cols), np.nan)
    for i, line in enumerate(cells):
        for j, p in enumerate(line):
            if p is not None and p.rows_compared:
                share[i, j] = p.rows_differing / p.rows_compared
    fig, ax = plt.subplots(figsize=(2.2 + 1.25 * n_cols, 1.6 + 0.62 * n_rows), dpi=110)
    cmap = matplotlib.colormaps["Reds"].with_extremes(bad="#eef0f2")
    image = ax.imshow(np.ma.masked_invalid(share), cmap=cmap, norm=PowerNorm(gamma=0.4, vmin=0.0, vmax=1.0), aspect="auto")
    for i, line in enumerate(cells):
        for j, p in enumerate(line):
            text = "-" if p is None else ("n/a" if not p.rows_compared else f"{p.rows_differing:,}\n{_percent(p.rows_differing, p.rows_compared)}")
            dark = not math.isnan(share[i, j]) and share[i, j] > 0.3
            ax.text(j, i, text, ha="center", va="center", fontsize=8, color="white" if dark else "#1f2328")
    ax.set_xticks(range(n_cols), [clean(c) for c in columns], rotation=35, ha="right", fontsize=9)
    ax.set_yticks(range(len(rows)), [clean(r) for r in rows], fontsize=9)
    ax.axvline(n_cols - 1.5, color="#1f2328", linewidth=1.2)
    ax.set_title(f"rows routed differently ({report.contract}, {report.device}, {report.rows_run:,} rows)", fontsize=10)
    fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02, label="share of the rows compared")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    plt.close(fig)
    return buffer.getvalue()


def _shade(p: MatrixPair | None) -> str:
    """A cell's background: white at 0, deeper red with the share of rows differing (the heatmap's scale)."""
    if p is None or not p.rows_compared:
        return "#eef0f2"
    share = (p.rows_differing / p.rows_compared) ** 0.4
    g = int(round(255 - share * (255 - 60)))
    return f"rgb(255,{g},{g})" if p.rows_differing else "#e6f4ea"


def _example_rows(ex, rtol: float, atol: float) -> list[dict]:
    k = max(len(ex.a_ids), len(ex.b_ids))

    def at(values, i):
        return values[i] if values is not None and i < len(values) else None

    out = []
    for i in range(k):
        a_id, b_id = at(ex.a_ids, i), at(ex.b_ids, i)
        a_w, b_w = at(ex.a_weights, i), at(ex.b_weights, i)
        weight_differs = _weights_differ(a_w, b_w, rtol, atol) if a_id == b_id else False
        out.append({"slot": i, "a_id": a_id, "b_id": b_id, "o_id": at(ex.oracle_ids, i), "a_w": _weight(a_w), "b_w": _weight(b_w),
                    "o_w": _weight(at(ex.oracle_weights, i)), "id_differs": a_id != b_id, "weight_differs": weight_differs,
                    "a_missing": a_id not in ex.b_ids, "b_missing": b_id not in ex.a_ids})  # fmt: skip
    return out


def _weights_differ(a, b, rtol: float, atol: float) -> bool:
    if a is None or b is None:
        return a is not b
    if math.isnan(a) or math.isnan(b):
        return not (math.isnan(a) and math.isnan(b))
    return abs(a - b) > atol + rtol * abs(b)


def _weight(w) -> str:
    if w is None:
        return ""
    return "NaN" if isinstance(w, float) and math.isnan(w) else f"{w:.7g}"


def _pair_view(p: MatrixPair, anchor: str, declared: dict[str, str], report: MatrixReport) -> dict:
    return {
        "pair": p, "anchor": anchor, "share": _percent(p.rows_differing, p.rows_compared),
        "causes": sorted(p.causes.items(), key=lambda kv: -kv[1]), "declared": declared,
        "families": sorted(p.families.items(), key=lambda kv: -kv[1].rows_differing),
        "examples": [{"ex": ex, "slots": _example_rows(ex, report.weight_rtol, report.weight_atol)} for ex in p.examples],
        "not_compared": sorted(p.not_compared.items(), key=lambda kv: -kv[1]),
        "departures": cause_rows(p, None),
    }  # fmt: skip


def render_matrix_html(report: MatrixReport, *, heatmap_png: bytes | None = None) -> str:
    """``matrix.html``: one self-contained page."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True, undefined=jinja2.StrictUndefined,
                             trim_blocks=True, lstrip_blocks=True)  # fmt: skip
    rows, columns, cells = grid(report)
    anchors = {}
    for i, line in enumerate(cells):
        for j, p in enumerate(line):
            if p is not None and id(p) not in anchors:
                anchors[id(p)] = f"pair-{i}-{j}"
    members = {m.name: m for m in report.candidates}
    pair_views = [_pair_view(p, anchors[id(p)], {}, report) for p in report.pairs]
    oracle_views = [_pair_view(p, anchors[id(p)], members[p.a].declared, report) for p in report.oracle]
    grid_rows = [
        {"name": name, "cells": [{"pair": p, "text": cell_text(p), "shade": _shade(p), "anchor": anchors.get(id(p)) if p is not None else None}
                                 for p in line]}
        for name, line in zip(rows, cells)
    ]  # fmt: skip
    split = None
    if report.split is not None:
        s = report.split
        split = {"view": s, "pair": _pair_view(s.pair, "split-pair", {}, report)}
    template = env.get_template("matrix.html.j2")
    return template.render(
        report=report, columns=columns, grid_rows=grid_rows, pairs=pair_views, oracle_pairs=oracle_views, split=split,
        members=report.candidates, notes={m.name: _status_note(report, m.name) for m in report.candidates}, csp=CSP,
        heatmap=base64.b64encode(heatmap_png).decode("ascii") if heatmap_png else None,
        oracle_label=_oracle_label(report), environment=sorted((report.environment or {}).items()),
    )  # fmt: skip
