"""The records that cross module boundaries, and the rules of their fields.

Every writer builds these and every reader gets them back from
``contracts.reports.bundle``; nothing else builds or parses the JSON. Field
names on disk are fixed (``summary.json``, ``details.json``, the mismatch
cells, ``nightly.json``): tools downstream read them.

``schema_version`` 1 is the layout before typed records; version 2 adds
fields (every one optional, so a version-1 file reads as version 2 with
defaults). ``from_json`` refuses a file whose fields have the wrong types,
naming the file and the field.

Status rules live here once (``decide_status``, ``worst_status``): the
check, the merge of shards and the distributed gather all use them.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Union

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
    "MatrixMember",
    "MatrixPair",
    "MatrixReport",
    "NightlyEnvelope",
    "OptionCounts",
    "PairExample",
    "PairFamily",
    "RecordError",
    "ReplayTarget",
    "RowDetail",
    "Status",
    "SplitView",
    "Summary",
    "decide_status",
    "from_json",
    "to_json",
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


# ---------------------------------------------------------------- the agreement matrix (matrix.json)


@dataclass
class PairFamily:
    """One pair's counts in one family."""

    rows_compared: int = 0
    rows_differing: int = 0
    near_tie_rows: int = 0
    causes: dict[str, int] = field(default_factory=dict)


@dataclass
class PairExample:
    """One row on which the two sides of a pair differ, side by side, with the command that replays it."""

    family: str
    case: str  # the case's replay id, FAMILY:SEED:ROWS
    row: int
    cause: str  # the primary clause, or near_tie: how ``departs`` differs from the other side
    reason: str
    departs: str  # the side the cause describes: on this case the oracle agreed with the other side at least as often
    a_ids: list[int]
    b_ids: list[int]
    a_weights: list[float]
    b_weights: list[float]
    oracle_ids: list[int] | None = None
    oracle_weights: list[float] | None = None
    renormalize: bool | None = None
    routed_scaling_factor: float | None = None
    replay: str = ""


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


@dataclass
class MatrixPair:
    """Two candidates (or a candidate and the oracle, ``b == "oracle"``) on the same rows.

    ``rows_differing``: rows whose ids differ (exactly, in the contract's
    order) or whose weights differ beyond the contract's tolerance, near
    ties included (``near_tie_rows`` of them): the rows the two route
    differently. ``causes``: those rows by primary clause (``near_tie`` for
    near ties). The clause names how one side departs from the other, taken
    as the reference: per case, the side the oracle agrees with more often
    is the reference (each example says which side departs). Against the
    oracle, ``declared_rows`` of them differ only in clauses ``a`` declares.
    """

    a: str
    b: str
    rows_compared: int = 0
    rows_differing: int = 0
    near_tie_rows: int = 0
    declared_rows: int = 0
    causes: dict[str, int] = field(default_factory=dict)
    clauses_broken: dict[str, int] = field(default_factory=dict)  # a row counted under every clause it breaks
    families: dict[str, PairFamily] = field(default_factory=dict)
    rows_not_compared: int = 0
    not_compared: dict[str, int] = field(default_factory=dict)  # why -> rows
    oracle_agrees: AgainstSides | None = None  # two candidates: differing rows by the side the oracle takes
    examples: list[PairExample] = field(default_factory=list)
    # the rows_differing again, by why each side routes them as it does (they add up to rows_differing), most first
    departures: list[PairDeparture] = field(default_factory=list)
    unexplained_rows: int = 0  # of them, rows where a side departs from the contract with no known cause

    @property
    def label(self) -> str:
        return f"{self.a} vs {self.b}"

    @property
    def undeclared_rows(self) -> int:
        return self.rows_differing - self.declared_rows


