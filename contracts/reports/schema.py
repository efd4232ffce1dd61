"""The records that cross module boundaries, and the rules of their fields.

Every writer builds these and every reader gets them back from
``contracts.reports.bundle``; nothing else builds or parses the JSON. Field
names on disk are fixed (``summary.json``, ``details.json``, the mismatch
cells, ``nightly.json``): tools downstream read them.

``schema_version`` 1 is the layout before typed records; version 2 adds
fields (every one optional, so a version-1 file reads as version 2 with
defaults). ``from_json`` (``contracts.reports.json_records``) refuses a file
whose fields have the wrong types, naming the file and the field. The records
of ``matrix.json`` are ``contracts.reports.matrix_schema``'s.

Status rules live here once (``decide_status``, ``worst_status``): the
check, the merge of shards and the distributed gather all use them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CELL_COLUMNS",
    "INT64_MAX",
    "READABLE_SCHEMA_VERSIONS",
    "SCHEMA_VERSION",
    "AgainstSides",
    "CheckResult",
    "DeclaredDeviation",
    "Determinism",
    "ErrorRecord",
    "FamilyCounts",
    "HARNESS_ERROR",
    "INPUT_CHANGED",
    "NightlyEnvelope",
    "OptionCounts",
    "PairDeparture",
    "RecordError",
    "ReplayTarget",
    "RowDetail",
    "Status",
    "Summary",
    "decide_status",
    "top_reason",
    "worst_status",
]

SCHEMA_VERSION = 2
# Every integer of a record fits a signed 64-bit integer (what pandas, parquet and JUnit tools hold); counts are >= 0.
INT64_MAX = 2**63 - 1
READABLE_SCHEMA_VERSIONS = (1, 2)

# One row per mismatched cell (mismatches.csv / .parquet), in this column order.
CELL_COLUMNS = (
    "family", "case_seed", "case", "row", "col", "expected_id", "actual_id", "expected_weight", "actual_weight",
    "weight_ulp", "clause", "verdict", "reason", "tie_group_size", "straddles_cutoff", "nan_count",
)  # fmt: skip


class RecordError(ValueError):
    """A record (or a file holding one) has a missing or mistyped field; the message names both."""


class Status(str, enum.Enum):
    """A check's verdict. ``str`` so that JSON and f-strings show the plain word."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    UNAVAILABLE = "unavailable"
    INTERRUPTED = "interrupted"
    NOT_COVERED = "not_covered"  # it ran, but checked no row of the run, or of a family asked for: no evidence for a PASS

    def __str__(self) -> str:
        return self.value

    @property
    def word(self) -> str:
        """The headline word of reports: PASS, FAIL, ERROR, UNAVAILABLE, INTERRUPTED, NOT COVERED."""
        return self.value.upper().replace("_", " ")

    @property
    def failed(self) -> bool:
        """Whether this status makes a run's exit code non-zero."""
        return self in (Status.FAIL, Status.ERROR, Status.INTERRUPTED, Status.NOT_COVERED)


def decide_status(*, interrupted: bool, fatal: bool, mismatched_rows: int, nondeterministic: bool, raised: bool, rows_checked: int) -> Status:
    """A check's status from what happened, in priority order.

    ``fatal``: the run ended early (crash, hang, out of memory, a gate that
    raised); ``raised``: the candidate raised a Python exception on some case.
    """
    if interrupted:
        return Status.INTERRUPTED
    if fatal:
        return Status.ERROR
    if raised:
        return Status.ERROR
    if mismatched_rows or nondeterministic:
        return Status.FAIL
    return Status.PASS


_SEVERITY = (Status.UNAVAILABLE, Status.PASS, Status.NOT_COVERED, Status.FAIL, Status.ERROR, Status.INTERRUPTED)


def worst_status(statuses) -> Status:
    """The worst of several (shards, ranks): an interrupted or crashed part is never hidden by healthy ones."""
    present = [Status(s) for s in statuses]
    if not present:
        return Status.UNAVAILABLE
    return max(present, key=_SEVERITY.index)


# ---------------------------------------------------------------- the check summary


