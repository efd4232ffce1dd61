"""``report.html``: a check's result as one self-contained page a person reads.

Rendered from the records (``CheckResult``: the ``Summary``, the
``RowDetail`` examples and the mismatch cells) with the jinja2 templates in
``templates/`` (``report.html.j2`` and one partial per section). This module
turns the records into what the page shows (counts, slots, shading); the
templates only lay it out.

Counts. Every number on the page is one of the summary's exact counters:
per family x clause, the unexpected rows by primary clause
(``FamilyCounts.clauses``), the rows breaking the clause
(``clauses_broken``) and the declared-deviation rows (``expected_clauses``);
the rows of cases the candidate raised on (``rows_raised``); the skipped
rows with their reasons (``skip_reasons``); the declared
deviations with, for ``weight_accuracy``, the rows within tolerance but not
bit-exact (``inexact_rows``). The mismatch cells are a capped sample: they
feed the examples and never a count. Where a version-1 bundle lacks a
counter, the page says "not recorded", never 0.

Escaping. Autoescape is on, and every interpolated value goes through one
hook (``_finalize``): control and bidi characters are made visible
(``text.clean``), then ``html.escape`` (quotes too, so a value is safe in an
attribute). A value is markup only when a template or macro made it.

The page loads nothing: CSS is inline, the plot is a base64 data URI, the one
script (copy buttons) is inline, and a Content-Security-Policy forbids any
other source.

Order: the verdict; the figures; notes; the first error; the clause table;
the family x clause heatmap; the rows not covered; the first mismatches of
each clause side by side (differing slots highlighted, the cutoff slot
``topk - 1`` and the tie group at the cutoff marked); the replay commands;
the declared deviations; the benchmark; the environment.

Command line: ``python -m contracts report html BUNDLE_DIR [--bench BENCH_DIR]``.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path

import jinja2
from markupsafe import Markup

from .schema import CheckResult, FamilyCounts, RowDetail, Status, Summary
from .sets import ExpertMatch, expert_sets, shown_as_sets
from .text import CELLS_NOTE, HUGE_ULP, clean, tie_group_matters, ulp_meaning

__all__ = ["render_bundle_html", "render_html", "ulp_distance"]

EXAMPLES_OPEN_PER_CLAUSE = 1
NOT_RECORDED = "not recorded"
REASON_NOT_RECORDED = "reason not recorded"
_VERDICT_ORDER = {"mismatch": 0, "near_tie": 1, "expected": 2}  # failures first
_VERDICT_TAG = {"mismatch": "fail", "expected": "declared", "near_tie": "near"}


# ---------------------------------------------------------------- numbers as text


def _finalize(value) -> Markup:
    """Every ``{{ value }}`` of the templates: visible escapes for control/bidi characters, then HTML-escaped."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape(clean(value, keep_newlines=True), quote=True))


def _count(value) -> str:
    """``1,234``; ``not recorded`` for a counter the bundle does not have."""
    if value is None:
        return NOT_RECORDED
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _weight(value) -> str:
    if value is None:
        return ""
    return "NaN" if math.isnan(value) else f"{value:.8g}"


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


def _shade(count: int, top: int) -> str:
    """Inline style of a heatmap cell: darker red for more rows."""
    if not count:
        return ""
    strength = 0.18 + 0.72 * (math.log1p(count) / math.log1p(max(top, 1)))
    text = "#fff" if strength > 0.55 else "var(--ink)"
    return f"background: rgba(207, 34, 46, {strength:.2f}); color: {text}"


# ---------------------------------------------------------------- what the page shows


def _broken(primary: dict[str, int], broken: dict[str, int], clause: str) -> int:
    """Rows breaking ``clause``: the v2 counter, else (v1) the rows with it as the primary clause."""
    return max(broken.get(clause, 0), primary.get(clause, 0))


