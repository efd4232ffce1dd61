"""``report.html`` for a check bundle: one self-contained page a person can read.

Reads what the bundle already holds (``summary.json``, ``details.json``,
``mismatches.parquet`` or ``.csv``) and, when a benchmark ran, ``bench.json``
and ``bench.png`` (from ``bench_dir``, else from the bundle itself). Writes
``report.html`` next to them, atomically.

The page loads nothing: CSS is inline, the plot is a base64 data URI, the one
script (copy buttons) is inline, and a Content-Security-Policy forbids any
other source. Every string that comes from a candidate, its name, a reason or
an error message is escaped with ``html.escape``.

Order: the verdict; the clause table; a family x clause heatmap of rows; the
first mismatches of each clause side by side (differing slots highlighted,
the cutoff slot ``topk - 1`` and the tie group at the cutoff marked); the
replay commands; the declared deviations; the benchmark; the environment.

Command line: ``python -m contracts.html_report BUNDLE_DIR [--bench BENCH_DIR]``.
"""

from __future__ import annotations

import base64
import html
import json
import math
import struct
from pathlib import Path

from ._atomic import write_text
from .schema import CheckResult, Status, to_json

__all__ = ["render_bundle_html", "render_html", "write_html"]

VERDICT_WORD = {s.value: s.word for s in Status}
EXAMPLES_OPEN_PER_CLAUSE = 1

CSS = """
:root { --pass:#1a7f37; --fail:#cf222e; --unavailable:#6e7781; --error:#bc4c00; --ink:#1f2328; --muted:#59636e;
        --line:#d1d9e0; --soft:#f6f8fa; --diff:#ffd7d5; --wdiff:#fff1c2; --decl:#fbe6b4; }
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--ink); margin: 0; background: #fff; }
main { max-width: 1200px; margin: 0 auto; padding: 0 20px 40px; }
code, pre, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace; font-size: 13px; }
h2 { border-bottom: 1px solid var(--line); padding-bottom: 4px; margin-top: 34px; }
h3 { margin: 22px 0 6px; }
.verdict { color: #fff; padding: 22px 28px; margin: 0 0 18px; }
.verdict.pass { background: var(--pass); } .verdict.fail { background: var(--fail); }
.verdict.unavailable { background: var(--unavailable); } .verdict.error { background: var(--error); }
.verdict .word { font-size: 56px; font-weight: 800; letter-spacing: 2px; line-height: 1; }
.verdict .what { font-size: 20px; margin-top: 8px; word-break: break-word; }
.verdict .line { font-size: 16px; margin-top: 4px; opacity: .95; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; min-width: 140px; background: var(--soft); }
.card .n { font-size: 20px; font-weight: 700; } .card .k { color: var(--muted); font-size: 12px; }
.card.bad { border-color: var(--fail); } .card.bad .n { color: var(--fail); }
table { border-collapse: collapse; margin: 8px 0; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.failing td { background: #ffebe9; }
.tag { display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600; color: #fff; }
.tag.ok { background: var(--pass); } .tag.fail { background: var(--fail); } .tag.declared { background: #9a6700; }
.tag.near { background: #0969da; } .tag.muted { background: var(--unavailable); }
.heat td { text-align: center; min-width: 54px; }
.heat td.fam, .heat th.fam { text-align: left; white-space: nowrap; }
.heat th.rot { writing-mode: vertical-rl; transform: rotate(180deg); white-space: nowrap; font-weight: 600; }
.heat td .d { display: block; font-size: 11px; color: #7d4e00; }
.heat td.zero { color: #b0b7be; }
.sbs td { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 13px; text-align: right; }
.sbs td.slot { color: var(--muted); }
.sbs td.diff { background: var(--diff); font-weight: 700; }
.sbs td.wdiff { background: var(--wdiff); }
.sbs td.missing, .sbs td.extra { text-decoration: underline dotted 2px; }
.sbs tr.cutoff td { border-bottom: 3px solid var(--ink); }
.sbs td.mark { text-align: left; font-family: inherit; font-size: 12px; color: var(--muted); white-space: nowrap; }
.sbs tr.cutoff td.mark { color: var(--ink); font-weight: 700; }
details.example { border: 1px solid var(--line); border-radius: 6px; padding: 6px 12px; margin: 8px 0; }
details.example > summary { cursor: pointer; font-weight: 600; }
.meta { color: var(--muted); margin: 6px 0; }
.cmd { display: flex; gap: 8px; align-items: flex-start; margin: 6px 0; }
.cmd pre { margin: 0; flex: 1; background: var(--soft); border: 1px solid var(--line); border-radius: 6px;
           padding: 6px 10px; white-space: pre-wrap; word-break: break-all; user-select: all; }
button.copy { font: inherit; font-size: 12px; padding: 4px 10px; border: 1px solid var(--line); border-radius: 6px;
              background: #fff; cursor: pointer; }
.legend span { display: inline-block; padding: 0 8px; margin-right: 8px; border: 1px solid var(--line); }
.note { color: var(--muted); font-size: 13px; }
img.plot { max-width: 100%; border: 1px solid var(--line); }
pre.tb { background: #fff8f6; border: 1px solid #ffcecb; padding: 8px; white-space: pre-wrap; }
"""