@dataclass
class MatrixMember:
    """One candidate of a matrix: whether it ran, and what it answered."""

    name: str
    status: Status  # against the oracle, as a check would say (declared deviations allowed)
    contract: str = ""  # the contract it claims
    device: str = ""
    description: str = ""
    reason: str | None = None  # why it did not run (unavailable)
    error: ErrorRecord | None = None  # what ended its run
    isolated: bool = False
    declared: dict[str, str] = field(default_factory=dict)  # its declared deviations under the matrix's contract
    rows_answered: int = 0
    rows_skipped: int = 0  # cases it does not cover
    rows_raised: int = 0  # cases on which it raised
    rows_invalid: int = 0  # answers that are not (weights, ids) of the right shape, or inputs modified
    duration_s: float = 0.0  # its calls, seconds

    def validate(self, source: str = "matrix member") -> "MatrixMember":
        need = {Status.UNAVAILABLE: "reason", Status.ERROR: "error"}.get(self.status)
        if need and getattr(self, need) in (None, ""):
            raise RecordError(f"{source} {self.name!r}: status {self.status.value!r} needs field {need!r}")
        return self


@dataclass
class SplitView:
    """The prefill/decode view: the same rows routed by ``below`` in batches of fewer than ``split`` rows
    and by ``above`` in batches of at least ``split`` rows; ``pair`` counts the rows whose routing changes."""

    below: str
    above: str
    split: int
    pair: MatrixPair  # a = below@M<split, b = above@M>=split
    members: list[MatrixMember] = field(default_factory=list)  # the two sides, as they ran


@dataclass
class MatrixReport:
    """``matrix.json``: several candidates on the same cases, every pair compared, and each against the oracle."""

    contract: str
    device: str
    kind: str = "router-contracts-matrix"
    schema_version: int = 1
    candidates: list[MatrixMember] = field(default_factory=list)  # in --candidate order
    pairs: list[MatrixPair] = field(default_factory=list)  # every two candidates, a before b in that order
    oracle: list[MatrixPair] = field(default_factory=list)  # each candidate against the oracle (b == "oracle")
    split: SplitView | None = None
    rows: int = 0  # planned
    rows_run: int = 0  # rows of the cases that ran
    seed: int = 0
    families: list[str] = field(default_factory=list)
    experts: int = 896
    topk: int = 16
    weight_rtol: float = 0.0
    weight_atol: float = 0.0
    command: str = ""
    interrupted: str | None = None
    environment: dict | None = None
    duration_s: float | None = None
    files: dict[str, str] = field(default_factory=dict)  # the bundle's other files: role -> name
    quick: bool = False  # a quick look (matrix --quick): the thin plan of check --quick; its statuses read "PASS (quick)"

    def validate(self, source: str = "matrix.json") -> "MatrixReport":
        if self.kind != "router-contracts-matrix":
            raise RecordError(f"{source}: kind {self.kind!r} is not a matrix report")
        names = [m.name for m in self.candidates]
        for m in self.candidates:
            m.validate(f"{source}: candidate")
        for p in self.oracle:
            if p.a not in names or p.b != "oracle":
                raise RecordError(f"{source}: oracle pair {p.label!r} must be a candidate vs 'oracle'")
        for p in self.pairs:
            for side in (p.a, p.b):
                if side not in names:
                    raise RecordError(f"{source}: pair {p.label!r} names {side!r}, which is not one of its candidates")
        if self.split is not None:
            for m in self.split.members:
                m.validate(f"{source}: split side")
            if {self.split.pair.a, self.split.pair.b} != {m.name for m in self.split.members}:
                raise RecordError(f"{source}: the split pair {self.split.pair.label!r} does not name its two sides")
        for p in (*self.pairs, *self.oracle, *((self.split.pair,) if self.split else ())):
            if not 0 <= p.rows_differing <= p.rows_compared:
                raise RecordError(f"{source}: pair {p.label!r}: rows_differing={p.rows_differing} does not fit rows_compared={p.rows_compared}")
        return self

    def member(self, name: str) -> MatrixMember:
        return next(m for m in self.candidates if m.name == name)

    def pair(self, a: str, b: str) -> MatrixPair | None:
        """The pair of candidates ``a`` and ``b``, in either order."""
        return next((p for p in self.pairs if {p.a, p.b} == {a, b}), None)

    def against_oracle(self, name: str) -> MatrixPair | None:
        return next((p for p in self.oracle if p.a == name), None)