@dataclass(frozen=True)
class HeatCell:
    family: str
    clause: str
    unexpected: int  # primary clause, exact
    broken: int  # rows breaking the clause, exact (>= unexpected)
    declared: int | None  # declared-deviation rows; None: not recorded (a v1 bundle)
    style: str
    floor: int = 0  # where ``declared`` is not recorded: such rows among the recorded cells

    @property
    def title(self) -> str:
        declared = f"{self.declared:,}" if self.declared is not None else (
            NOT_RECORDED + (f" (at least {self.floor:,} in the recorded cells)" if self.floor else ""))
        also = f", {self.broken:,} rows break it (with another primary clause too)" if self.broken != self.unexpected else ""
        return f"{self.family} / {self.clause}: {self.unexpected:,} unexpected rows{also}; declared-deviation rows: {declared}"


@dataclass(frozen=True)
class FamilyRow:
    name: str
    counts: FamilyCounts
    skip_reasons: dict[str, int] | None  # None: skipped rows whose reason the bundle does not record
    cells: list[HeatCell]


def _declared_in_family(f: FamilyCounts, clause: str, declared_clauses) -> int | None:
    if clause in f.expected_clauses:
        return f.expected_clauses[clause]
    if f.expected_rows and not f.expected_clauses and clause in declared_clauses:
        return None  # a v1 bundle counted the family's declared rows, not which clause each was
    return 0


def _skip_reasons(f: FamilyCounts) -> dict[str, int] | None:
    if not f.rows_skipped:
        return {}
    recorded = sum(f.skip_reasons.values())
    if not recorded:
        return None
    if recorded < f.rows_skipped:
        return {**f.skip_reasons, REASON_NOT_RECORDED: f.rows_skipped - recorded}
    return dict(f.skip_reasons)


def heatmap_columns(s: Summary) -> list[str]:
    """The contract's clauses, then any other clause a family counted."""
    columns = list(s.clauses)
    for f in s.families.values():
        for counter in (f.clauses, f.clauses_broken, f.expected_clauses):
            columns += [c for c in counter if c not in columns]
    return columns


def family_rows(s: Summary, sample: dict[tuple[str, str], int]) -> list[FamilyRow]:
    """One heatmap row per family; ``sample`` (``declared_sample``) only bounds what a v1 bundle does not count."""
    columns = heatmap_columns(s)
    top = max([n for f in s.families.values() for n in (*f.clauses.values(), *f.clauses_broken.values())] + [1])
    rows = []
    for name, f in s.families.items():
        cells = []
        for clause in columns:
            unexpected, broken = f.clauses.get(clause, 0), _broken(f.clauses, f.clauses_broken, clause)
            declared = _declared_in_family(f, clause, s.expected_deviations)
            floor = sample.get((name, clause), 0) if declared is None else 0
            cells.append(HeatCell(name, clause, unexpected, broken, declared, _shade(unexpected or broken, top), floor))
        rows.append(FamilyRow(name, f, _skip_reasons(f), cells))
    return rows


@dataclass(frozen=True)
class HeatNotes:
    declared_not_recorded: bool  # some family's declared rows are not counted by clause (v1)
    sample: int  # those rows among the recorded cells: a floor
    inexact: DeviationRow | None  # weight_accuracy, when it shows as inexact weights (counted over all families only)
    raised: bool  # the candidate raised on some family's rows: a column for them


def heat_notes(families: list[FamilyRow], deviations: dict[str, DeviationRow]) -> HeatNotes:
    unrecorded = [c for f in families for c in f.cells if c.declared is None]
    wa = deviations.get("weight_accuracy")
    return HeatNotes(
        declared_not_recorded=bool(unrecorded), sample=sum(c.floor for c in unrecorded),
        inexact=wa if wa is not None and wa.inexact != 0 else None, raised=any(f.counts.rows_raised for f in families),
    )  # fmt: skip


def skip_totals(s: Summary) -> dict[str, int]:
    """Skipped rows by reason over all families (``reason not recorded`` for rows whose reason a v1 bundle lacks)."""
    totals: dict[str, int] = {}
    for f in s.families.values():
        reasons = _skip_reasons(f)
        for reason, n in (reasons if reasons is not None else {REASON_NOT_RECORDED: f.rows_skipped}).items():
            totals[reason] = totals.get(reason, 0) + n
    unattributed = s.rows_skipped - sum(totals.values())
    if unattributed > 0:
        totals[REASON_NOT_RECORDED] = totals.get(REASON_NOT_RECORDED, 0) + unattributed
    return totals