@dataclass
class FamilyCounts:
    rows: int = 0
    rows_skipped: int = 0
    mismatched_rows: int = 0
    near_tie_rows: int = 0
    expected_rows: int = 0
    clauses: dict[str, int] = field(default_factory=dict)  # unexpected mismatched rows by primary clause
    # v2: rows that break each clause, a row counted under every clause it breaks
    clauses_broken: dict[str, int] = field(default_factory=dict)
    # v2: declared-deviation rows by clause, and skipped rows by reason
    expected_clauses: dict[str, int] = field(default_factory=dict)
    skip_reasons: dict[str, int] = field(default_factory=dict)
    rows_raised: int = 0  # v2: rows of cases on which the candidate raised


@dataclass
class OptionCounts:
    """The rows of one value of one call option (``Summary.by_option``): checked, and unexpectedly mismatched by
    primary clause. Exact at any ``--rows``: counted case by case, while the mismatch cells are a capped sample."""

    rows: int = 0
    mismatched_rows: int = 0
    clauses: dict[str, int] = field(default_factory=dict)


@dataclass
class DeclaredDeviation:
    reason: str
    rows: int = 0
    observed: bool = False
    inexact_rows: int | None = None


# The error kind of a check the harness's own code ended (``contracts.run.containment``): not the candidate's doing.
HARNESS_ERROR = "harness_error"
# The error kind of a check whose captured input file changed under it (``contracts.cases.logits_file.InputChanged``):
# neither the candidate's doing nor the harness's; the check is ERROR, its rows never blamed.
INPUT_CHANGED = "input_changed"


@dataclass
class ErrorRecord:
    kind: str
    case: str
    message: str
    traceback: str = ""
    replay: str | None = None
    stderr_tail: str | None = None


@dataclass
class Determinism:
    repeat: int = 1
    graph_replay: bool = False
    rows_differing: int = 0
    cases: int = 0
    examples: list[dict] = field(default_factory=list)
    declared: str | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class AgainstSides:
    """With ``--against``: rows where the two differ, by the side the oracle agrees with."""

    candidate: int = 0
    against: int = 0
    neither: int = 0


@dataclass
class ReplayTarget:
    """What a replay line passes so that the registry finds the candidates again (``contracts.run.replay``)."""

    candidate: str  # a registered name or package.module:attr
    against: str | None = None
    pythonpath: str | None = None  # where the candidates' modules came from, when a replay needs it