# ---------------------------------------------------------------- JSON <-> records


def _type_name(tp) -> str:
    return getattr(tp, "__name__", str(tp).replace("typing.", ""))


def _convert(tp, value, where: str):
    origin = typing.get_origin(tp)
    if tp is Any:
        return value
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _convert(option, value, where)
            except RecordError as exc:
                errors.append(str(exc))
        raise RecordError(errors[0] if errors else f"{where}: unexpected null")
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecordError(f"field {where}: expected an object, got {type(value).__name__}")
        return _record(tp, value, where)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in tp)
            raise RecordError(f"field {where}: {value!r} is not one of {allowed}") from None
    if origin is list or tp is list:
        if not isinstance(value, list):
            raise RecordError(f"field {where}: expected a list, got {type(value).__name__}")
        (item,) = typing.get_args(tp) or (Any,)
        return [_convert(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise RecordError(f"field {where}: expected an object, got {type(value).__name__}")
        _, item = typing.get_args(tp) or (str, Any)
        return {str(k): _convert(item, v, f"{where}.{k}") for k, v in value.items()}
    if tp is bool:
        if not isinstance(value, bool):
            raise RecordError(f"field {where}: expected true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(f"field {where}: expected an integer, got {_short(value)}")
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise RecordError(f"field {where}: {_short(value)} is out of range; integers here are from {-INT64_MAX - 1:,} to {INT64_MAX:,}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(f"field {where}: expected a number, got {_short(value)}")
        try:
            return float(value)
        except OverflowError:
            raise RecordError(f"field {where}: {_short(value)} is out of range for a number (at most about 1.8e308)") from None
    if tp is str:
        if not isinstance(value, str):
            raise RecordError(f"field {where}: expected a string, got {value!r}")
        return value
    raise RecordError(f"field {where}: no rule for type {_type_name(tp)}")


def _short(value) -> str:
    """``repr(value)``, with an integer of many digits shown by its first digits and its length."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value).bit_length() > 128:
        digits = str(abs(value)) if abs(value).bit_length() < 14000 else None
        return f"{'-' if value < 0 else ''}{digits[:12]}... ({len(digits)} digits)" if digits else "an integer of over 4,000 digits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_HINTS: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _record(cls, data: dict, where: str):
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            values[f.name] = _convert(hints[f.name], data[f.name], f"{where}.{f.name}" if where else f.name)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise RecordError(f"field {(where + '.') if where else ''}{f.name} is missing")
    return cls(**values)


def from_json(cls, data, source: str):
    """``data`` (parsed JSON) as a ``cls`` record; ``RecordError`` naming ``source`` and the field."""
    if not isinstance(data, dict):
        raise RecordError(f"{source}: expected a JSON object, got {type(data).__name__}")
    version = data.get("schema_version", 1)
    if "schema_version" in {f.name for f in dataclasses.fields(cls)} and version not in READABLE_SCHEMA_VERSIONS:
        if not (cls is NightlyEnvelope and isinstance(version, int)):
            raise RecordError(f"{source}: schema_version {version!r} is not one this harness reads ({READABLE_SCHEMA_VERSIONS})")
    try:
        record = _record(cls, data, "")
    except RecordError as exc:
        raise RecordError(f"{source}: {exc}") from None
    return record.validate(source) if hasattr(record, "validate") else record


def _plain(value):
    if isinstance(value, enum.Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return value  # json writes NaN/Infinity; the readers of this project accept them
    return value


def to_json(record) -> dict:
    """A record as plain JSON data (enums as their values), field order kept."""
    return _plain(record)