@dataclass(frozen=True)
class ClauseRow:
    name: str
    unexpected: int
    broken: int
    deviation: DeviationRow | None

    @property
    def state(self) -> str:
        """fail (unexpected rows), declared (a declared deviation seen beyond tolerance), inexact (a declared
        weight_accuracy seen only as weights within tolerance but not bit-exact: nothing failed), or ok."""
        if self.unexpected or self.broken:
            return "fail"
        d = self.deviation
        if d is not None and d.seen:
            return "inexact" if not d.rows and not d.showing and d.inexact else "declared"
        return "ok"


@dataclass(frozen=True)
class DeviationRow:
    clause: str
    reason: str
    rows: int  # rows with this as their primary (declared) clause
    showing: int | None  # rows showing it, a row counted under every declared clause it shows; None: not recorded (v1)
    observed: bool
    # weight_accuracy: rows within tolerance but not bit-exact; None where a v1 bundle does not record them
    inexact: int | None = 0

    @property
    def seen(self) -> bool:
        return bool(self.rows or self.showing or self.inexact or (self.inexact is None and self.observed))


def _rows_showing(s: Summary, clause: str) -> int | None:
    families = s.families.values()
    if any(f.expected_clauses for f in families):
        return sum(f.expected_clauses.get(clause, 0) for f in families)
    return None if any(f.expected_rows for f in families) else 0


def deviation_rows(s: Summary) -> dict[str, DeviationRow]:
    rows = {}
    for clause, d in s.expected_deviations.items():
        inexact = d.inexact_rows or 0
        if d.inexact_rows is None and clause == "weight_accuracy" and d.observed and not d.rows:
            inexact = None  # observed as inexact weights, but this bundle does not say in how many rows
        showing = d.rows if clause == "determinism" else _rows_showing(s, clause)  # not a per-family counter
        rows[clause] = DeviationRow(clause, d.reason, d.rows, showing, d.observed, inexact)
    return rows


def clause_rows(s: Summary, deviations: dict[str, DeviationRow]) -> list[ClauseRow]:
    names = list(s.clauses) + [c for c in deviations if c not in s.clauses]
    return [ClauseRow(c, s.clauses.get(c, 0), _broken(s.clauses, s.clauses_broken, c), deviations.get(c)) for c in names]


@dataclass(frozen=True)
class Slot:
    index: int
    expected_id: int | None
    actual_id: int | None
    expected_weight: float | None
    actual_weight: float | None
    expected_class: str
    actual_class: str
    weight_class: str
    cutoff: bool
    mark: str

    @property
    def ulp(self) -> str:
        return ulp_distance(self.expected_weight, self.actual_weight)


def slots(d: RowDetail) -> list[Slot]:
    """Expected against actual, slot by slot: differing ids and weights, ids missing from the other side, the cutoff."""
    exp_ids, act_ids = d.expected_ids or [], d.actual_ids or []
    exp_w, act_w = d.expected_weights or [], d.actual_weights or []
    k = max(len(exp_ids), len(act_ids))
    cutoff = len(exp_ids) - 1 if exp_ids else k - 1
    exp_set, act_set = set(exp_ids), set(act_ids)

    def at(seq, j):
        return seq[j] if j < len(seq) else None

    out = []
    near = d.verdict == "near_tie"  # ids swapped within the near-tie bound: not an error, styled apart
    for j in range(k):
        ei, ai, ew, aw = at(exp_ids, j), at(act_ids, j), at(exp_w, j), at(act_w, j)
        differs = ("near" if near else "diff") if ei != ai else ""
        mark = ""
        if j == cutoff:
            mark = "cutoff (slot topk-1)"
            if d.tie_group_size and d.tie_group_size > 1 and tie_group_matters(d.clause, d.verdict):
                mark += f": tie group of {d.tie_group_size}" + (" straddles it" if d.straddles_cutoff else "")
        out.append(Slot(
            index=j, expected_id=ei, actual_id=ai, expected_weight=ew, actual_weight=aw,
            expected_class=f"{differs} missing".strip() if ei is not None and ei not in act_set else differs,
            actual_class=f"{differs} extra".strip() if ai is not None and ai not in exp_set else differs,
            weight_class="" if _same_weight(ew, aw) else "wdiff", cutoff=j == cutoff, mark=mark,
        ))  # fmt: skip
    return out


