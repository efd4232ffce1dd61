"""The running totals of one check: case outcomes in, one ``Summary`` (and its cells and details) out.

Counts are exact and grow case by case; what is kept per row is capped
(cells at ``max_cells``, row examples a few per clause, tie-straddling
rows preferred), so memory stays bounded by the largest case however many
rows run.
"""

from __future__ import annotations

import contextlib
import resource
import time
from dataclasses import dataclass, field
from typing import Callable

from ..cases import Case, CaseSpec
from ..cases.plan import call_size
from ..compare import CaseOutcome
from ..reports.cells import CellKeeper
from ..reports.schema import (
    CELL_COLUMNS,
    AgainstSides,
    CheckResult,
    DeclaredDeviation,
    Determinism,
    ErrorRecord,
    FamilyCounts,
    OptionCounts,
    RowDetail,
    Summary,
    decide_status,
    top_reason,
)

__all__ = ["DETAILS_PER_CLAUSE", "DETERMINISM_EXAMPLES", "OPTIONS", "Tally", "batch_size_class", "call_options"]

DETAILS_PER_CLAUSE = 5
DETERMINISM_EXAMPLES = 5
# The call options a verdict is split by (``Summary.by_option``), in the order reports show them.
OPTIONS = ("renormalize", "routed_scaling_factor", "dtypes", "batch_size")


def batch_size_class(rows: int) -> str:
    """The power-of-two class of a call's rows: ``1``, ``2``, ``3-4``, ``5-8``, ... ``1025-2048``: every launch-shape
    boundary a kernel switches at (a power of two, or one past it) falls between two classes or at a class's edge."""
    if rows <= 2:
        return str(max(rows, 0))
    top = 1 << (rows - 1).bit_length()
    return f"{top // 2 + 1}-{top}"


def call_options(case: Case, call_rows: int | None = None) -> dict[str, str]:
    """The options of the candidate's calls on ``case``, as the text ``Summary.by_option`` keys them by: every row
    of a case shares them, so counting a case's rows under them is exact."""
    bias = "none" if case.bias is None else str(case.bias.dtype).removeprefix("torch.")
    return {
        "renormalize": str(bool(case.renormalize)),
        "routed_scaling_factor": f"{float(case.routed_scaling_factor):g}",
        "dtypes": f"{str(case.scores.dtype).removeprefix('torch.')} logits, {bias} bias",
        "batch_size": batch_size_class(call_size(case.spec, call_rows)),
    }