SCRIPT = """
document.addEventListener('click', function (event) {
  var button = event.target.closest ? event.target.closest('button.copy') : null;
  if (!button) return;
  var source = document.getElementById(button.getAttribute('data-copy'));
  if (!source) return;
  var text = source.textContent;
  function done(word) { button.textContent = word; setTimeout(function () { button.textContent = 'copy'; }, 1200); }
  function fallback() {
    try {
      var range = document.createRange(); range.selectNodeContents(source);
      var sel = window.getSelection(); sel.removeAllRanges(); sel.addRange(range);
      done(document.execCommand('copy') ? 'copied' : 'selected');
    } catch (e) { done('selected'); }
  }
  try {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(function () { done('copied'); }, fallback);
    } else { fallback(); }
  } catch (e) { fallback(); }
});
"""

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def e(value) -> str:
    """Escape anything for HTML text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def _int(value) -> str:
    return f"{value:,}" if isinstance(value, int) else e(value if value is not None else "-")


def _weight(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else f"{value:.8g}"
    return e(value)


def _ordered_bits(x: float) -> int:
    i = struct.unpack("<i", struct.pack("<f", x))[0]
    return -(i & 0x7FFFFFFF) if i < 0 else i


def ulp_distance(a, b) -> str:
    """fp32 ULP distance as text ("" if either is missing, "NaN" when exactly one is NaN)."""
    if not isinstance(a, (int, float)) or not isinstance(b, (int, float)):
        return ""
    if math.isnan(a) or math.isnan(b):
        return "0" if math.isnan(a) and math.isnan(b) else "NaN"
    if math.isinf(a) or math.isinf(b):
        return "0" if a == b else "inf"
    try:
        return str(abs(_ordered_bits(a) - _ordered_bits(b)))
    except (OverflowError, struct.error):
        return "?"


def _same_weight(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


# ---------------------------------------------------------------- inputs


def _read_json(path: Path):
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def declared_rows_by_cell(cells) -> dict[tuple[str, str], int]:
    """(family, clause) -> distinct rows with a declared deviation, from the recorded mismatch cells."""
    if cells is None or len(cells) == 0:
        return {}
    declared = cells[cells["verdict"] == "expected"].drop_duplicates(["case", "row", "clause"])
    return {(str(f), str(c)): int(n) for (f, c), n in declared.groupby(["family", "clause"]).size().items()}


def _find_bench(bundle_dir: Path | None, bench_dir: Path | None) -> tuple[dict | None, bytes | None]:
    for where in [Path(p) for p in (bench_dir, bundle_dir) if p is not None]:
        data = _read_json(where / "bench.json")
        png = (where / "bench.png").read_bytes() if (where / "bench.png").is_file() else None
        if data is not None or png is not None:
            return data, png
    return None, None


# ---------------------------------------------------------------- sections


class _Ids:
    def __init__(self):
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


def _command_block(text: str, ids: _Ids) -> str:
    ident = ids("cmd")
    return (
        f'<div class="cmd"><pre><code id="{ident}">{e(text)}</code></pre>'
        f'<button class="copy" type="button" data-copy="{ident}" title="copy to the clipboard">copy</button></div>'
    )


def _verdict(s: dict) -> str:
    status = s.get("status", "error")
    word = VERDICT_WORD.get(status, str(status).upper())
    against = f" against {s['against']}" if s.get("against") else ""
    env = s.get("environment") or {}
    device = f"{s.get('device', '')}" + (f" ({env['device_name']})" if env.get("device_name") else "")
    what = f"{s.get('candidate', '?')}{against} under contract {s.get('contract', '?')} on {device}"
    if status == "unavailable":
        line = f"Not run on this host: {s.get('reason', '')}"
    elif status == "error":
        line = "The candidate raised an error (see below)"
    else:
        line = (
            f"{s.get('mismatched_rows', 0):,} unexpected mismatched rows of {s.get('rows_checked', 0):,} checked"
            + (f"; {s.get('rows_skipped', 0):,} not covered" if s.get("rows_skipped") else "")
        )
    cls = status if status in VERDICT_WORD else "error"
    return (
        f'<header id="verdict" class="verdict {e(cls)}"><div class="word">{e(word)}</div>'
        f'<div class="what">{e(what)}</div><div class="line">{e(line)}</div></header>'
    )


def _cards(s: dict) -> str:
    items = [
        ("rows checked", s.get("rows_checked"), False),
        ("rows not covered (skipped)", s.get("rows_skipped"), False),
        ("unexpected mismatched rows", s.get("mismatched_rows"), bool(s.get("mismatched_rows"))),
        ("near ties (spec section 9, not failures)", s.get("near_tie_rows"), False),
        ("rows with a declared deviation", s.get("expected_deviation_rows"), False),
        ("rows bit-exact", s.get("exact_rows"), False),
        ("rows within tolerance", s.get("within_tolerance_rows"), False),
        ("max weight distance, ULP", s.get("max_weight_ulp"), False),
        ("rows per second", f"{s['rows_per_s']:,.0f}" if s.get("rows_per_s") else None, False),
    ]
    cards = "".join(
        f'<div class="card{" bad" if bad else ""}"><div class="n">{_int(v) if not isinstance(v, float) else f"{v:g}"}</div>'
        f'<div class="k">{e(k)}</div></div>'
        for k, v, bad in items
        if v is not None
    )
    return f'<section id="figures" class="cards">{cards}</section>'


def _clause_table(s: dict) -> str:
    clauses = dict(s.get("clauses") or {})
    deviations = s.get("expected_deviations") or {}
    for name in deviations:
        clauses.setdefault(name, 0)
    if not clauses:
        return '<section id="clauses"><h2>Clauses</h2><p class="note">No clause was evaluated.</p></section>'
    rows = []
    for name, unexpected in clauses.items():
        dev = deviations.get(name)
        if unexpected:
            state = '<span class="tag fail">FAIL</span>'
        elif dev and dev.get("rows"):
            state = '<span class="tag declared">declared</span>'
        else:
            state = '<span class="tag ok">OK</span>'
        why = e(dev["reason"]) if dev else ""
        declared = _int(dev.get("rows", 0)) if dev else ""
        rows.append(
            f'<tr class="{"failing" if unexpected else ""}"><td class="mono">{e(name)}</td><td>{state}</td>'
            f'<td class="num">{_int(unexpected)}</td><td class="num">{declared}</td><td>{why}</td></tr>'
        )
    return (
        '<section id="clauses"><h2>Clauses</h2><table id="clause-table"><thead><tr><th>clause</th><th>state</th>'
        '<th class="num">unexpected rows</th><th class="num">declared-deviation rows</th><th>declared deviation</th>'
        f'</tr></thead><tbody>{"".join(rows)}</tbody></table></section>'
    )


def _shade(count: int, top: int) -> str:
    if not count:
        return ""
    strength = 0.18 + 0.72 * (math.log1p(count) / math.log1p(max(top, 1)))
    text = "#fff" if strength > 0.55 else "var(--ink)"
    return f' style="background: rgba(207, 34, 46, {strength:.2f}); color: {text}"'


def _heatmap(s: dict, declared: dict[tuple[str, str], int]) -> str:
    families = s.get("families") or {}
    if not families:
        return ""
    clauses = list((s.get("clauses") or {}).keys())
    for _, clause in declared:
        if clause not in clauses:
            clauses.append(clause)
    top = max([v for f in families.values() for v in (f.get("clauses") or {}).values()] + [1])
    head = "".join(f'<th class="rot">{e(c)}</th>' for c in clauses)
    body = []
    for fam, f in families.items():
        cells = []
        for c in clauses:
            bad = int((f.get("clauses") or {}).get(c, 0))
            dec = declared.get((fam, c), 0)
            title = f"{fam} / {c}: {bad} unexpected rows, {dec} declared-deviation rows (recorded)"
            if bad:
                inner = f"<b>{bad:,}</b>" + (f'<span class="d">+{dec:,} decl.</span>' if dec else "")
                cells.append(f'<td title="{e(title)}"{_shade(bad, top)}>{inner}</td>')
            elif dec:
                cells.append(f'<td title="{e(title)}" style="background: var(--decl)"><span class="d">{dec:,} decl.</span></td>')
            else:
                cells.append(f'<td class="zero" title="{e(title)}">0</td>')
        near = f.get("near_tie_rows", 0)
        body.append(
            f'<tr><td class="fam mono">{e(fam)}</td><td class="num">{_int(f.get("rows", 0))}</td>'
            f'<td class="num">{_int(f.get("rows_skipped", 0))}</td><td class="num">{_int(near)}</td>{"".join(cells)}</tr>'
        )
    recorded = s.get("cells_recorded")
    note = (
        "Cell: rows with an unexpected mismatch attributed to that clause (red, darker = more). "
        "'decl.': rows showing a declared deviation of that clause (amber), counted from the recorded mismatch cells"
        + (f" ({recorded:,} cells recorded; the runner caps that number, so on large runs these counts are a floor)"
           if isinstance(recorded, int) else "")
        + "."
    )
    return (
        '<section id="heatmap"><h2>Where: case family x clause</h2>'
        '<table class="heat"><thead><tr><th class="fam">family</th><th class="rot">rows</th><th class="rot">not covered</th>'
        f'<th class="rot">near ties</th>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
        f'<p class="note">{e(note)}</p></section>'
    )


def _side_by_side(d: dict) -> str:
    exp_ids, act_ids = d.get("expected_ids") or [], d.get("actual_ids") or []
    exp_w, act_w = d.get("expected_weights") or [], d.get("actual_weights") or []
    k = max(len(exp_ids), len(act_ids))
    cutoff = len(exp_ids) - 1 if exp_ids else k - 1
    exp_set, act_set = set(exp_ids), set(act_ids)
    tie = d.get("tie_group_size")
    straddles = bool(d.get("straddles_cutoff"))

    def at(seq, j):
        return seq[j] if j < len(seq) else None

    rows = []
    for j in range(k):
        ei, ai, ew, aw = at(exp_ids, j), at(act_ids, j), at(exp_w, j), at(act_w, j)
        id_cls = "diff" if ei != ai else ""
        w_cls = "wdiff" if not _same_weight(ew, aw) else ""
        ecls = f"{id_cls} missing".strip() if ei is not None and ei not in act_set else id_cls
        acls = f"{id_cls} extra".strip() if ai is not None and ai not in exp_set else id_cls
        etitle = ' title="not in the actual top-k"' if "missing" in ecls else ""
        atitle = ' title="not in the expected top-k"' if "extra" in acls else ""
        mark = ""
        if j == cutoff:
            mark = "cutoff (slot topk-1)"
            if tie and tie > 1:
                mark += f": tie group of {tie}" + (" straddles it" if straddles else "")
        rows.append(
            f'<tr class="{"cutoff" if j == cutoff else ""}"><td class="slot">{j}</td>'
            f'<td class="{ecls}"{etitle}>{e(ei if ei is not None else "")}</td>'
            f'<td class="{acls}"{atitle}>{e(ai if ai is not None else "")}</td>'
            f'<td class="{w_cls}">{_weight(ew)}</td><td class="{w_cls}">{_weight(aw)}</td>'
            f'<td class="{w_cls}">{e(ulp_distance(ew, aw))}</td><td class="mark">{e(mark)}</td></tr>'
        )
    return (
        '<table class="sbs"><thead><tr><th>slot</th><th>expected id</th><th>actual id</th><th>expected weight</th>'
        f'<th>actual weight</th><th>ULP</th><th></th></tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _examples(details: list[dict], ids: _Ids) -> str:
    if not details:
        return ""
    by_clause: dict[str, list[dict]] = {}
    for d in details:
        by_clause.setdefault(str(d.get("clause")), []).append(d)
    parts = [
        '<section id="examples"><h2>First mismatches per clause</h2>'
        '<p class="note legend"><span style="background: var(--diff)">id differs</span>'
        '<span style="background: var(--wdiff)">weight differs</span>'
        '<span style="text-decoration: underline dotted 2px">id not in the other top-k</span>'
        "thick rule: the cutoff slot (topk-1); the tie group is the set of experts whose ranking value equals "
        "the value at the cutoff.</p>"
    ]
    tag_for = {"mismatch": "fail", "expected": "declared", "near_tie": "near"}
    order = {"mismatch": 0, "near_tie": 1, "expected": 2}  # failures first

    def rank(item):
        return min(order.get(str(d.get("verdict")), 0) for d in item[1])

    for clause, items in sorted(by_clause.items(), key=rank):
        verdicts = sorted({str(d.get("verdict")) for d in items})
        tags = "".join(f' <span class="tag {tag_for.get(v, "muted")}">{e(v)}</span>' for v in verdicts)
        parts.append(f'<h3 class="mono">{e(clause)}{tags}</h3>')
        for i, d in enumerate(items):
            tie = d.get("tie_group_size")
            where = f"family {d.get('family')}, case {d.get('case')}, row {d.get('row')}"
            meta = (
                f"Tie group at the cutoff: {tie} experts"
                + (" (straddles the cutoff)" if d.get("straddles_cutoff") else "")
                + f"; NaN in row: {d.get('nan_count')}; renormalize={d.get('renormalize')}, "
                f"routed_scaling_factor={d.get('routed_scaling_factor')}"
                + (f"; the oracle agrees with: {d['oracle_agrees_with']}" if d.get("oracle_agrees_with") else "")
            )
            body = _side_by_side(d) if d.get("expected_ids") is not None or d.get("actual_ids") is not None else ""
            replay = _command_block(d["replay"], ids) if d.get("replay") else ""
            parts.append(
                f'<details class="example"{" open" if i < EXAMPLES_OPEN_PER_CLAUSE else ""}>'
                f"<summary>{e(where)}: {e(d.get('reason'))}</summary>"
                f'<p class="meta">{e(meta)}</p>{body}{replay}</details>'
            )
    parts.append("</section>")
    return "".join(parts)


def _replays(s: dict, details: list[dict], ids: _Ids) -> str:
    blocks = []
    if s.get("command"):
        blocks.append(f"<h3>This run</h3>{_command_block(s['command'], ids)}")
    seen, rows = set(), []
    for d in details:
        cmd = d.get("replay")
        if cmd and cmd not in seen:
            seen.add(cmd)
            rows.append(f'<p class="meta mono">{e(d.get("clause"))}, {e(d.get("case"))}, row {e(d.get("row"))}</p>{_command_block(cmd, ids)}')
    if rows:
        blocks.append("<h3>Each example above</h3>" + "".join(rows))
    if not blocks:
        return ""
    return '<section id="replay"><h2>Replay commands</h2>' + "".join(blocks) + "</section>"


def _deviations(s: dict) -> str:
    deviations = s.get("expected_deviations") or {}
    if not deviations:
        return '<section id="deviations"><h2>Declared deviations</h2><p class="note">None declared.</p></section>'
    rows = "".join(
        f'<tr><td class="mono">{e(name)}</td><td class="num">{_int(v.get("rows", 0))}</td>'
        f'<td>{"yes" if v.get("observed") else "<b>no</b> (no longer happens?)"}</td><td>{e(v.get("reason"))}</td></tr>'
        for name, v in deviations.items()
    )
    return (
        '<section id="deviations"><h2>Declared deviations</h2><p class="note">Differences the candidate declares from its '
        "contract: reported, never failing a run.</p><table><thead><tr><th>clause</th><th class=\"num\">rows</th>"
        f"<th>observed</th><th>why</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def _bench(bench: dict | None, png: bytes | None) -> str:
    if bench is None and png is None:
        return ""
    parts = ['<section id="bench"><h2>Benchmark</h2>']
    if bench:
        method = bench.get("method") or {}
        env = bench.get("environment") or {}
        parts.append(
            f'<p><b>{e(method.get("timer"))}</b> on {e(env.get("device_name") or bench.get("device"))}; '
            f"E={e(method.get('experts'))}, top-{e(method.get('topk'))}, {e(method.get('dtype'))} logits, "
            f"{e(method.get('bias_dtype'))} bias.</p><p class=\"note\">{e(method.get('description'))} "
            f"{e(method.get('inputs'))}.</p>"
        )
    if png:
        data = base64.b64encode(png).decode("ascii")
        parts.append(f'<img class="plot" alt="latency per launch against M" src="data:image/png;base64,{data}">')
    if bench:
        parts.append(_bench_table(bench))
    parts.append("</section>")
    return "".join(parts)


def _bench_table(bench: dict) -> str:
    candidates = [c for c in bench.get("candidates") or [] if c.get("status") == "ok"]
    out = []
    if candidates:
        base = candidates[0]
        base_t = {p["m"]: p["median_us"] for p in base.get("results", []) if p.get("status") == "timed"}
        head = "".join(f"<th class=\"num\">{e(c['name'])}</th>" for c in candidates)
        rows = []
        for m in bench.get("m") or []:
            cells = []
            for c in candidates:
                p = next((p for p in c.get("results", []) if p.get("m") == m), None)
                if not p or p.get("status") != "timed":
                    text = e(p.get("status") if p else "-")
                    title = f' title="{e(p.get("reason"))}"' if p and p.get("reason") else ""
                    cells.append(f'<td class="num"{title}>{text}</td>')
                    continue
                text = f"{p['median_us']:.2f}" + ("*" if p.get("timer") == "cuda-eager" else "")
                if c is not base and m in base_t:
                    text += f" ({p['median_us'] / base_t[m]:.2f}x)"
                cells.append(f'<td class="num">{e(text)}</td>')
            rows.append(f'<tr><td class="num">{e(m)}</td>{"".join(cells)}</tr>')
        out.append(
            f"<p class=\"note\">us per launch, median; (ratio) = time / {e(base['name'])}'s; * timed eagerly "
            "(not capturable in a CUDA graph).</p>"
            f'<table><thead><tr><th class="num">M</th>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        )
    missing = [c for c in bench.get("candidates") or [] if c.get("status") != "ok"]
    if missing:
        out.append("<p>Not timed on this host:</p><ul>" + "".join(f"<li><b>{e(c.get('name'))}</b>: {e(c.get('reason'))}</li>" for c in missing) + "</ul>")
    crossings = bench.get("crossovers") or []
    if crossings:
        out.append(
            "<p>Crossovers with the first candidate:</p><ul>"
            + "".join(
                f"<li>{e(x.get('candidate'))} and {e(x.get('baseline'))} near M={e(round(x.get('m', 0)))}; "
                f"{e(x.get('faster_above'))} faster above</li>"
                for x in crossings
            )
            + "</ul>"
        )
    if bench.get("command"):
        out.append(f'<p class="note mono">{e(bench["command"])}</p>')
    return "".join(out)


def _error(s: dict, ids: _Ids) -> str:
    err = s.get("error")
    if not err:
        return ""
    if not isinstance(err, dict):
        return f'<section id="error"><h2>First error</h2><pre class="tb">{e(err)}</pre></section>'
    kind = f" ({err['kind']})" if err.get("kind") else ""
    parts = [f'<section id="error"><h2>First error{e(kind)}</h2><p>In case <code>{e(err.get("case"))}</code>'
             + (f": {e(err['message'])}" if err.get("message") else "") + "</p>"]  # fmt: skip
    if err.get("traceback"):
        parts.append(f'<pre class="tb">{e(err["traceback"])}</pre>')
    if err.get("replay"):
        parts.append(_command_block(err["replay"], ids))
    parts.append("</section>")
    return "".join(parts)


def _environment(s: dict) -> str:
    env = dict(s.get("environment") or {})
    extra = {k: s.get(k) for k in ("seed", "duration_s", "shard", "schema_version") if s.get(k) is not None}
    items = {**env, **extra}
    if not items:
        return ""
    rows = "".join(f'<tr><th>{e(k)}</th><td class="mono">{e(v)}</td></tr>' for k, v in items.items())
    return f'<section id="environment"><h2>Environment</h2><table>{rows}</table></section>'


def render_html(summary: dict, details: list[dict] | None = None, *, declared: dict | None = None,
                bench: dict | None = None, bench_png: bytes | None = None) -> str:  # fmt: skip
    """The page as a string; ``write_html`` gathers the inputs from a bundle directory."""
    s, details, ids = summary, details or [], _Ids()
    status = s.get("status", "error")
    title = f"{VERDICT_WORD.get(status, str(status).upper())}: {s.get('candidate', '?')} ({s.get('contract', '?')})"
    if status == "unavailable":
        sections = [_replays(s, [], ids), _bench(bench, bench_png), _environment(s)]
    else:
        sections = [
            _cards(s), _error(s, ids), _clause_table(s), _heatmap(s, declared or {}), _examples(details, ids),
            _replays(s, details, ids), _deviations(s), _bench(bench, bench_png), _environment(s),
        ]  # fmt: skip
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{e(title)} - router contract report</title><style>{CSS}</style></head>"
        f'<body>{_verdict(s)}<main>{"".join(sections)}</main><script>{SCRIPT}</script></body></html>\n'
    )


def render_bundle_html(result: CheckResult, *, bundle_dir: Path | None = None, bench_dir: Path | None = None) -> str:
    """The page of a check result (a bench found in ``bench_dir`` or ``bundle_dir`` is shown too)."""
    summary = to_json(result.summary)
    details = [to_json(d) for d in result.details]
    declared = declared_rows_by_cell(result.cells) if result.summary.status is not Status.UNAVAILABLE else {}
    bench, png = _find_bench(bundle_dir, bench_dir)
    return render_html(summary, details, declared=declared, bench=bench, bench_png=png)


def write_html(bundle_dir: Path, bench_dir: Path | None = None) -> Path:
    """(Re)write ``bundle_dir/report.html`` from the bundle's files; return its path."""
    from .bundle import open_check

    bundle = open_check(Path(bundle_dir))
    result = CheckResult(bundle.summary, bundle.cells(), bundle.details())
    return write_text(bundle.folder / "report.html", render_bundle_html(result, bundle_dir=bundle.folder, bench_dir=bench_dir))