@dataclass(frozen=True)
class SetRow:
    """One expert of a row shown as sets (output order "any"): the classes of its cells and its ULP by expert."""

    match: ExpertMatch
    id_class: str
    weight_class: str
    mark: str

    @property
    def ulp(self) -> str:
        return ulp_distance(self.match.expected_weight, self.match.actual_weight)


def set_rows(d: RowDetail) -> list[SetRow]:
    """The row's experts as sets: missing and extra ids highlighted, matched weights compared by expert id."""
    near = d.verdict == "near_tie"
    out = []
    for x in expert_sets(d):
        if x.kind == "matched":
            out.append(SetRow(x, "", "" if x.same_weight else "wdiff", ""))
        else:
            what = "expected, not returned" if x.kind == "missing" else "returned, not expected"
            out.append(SetRow(x, f"{'near' if near else 'setdiff'} {x.kind}", "", f"{x.kind}: {what}" + (" (near tie)" if near else "")))
    return out


@dataclass
class ClauseExamples:
    clause: str
    verdicts: list[str]
    details: list[RowDetail] = field(default_factory=list)


def examples_by_clause(details: list[RowDetail]) -> list[ClauseExamples]:
    groups: dict[str, ClauseExamples] = {}
    for d in details:
        groups.setdefault(d.clause, ClauseExamples(d.clause, [])).details.append(d)
    for g in groups.values():
        g.verdicts = sorted({d.verdict for d in g.details})
    return sorted(groups.values(), key=lambda g: min(_VERDICT_ORDER.get(d.verdict, 0) for d in g.details))


def unique_replays(details: list[RowDetail]) -> list[RowDetail]:
    seen, out = set(), []
    for d in details:
        if d.replay and d.replay not in seen:
            seen.add(d.replay)
            out.append(d)
    return out


def declared_sample(cells) -> dict[tuple[str, str], int]:
    """(family, clause) -> rows with a declared deviation among the recorded cells: a floor where no counter exists."""
    if cells is None or len(cells) == 0:
        return {}
    declared = cells[cells["verdict"] == "expected"].drop_duplicates(["case", "row", "clause"])
    return {(str(f), str(c)): int(n) for (f, c), n in declared.groupby(["family", "clause"]).size().items()}


# ---------------------------------------------------------------- the benchmark (bench.json is not a record)


@dataclass(frozen=True)
class BenchView:
    lead: str  # timer, device, shape
    description: str
    png_base64: str | None
    baseline: str | None
    columns: list[str]
    table: list[tuple[str, list[tuple[str, str]]]]  # (M, [(text, title)])
    not_timed: list[tuple[str, str]]
    crossovers: list[str]
    command: str | None


def _bench_view(bench: dict | None, png: bytes | None) -> BenchView | None:
    if bench is None and png is None:
        return None
    bench = bench or {}
    method, env = bench.get("method") or {}, bench.get("environment") or {}
    lead = (f"{method.get('timer')} on {env.get('device_name') or bench.get('device')}; E={method.get('experts')}, "
            f"top-{method.get('topk')}, {method.get('dtype')} logits, {method.get('bias_dtype')} bias") if bench else ""  # fmt: skip
    if method.get("launch_floor_us") is not None:  # CUDA: what an empty kernel costs on this host, timed the same way
        lead += f"; launch floor {method['launch_floor_us']:.2f} us (an empty kernel)"
    description = f"{method.get('description') or ''} {method.get('inputs') or ''}".strip()
    timed = [c for c in bench.get("candidates") or [] if c.get("status") == "ok"]
    table = []
    if timed:
        base_t = {p["m"]: p["median_us"] for p in timed[0].get("results", []) if p.get("status") == "timed"}
        for m in bench.get("m") or []:
            row = []
            for c in timed:
                p = next((p for p in c.get("results", []) if p.get("m") == m), None)
                if not p or p.get("status") != "timed":
                    row.append((p.get("status") if p else "-", (p or {}).get("reason") or ""))
                    continue
                text = f"{p['median_us']:.2f}" + ("*" if p.get("timer") == "cuda-eager" else "")
                if c is not timed[0] and m in base_t:
                    text += f" ({p['median_us'] / base_t[m]:.2f}x)"
                row.append((text, ""))
            table.append((str(m), row))
    crossovers = [
        f"{x.get('candidate')} and {x.get('baseline')} near M={round(x.get('m', 0))}; {x.get('faster_above')} faster above"
        for x in bench.get("crossovers") or []
    ]  # fmt: skip
    return BenchView(
        lead=lead, description=description, png_base64=base64.b64encode(png).decode("ascii") if png else None,
        baseline=timed[0]["name"] if timed else None, columns=[c["name"] for c in timed], table=table,
        not_timed=[(c.get("name"), c.get("reason")) for c in bench.get("candidates") or [] if c.get("status") != "ok"],
        crossovers=crossovers, command=bench.get("command"),
    )  # fmt: skip


