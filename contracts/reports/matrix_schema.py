"""The records of ``matrix.json`` (the agreement matrix, ``python -m contracts matrix``): each candidate, each pair of
candidates and each candidate against the oracle, and the prefill/decode view. Read and written, as every record,
through ``contracts.reports.bundle`` (``schema.from_json``, ``schema.to_json``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .schema import AgainstSides, ErrorRecord, PairDeparture, RecordError, Status

__all__ = ["MatrixMember", "MatrixPair", "MatrixReport", "PairExample", "PairFamily", "SplitView"]


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