@dataclass
class Tally:
    candidate: str
    contract: str
    clause_names: tuple[str, ...]
    device: str
    deviations: dict[str, str]
    replay: Callable[[CaseSpec, int | None], str]
    against: str | None = None
    exact: bool = False
    repeat: int = 1
    max_cells: int = 100_000
    call_rows: int | None = None  # a bulk case's largest call (its batch-size class)
    # the candidate's own contract and what it declares there (the diagnosis scores that contract's arithmetic)
    own: tuple[str, dict[str, str]] | None = None

    families: dict[str, FamilyCounts] = field(default_factory=dict)
    by_option: dict[str, dict[str, OptionCounts]] = field(default_factory=dict)
    verdicts: dict[str, int] = field(default_factory=dict)
    cells_total: int = 0
    details: dict[str, list[dict]] = field(default_factory=dict)
    inexact_rows: int = 0
    max_ulp: float = 0.0
    error: ErrorRecord | None = None  # the first failure: a Python exception (a finding) or what ended the run
    fatal: bool = False
    interrupted: str | None = None
    sides: AgainstSides = field(default_factory=AgainstSides)
    determinism: Determinism = None
    started: float = field(default_factory=time.perf_counter)

    def __post_init__(self):
        from ..compare.diagnosis import DiagnosisSample

        self.cells = CellKeeper(self.max_cells)
        self.sample = DiagnosisSample()  # mismatched rows kept for the diagnosis
        self.run_notes: list[str] = []  # notes on the whole check from the calls (torch.compile recompiles)
        self.stages: dict[str, list[float]] = {}  # stage -> [seconds, rows]
        self.clauses = dict.fromkeys(self.clause_names, 0)
        self.clauses_broken: dict[str, int] = {}
        self.raised_rows = 0
        self.empty_batch_failures = 0  # empty batches (0 rows) the candidate raised on or answered wrongly
        self.expected_seen = dict.fromkeys(self.deviations, 0)
        graph = self.device.startswith("cuda") and self.repeat > 1
        self.determinism = Determinism(repeat=self.repeat, graph_replay=graph, declared=self.deviations.get("determinism"))

    @contextlib.contextmanager
    def timed(self, stage: str, rows: int):
        """Time a stage of one case (generation, candidate, oracle, comparison)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add_time(stage, time.perf_counter() - start, rows)

    def add_time(self, stage: str, seconds: float, rows: int) -> None:
        entry = self.stages.setdefault(stage, [0.0, 0])
        entry[0] += seconds
        entry[1] += rows

    def _stage_summary(self, elapsed: float) -> dict:
        out = {name: {"seconds": round(sec, 3), "rows": rows, "rows_per_s": round(rows / sec, 1) if sec > 0 else None}
               for name, (sec, rows) in self.stages.items()}  # fmt: skip
        out["wall"] = {"seconds": round(elapsed, 3)}
        out["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        return out

    def family(self, spec: CaseSpec) -> FamilyCounts:
        return self.families.setdefault(spec.family, FamilyCounts())

    # ---------------------------------------------------------------- what happened
    def skipped(self, spec: CaseSpec, reason: str) -> None:
        f = self.family(spec)
        f.rows_skipped += spec.rows
        if spec.rows:  # a gate that refuses the empty batch skips no row: nothing to report
            f.skip_reasons[reason] = f.skip_reasons.get(reason, 0) + spec.rows

    def failed(self, kind: str, spec: CaseSpec | None, message: str, traceback_text: str = "", *, fatal: bool, stderr_tail: str | None = None, case: str | None = None) -> None:
        if self.error is None:
            self.error = ErrorRecord(
                kind=kind, case=case or (spec.replay_id if spec else ""), message=message, traceback=traceback_text or message,
                replay=self.replay(spec, None) if spec else None, stderr_tail=stderr_tail,
            )  # fmt: skip
        self.fatal = self.fatal or fatal

    def raised(self, case: Case) -> None:
        """The candidate raised on this case: its rows ran and failed as an error of the candidate, not a clause."""
        if not case.spec.rows:  # an empty batch: no row carries the raise
            self.empty_batch_failures += 1
        f = self.family(case.spec)
        f.rows += case.spec.rows
        f.rows_raised += case.spec.rows
        self.raised_rows += case.spec.rows
        self._count_options(case, None)

    def compared(self, case: Case, outcome: CaseOutcome, *, oracle_side=None, message: str | None = None, actual=None) -> None:
        spec = case.spec
        if not spec.rows and outcome.case_problem:  # a wrong answer to an empty batch: no row to count it under
            self.empty_batch_failures += 1
            self.failed("empty_batch", spec, f"on an empty batch (0 rows): {message or outcome.case_problem}", fatal=False)
        if actual is not None and outcome.mismatched is not None and not self.sample.full and not isinstance(actual, str):
            key = (spec.family, *call_options(case, self.call_rows).values())  # the sample spreads over these
            self.sample.add(case, outcome.mismatched, actual[0], actual[1], outcome.mismatched_primary, key)
        f = self.family(spec)
        f.rows += spec.rows
        self._count_options(case, outcome)
        for verdict, n in outcome.verdict_counts.items():
            self.verdicts[verdict] = self.verdicts.get(verdict, 0) + n
        f.mismatched_rows += outcome.verdict_counts.get("mismatch", 0)
        f.near_tie_rows += outcome.verdict_counts.get("near_tie", 0)
        f.expected_rows += outcome.verdict_counts.get("expected", 0)
        for clause, n in outcome.clause_rows.items():
            self.clauses[clause] = self.clauses.get(clause, 0) + n
            f.clauses[clause] = f.clauses.get(clause, 0) + n
        for clause, n in outcome.expected_rows.items():
            self.expected_seen[clause] = self.expected_seen.get(clause, 0) + n
        for clause, n in outcome.expected_clauses.items():
            f.expected_clauses[clause] = f.expected_clauses.get(clause, 0) + n
        for clause, n in outcome.clauses_broken.items():
            self.clauses_broken[clause] = self.clauses_broken.get(clause, 0) + n
            f.clauses_broken[clause] = f.clauses_broken.get(clause, 0) + n
        self.inexact_rows += outcome.inexact_weight_rows
        self.max_ulp = max(self.max_ulp, outcome.max_weight_ulp)
        if message is not None:
            for d in outcome.rows_detail:
                d["reason"] = message
            for frame in outcome.cells:
                frame["reason"] = message
        label = self._sides(oracle_side, outcome) if oracle_side is not None and None not in oracle_side else {}
        meta = {"family": spec.family, "case_seed": spec.case_seed, "case": spec.replay_id}
        self.cells_total += outcome.cells_total
        for frame in outcome.cells:
            self._keep_cells(spec, frame)
        for d in outcome.rows_detail:
            if d["row"] in label:
                d["oracle_agrees_with"] = label[d["row"]]
            elif label or oracle_side is not None:
                d["oracle_agrees_with"] = "both"
            self._keep_detail(d["clause"] if d["verdict"] != "near_tie" else "near_tie", d, meta, case)

    def _count_options(self, case: Case, outcome: CaseOutcome | None) -> None:
        """The case's rows, and its unexpected mismatches by primary clause, under each of its call options' values."""
        for option, value in call_options(case, self.call_rows).items():
            counts = self.by_option.setdefault(option, {}).setdefault(value, OptionCounts())
            counts.rows += case.spec.rows
            if outcome is None:
                continue
            counts.mismatched_rows += outcome.verdict_counts.get("mismatch", 0)
            for clause, n in outcome.clause_rows.items():
                if n:
                    counts.clauses[clause] = counts.clauses.get(clause, 0) + n

    def _keep_cells(self, spec: CaseSpec, frame) -> None:
        frame = frame.copy()
        frame.insert(0, "case", spec.replay_id)
        frame.insert(0, "case_seed", spec.case_seed)
        frame.insert(0, "family", spec.family)
        self.cells.keep(frame)

    def _keep_detail(self, key: str, d: dict, meta: dict, case: Case) -> None:
        bucket = self.details.setdefault(key, [])
        if len(bucket) < DETAILS_PER_CLAUSE or (d.get("straddles_cutoff") and not all(x.get("straddles_cutoff") for x in bucket)):
            d = {**meta, **d, "renormalize": case.renormalize, "routed_scaling_factor": case.routed_scaling_factor,
                 "replay": self.replay(case.spec, d["row"])}  # fmt: skip
            bucket.append(d)
            bucket.sort(key=lambda x: not x.get("straddles_cutoff"))
            del bucket[DETAILS_PER_CLAUSE:]

    def _sides(self, oracle_side, outcome: CaseOutcome) -> dict[int, str]:
        """Where the two candidates differ, count the rows by the side the oracle agrees with; label the examples."""
        candidate_ok, against_ok, pair_ok = oracle_side
        differ = ~pair_ok
        sides = {"candidate": differ & candidate_ok, "against": differ & ~candidate_ok & against_ok,
                 "neither": differ & ~candidate_ok & ~against_ok}  # fmt: skip
        for name, rows in sides.items():
            setattr(self.sides, name, getattr(self.sides, name) + int(rows.sum()))
        label = {}
        for d in outcome.rows_detail:  # only the examples need a label; the counts above are of every row
            row = d["row"]
            if 0 <= row < differ.shape[0] and bool(differ[row]):
                label[row] = next(name for name, rows in sides.items() if bool(rows[row]))
        return label

    def quiet_kinds(self, spec: CaseSpec) -> frozenset[str]:
        """The sampled kinds of row (near ties, declared deviations) of which this run already keeps every example
        and cell it reports for ``spec``'s family: ``compare_case`` still counts such rows, but records none."""
        quiet = set()
        if self.cells.sample_full(spec.family, "near_tie") and len(self.details.get("near_tie", ())) >= DETAILS_PER_CLAUSE:
            quiet.add("near_tie")
        if self.deviations and self.cells.sample_full(spec.family, "expected"):
            full = [clause for clause in self.deviations if len(self.details.get(clause, ())) >= DETAILS_PER_CLAUSE]
            if len(full) == len(self.deviations):
                quiet.add("expected")
            else:  # per declared clause: a router that declares five clauses and meets one rarely (renorm_guard) recorded
                # every declared row of every case until the rare one had its examples. Quiet is only a clause whose
                # examples no later row can replace (all straddle the cutoff: _keep_detail's preference), so the
                # examples kept are the same as without it.
                quiet.update(f"expected:{clause}" for clause in full if all(d.get("straddles_cutoff") for d in self.details[clause]))
        return frozenset(quiet)

    def nondeterministic(self, call, case: Case) -> None:
        spec = case.spec
        det = self.determinism
        det.rows_differing += call.differing_rows
        det.cases += 1
        meta = {"family": spec.family, "case_seed": spec.case_seed, "case": spec.replay_id}
        if len(det.examples) < DETERMINISM_EXAMPLES:
            det.examples.append({**meta, "calls": call.differing_calls, "rows_differing": call.differing_rows,
                                 "rows": call.differing_sample, "replay": self.replay(spec, None)})  # fmt: skip
        bucket = self.details.setdefault("determinism", [])
        d = call.difference
        if len(bucket) < DETAILS_PER_CLAUSE and d:
            bucket.append({
                **meta,
                "row": d["row"],
                "clause": "determinism",
                "verdict": "expected" if det.declared else "mismatch",
                "reason": f"{d['call']} differs from call 1 on {call.differing_rows} of {spec.rows} rows" + (f" ({d['message']})" if d.get("message") else ""),
                # "expected" is the first call's answer, "actual" the differing call's
                "expected_ids": d["first_ids"],
                "actual_ids": d["ids"],
                "expected_weights": d["first_weights"],
                "actual_weights": d["weights"],
                "renormalize": case.renormalize,
                "routed_scaling_factor": case.routed_scaling_factor,
                "replay": self.replay(spec, d["row"]),
            })  # fmt: skip

    def note(self, notes) -> None:
        self.determinism.notes.extend(n for n in notes if n not in self.determinism.notes)

    # ---------------------------------------------------------------- the record
    def diagnosis(self, contract, command: str = "") -> list[dict] | None:
        """Which single-field variants of the contract explain the mismatched rows (None when nothing mismatched);
        declared deviations left out; ``command``: the check's, for the line that checks a better built-in contract."""
        from ..compare.diagnosis import diagnose

        if not self.sample.rows or self.against is not None:
            return None
        with self.timed("diagnosis", self.sample.rows):
            return diagnose(self.sample, contract, declared=frozenset(self.deviations), command=command, device=self.device,
                            own=self.own)

    def result(self, *, seed: int, command: str, isolated: bool, options: dict | None = None) -> CheckResult:
        elapsed = time.perf_counter() - self.started
        if (options or {}).get("quick"):  # a quick look (check --quick): its diagnosis routes a smaller sample (it says how many)
            self.sample.quick()
        rows_checked = sum(f.rows for f in self.families.values())
        mismatched = self.verdicts.get("mismatch", 0)
        # rows: filed under the clause (their primary one); observed: any row broke it, even as a second clause
        # (a declared weight_accuracy behind a declared selection is still seen)
        shown = {clause for f in self.families.values() for clause, n in f.expected_clauses.items() if n}
        deviations = {
            clause: DeclaredDeviation(reason=why, rows=self.expected_seen.get(clause, 0),
                                      observed=self.expected_seen.get(clause, 0) > 0 or clause in shown)  # fmt: skip
            for clause, why in self.deviations.items()
        }
        if "weight_accuracy" in deviations and self.inexact_rows:
            # Within tolerance yet not bit-equal: the ULP-level deviation shows here.
            deviations["weight_accuracy"].inexact_rows = self.inexact_rows
            deviations["weight_accuracy"].observed = True
        det = self.determinism
        if det.declared:
            deviations["determinism"].rows = det.rows_differing
            deviations["determinism"].observed = det.rows_differing > 0
        status = decide_status(
            interrupted=bool(self.interrupted), fatal=self.fatal, mismatched_rows=mismatched,
            nondeterministic=det.rows_differing > 0 and not det.declared, rows_checked=rows_checked,
            raised=self.raised_rows > 0 or self.empty_batch_failures > 0,  # an empty batch's failure has no rows
        )  # fmt: skip
        summary = Summary(
            candidate=self.candidate,
            contract=self.contract,
            device=self.device,
            status=status,
            against=self.against,
            rows_checked=rows_checked,
            rows_skipped=sum(f.rows_skipped for f in self.families.values()),
            mismatched_rows=mismatched,
            near_tie_rows=self.verdicts.get("near_tie", 0),
            expected_deviation_rows=self.verdicts.get("expected", 0),
            exact_rows=self.verdicts.get("exact", 0),
            within_tolerance_rows=self.verdicts.get("within_tolerance", 0),
            max_weight_ulp=self.max_ulp,
            clauses=self.clauses,
            clauses_broken=self.clauses_broken,
            raised_rows=self.raised_rows,
            families=self.families,
            by_option={o: dict(sorted(self.by_option[o].items(), key=_value_order)) for o in OPTIONS if o in self.by_option},
            expected_deviations=deviations,
            bit_exact=self.exact,
            error=self.error,
            determinism=det,
            interrupted=self.interrupted,
            against_sides=self.sides if self.against is not None else None,
            isolated=isolated,
            seed=seed,
            command=command,
            duration_s=round(elapsed, 3),
            rows_per_s=round(rows_checked / elapsed, 1) if elapsed > 0 else None,
            cells_recorded=self.cells.kept,
            cells_total=self.cells_total,
            cells_capped=self.cells_total > self.cells.kept,
            options=options,
            stages=self._stage_summary(elapsed),
        )
        details = [RowDetail(**d) for key in sorted(self.details) for d in self.details[key]]
        summary.top_reason = top_reason(summary, details)
        cells = self.cells.table(CELL_COLUMNS)
        note = self.cells.note(self.cells_total)
        if note:
            summary.notes.append(note)
        return CheckResult(summary, cells, details)


def _value_order(item: tuple[str, OptionCounts]):
    """Batch-size classes by size, numbers by value, other values as text."""
    text = item[0]
    head = text.split("-", 1)[0]
    try:
        return (0, float(head), text)
    except ValueError:
        return (1, 0.0, text)