def _find_bench(bundle_dir: Path | None, bench_dir: Path | None) -> tuple[dict | None, bytes | None]:
    for where in [Path(p) for p in (bench_dir, bundle_dir) if p is not None]:
        data = json.loads((where / "bench.json").read_text(encoding="utf-8")) if (where / "bench.json").is_file() else None
        png = (where / "bench.png").read_bytes() if (where / "bench.png").is_file() else None
        if data is not None or png is not None:
            return data, png
    return None, None


# ---------------------------------------------------------------- rendering


class _Ids:
    """Fresh element ids for the copy buttons of one page."""

    def __init__(self):
        self.n = 0

    def __call__(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"


@functools.lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("contracts.reports", "templates"),
        autoescape=True,
        finalize=_finalize,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(count=_count, weight=_weight)
    return env


def _environment_items(s: Summary) -> dict:
    extra = {"seed": s.seed, "duration_s": s.duration_s, "shard": s.shard, "schema_version": s.schema_version, "isolated": s.isolated}
    return {**(s.environment or {}), **{k: v for k, v in extra.items() if v is not None}}


def render_html(result: CheckResult, *, bench: dict | None = None, bench_png: bytes | None = None) -> str:
    """The page of a check result as a string; ``bundle.write_html`` gathers the inputs from a bundle folder."""
    s = result.summary
    deviations = deviation_rows(s)
    available = s.status is not Status.UNAVAILABLE
    families = family_rows(s, declared_sample(result.cells) if available else {})
    page = _templates().get_template("report.html.j2").render(
        s=s,
        available=available,
        clause_rows=clause_rows(s, deviations),
        deviations=list(deviations.values()),
        families=families,
        columns=heatmap_columns(s),
        heat=heat_notes(families, deviations),
        skips=skip_totals(s),
        device_name=(s.environment or {}).get("device_name"),
        examples=examples_by_clause(result.details) if available else [],
        replays=unique_replays(result.details) if available else [],
        bench=_bench_view(bench, bench_png),
        environment=_environment_items(s),
        slots=slots,
        shown_as_sets=shown_as_sets,
        set_rows=set_rows,
        next_id=_Ids(),
        tie_group_matters=tie_group_matters,
        ulp_meaning=ulp_meaning(s.max_weight_ulp),
        huge_ulp=s.max_weight_ulp >= HUGE_ULP,
        cells_note=next((n for n in s.notes if n.startswith(CELLS_NOTE)), None),
        cells_note_prefix=CELLS_NOTE,
        examples_open=EXAMPLES_OPEN_PER_CLAUSE,
        verdict_tag=_VERDICT_TAG,
        not_recorded=NOT_RECORDED,
        reason_not_recorded=REASON_NOT_RECORDED,
    )
    return page.strip() + "\n"


def render_bundle_html(result: CheckResult, *, bundle_dir: Path | None = None, bench_dir: Path | None = None) -> str:
    """The page of a check result (a bench found in ``bench_dir`` or ``bundle_dir`` is shown too)."""
    bench, png = _find_bench(bundle_dir, bench_dir)
    return render_html(result, bench=bench, bench_png=png)