@dataclass
class Summary:
    """``summary.json``: one check of one candidate (or one pair) under one contract."""

    candidate: str
    status: Status
    contract: str = ""
    device: str = ""
    schema_version: int = SCHEMA_VERSION
    against: str | None = None
    reason: str | None = None  # why it did not run (unavailable)
    rows_checked: int = 0
    rows_skipped: int = 0
    mismatched_rows: int = 0
    near_tie_rows: int = 0
    expected_deviation_rows: int = 0
    exact_rows: int = 0
    within_tolerance_rows: int = 0
    max_weight_ulp: float = 0.0
    clauses: dict[str, int] = field(default_factory=dict)
    families: dict[str, FamilyCounts] = field(default_factory=dict)
    expected_deviations: dict[str, DeclaredDeviation] = field(default_factory=dict)
    bit_exact: bool = False
    error: ErrorRecord | None = None
    determinism: Determinism | None = None
    interrupted: str | None = None
    against_sides: AgainstSides | None = None
    isolated: bool = False
    environment: dict | None = None
    seed: int = 0
    command: str = ""
    duration_s: float | None = None
    rows_per_s: float | None = None
    cells_recorded: int = 0
    shard: str | None = None
    bundle: str | None = None
    merged_shards: list[str] | None = None
    shard_environments: list | None = None
    # v2
    clauses_broken: dict[str, int] = field(default_factory=dict)
    raised_rows: int = 0  # rows of cases on which the candidate raised (an error of the candidate)
    options: dict | None = None  # rows, families, experts, topk, repeat: what shards must share
    cells_capped: bool = False
    cells_total: int = 0
    stages: dict | None = None  # seconds and rows/s per stage (generation, candidate, oracle, comparison)
    world_size: int | None = None
    ranks: list[dict] | None = None
    notes: list[str] = field(default_factory=list)
    diagnosis: list[dict] | None = None
    files: dict[str, str] = field(default_factory=dict)  # bundle file -> sha256, written with the bundle
    replay_target: ReplayTarget | None = None  # v2: how replay lines name the candidates (display names may be unknown to the registry)
    # v2: option (renormalize, routed_scaling_factor, dtypes, batch_size) -> its value as text -> counts
    by_option: dict[str, dict[str, OptionCounts]] = field(default_factory=dict)
    expert_load: dict | None = None  # captured logits (--logits): per layer, the oracle's expert counts and the candidate's difference
    # the contract fields (and regimes) no case of the check varied from their default (captured logits: a per-expert
    # scale of ones, a zero bias): a PASS resting on them is not_covered (contracts.cases.exercised)
    unexercised: list[str] = field(default_factory=list)
    # v2: why the clause with the most unexpected rows broke, in the words of its first example row (with the fix where
    # the reason names one: "return weights.contiguous()"), for the console line; None where no row mismatched
    top_reason: str | None = None
    # v2: a quick look (check --quick): a thin sample of the full plan, which its notes name; a quick PASS is not a full
    # check (the verdict word says so: ``verdict``)
    quick: bool = False

    @property
    def label(self) -> str:
        return self.candidate + (f" vs {self.against}" if self.against else "")

    @property
    def verdict(self) -> str:
        """The status word, marked where the check was a quick look: "PASS (quick)" is never read as a full PASS."""
        return self.status.word + (" (quick)" if self.quick else "")

    @property
    def top_clause(self) -> str | None:
        """The clause with the most unexpected mismatched rows (the first in clause order on a tie), or None."""
        ranked = [(n, -i, clause) for i, (clause, n) in enumerate(self.clauses.items()) if n]
        return max(ranked)[2] if ranked else None

    @property
    def answered_rows(self) -> int:
        """Rows the candidate answered: those checked less those of calls that raised."""
        return max(self.rows_checked - self.raised_rows, 0)

    def case_shape(self) -> tuple[int, int]:
        """``(experts, topk)`` of the check's cases: from ``options``, or for a bundle written before the options held
        them, from its recorded command line (else the first contract's 896/16, as those checks took it). The one
        reading of a command line back, for readers that rebuild a replay line (JUnit)."""
        options = self.options or {}
        if options.get("experts") is not None and options.get("topk") is not None:
            return int(options["experts"]), int(options["topk"])
        import shlex

        try:
            words = shlex.split(self.command or "")
        except ValueError:
            words = []
        given = {flag: words[words.index(flag) + 1] for flag in ("--experts", "--topk") if flag in words and words.index(flag) + 1 < len(words)}
        try:
            return int(given.get("--experts", 896)), int(given.get("--topk", 16))
        except ValueError:
            return 896, 16

    def validate(self, source: str = "summary") -> "Summary":
        """The fields each status must carry; ``RecordError`` naming the first that is missing."""
        need = {
            Status.UNAVAILABLE: ("reason",),
            Status.ERROR: ("error",),
            Status.INTERRUPTED: ("interrupted",),
            Status.NOT_COVERED: ("reason",),
        }.get(self.status, ())
        for name in need:
            if getattr(self, name) in (None, ""):
                raise RecordError(f"{source}: status {self.status.value!r} needs field {name!r}")
        if self.status is Status.PASS and self.mismatched_rows:
            raise RecordError(f"{source}: status 'pass' with mismatched_rows={self.mismatched_rows}")
        for name in _SUMMARY_COUNTS:
            if getattr(self, name) < 0:
                raise RecordError(f"{source}: {name}={getattr(self, name)} is negative; counts are from 0 to {INT64_MAX:,}")
        counters = {"clauses": self.clauses, "clauses_broken": self.clauses_broken,
                    **{f"families.{k}.{c}": getattr(f, c) for k, f in self.families.items() for c in ("clauses", "clauses_broken", "expected_clauses", "skip_reasons")},
                    **{f"by_option.{o}.{v}.clauses": c.clauses for o, vs in self.by_option.items() for v, c in vs.items()}}  # fmt: skip
        for where, counter in counters.items():
            for key, n in counter.items():
                if n < 0:
                    raise RecordError(f"{source}: {where}.{key}={n} is negative; counts are from 0 to {INT64_MAX:,}")
        for name, f in self.families.items():
            for key in ("rows", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_rows", "rows_raised"):
                if getattr(f, key) < 0:
                    raise RecordError(f"{source}: families.{name}.{key}={getattr(f, key)} is negative; counts are from 0 to {INT64_MAX:,}")
        if self.rows_checked < 0 or self.mismatched_rows < 0 or self.mismatched_rows > max(self.rows_checked, 0):
            raise RecordError(f"{source}: mismatched_rows={self.mismatched_rows} does not fit rows_checked={self.rows_checked}")
        return self


_SUMMARY_COUNTS = ("rows_checked", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_deviation_rows", "exact_rows",
                   "within_tolerance_rows", "cells_recorded", "cells_total", "raised_rows")  # fmt: skip


def top_reason(summary: Summary, details: list["RowDetail"]) -> str | None:
    """The reason of the first unexpected example row of ``summary``'s top clause (``Summary.top_reason``), or None."""
    clause = summary.top_clause
    return next((d.reason for d in details if d.clause == clause and d.verdict == "mismatch" and d.reason), None)


@dataclass
class RowDetail:
    """One row worth showing (details.json): expected and actual side by side, with its replay line."""

    row: int
    clause: str
    verdict: str
    reason: str
    family: str = ""
    case_seed: int = 0
    case: str = ""
    expected_ids: list[int] | None = None
    actual_ids: list[int] | None = None
    expected_weights: list[float] | None = None
    actual_weights: list[float] | None = None
    tie_group_size: int | None = None
    straddles_cutoff: bool | None = None
    nan_count: int | None = None
    renormalize: bool | None = None
    routed_scaling_factor: float | None = None
    replay: str | None = None
    oracle_agrees_with: str | None = None
    clauses: list[str] | None = None  # v2: every clause the row breaks, the primary first
    # v2: the contract's output order; "any" (the columns carry no meaning): shown as matched, missing and extra experts
    output_order: str | None = None


@dataclass
class CheckResult:
    """What one check produced: the summary, the mismatch cells (a DataFrame of CELL_COLUMNS) and row examples."""

    summary: Summary
    cells: Any = None  # pandas.DataFrame with CELL_COLUMNS, or None for none
    details: list[RowDetail] = field(default_factory=list)


# ---------------------------------------------------------------- the nightly envelope


@dataclass
class NightlyEnvelope:
    """``nightly.json``: what a nightly ran, where its parts are, and its totals."""

    name: str = ""
    started: str = ""
    command: str = ""
    schema_version: int = 1
    kind: str = "router-contracts-nightly"
    suite: dict = field(default_factory=dict)
    finished: str | None = None
    duration_s: float | None = None
    options: dict = field(default_factory=dict)
    execution_target: dict = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    candidates: dict[str, dict] = field(default_factory=dict)
    pairs: dict[str, dict] = field(default_factory=dict)
    probe: dict = field(default_factory=dict)
    bench: dict = field(default_factory=dict)
    junit: str = "junit.xml"
    comparison: dict | None = None
    upload: dict | None = None
    interrupted: str | None = None  # v2: the signal that stopped the nightly


# ---------------------------------------------------------------- why a pair of candidates routes differently

# Here, not with the matrix's records (contracts.reports.matrix_schema): contracts.compare.departures builds these
# while it explains a case's rows, and the comparison reads no matrix record.


@dataclass
class PairDeparture:
    """Rows a pair routes differently, with why, side by side (``contracts.compare.departures``): for each side whether
    it follows the contract and, where it departs, how: a near tie, a declared clause, a variant of the contract (the
    trainer's bf16 score rounding, NaN first, ...) or ``unexplained`` (no known cause: never a guessed one)."""

    departs: str  # a | b | both | neither (neither: both within the contract: a near tie or the weight tolerance)
    a: str  # side a's words ("follows the contract" where it does)
    b: str
    a_key: str  # e.g. "variant:score_precision=input+weight_precision=input", "declared:tie_order", "follows"
    b_key: str
    rows: int = 0
    unexplained: bool = False  # a side departs with no known cause

    @property
    def words(self) -> str:
        """The cause in one phrase: the departing side's, both sides' (each named), or the pair's own."""
        if self.departs == "both":
            return f"{self.a} | {self.b}"
        return self.b if self.departs == "b" else self.a
