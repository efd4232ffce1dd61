"""Compare a candidate's output with the expected output, row by row and clause by clause.

Every row gets one verdict:

- ``exact``: ids equal, weights bit-equal (NaN matching NaN);
- ``within_tolerance``: ids equal (as a set, for contracts whose output
  order is ``any``), weights within the contract's tolerance;
- ``near_tie``: the expert sets or orders differ only among experts whose
  ranking values are closer than two faithful implementations' error
  bounds (``contracts.compare.tolerance``). Counted apart, never a failure;
- ``mismatch``: the row breaks a clause the candidate does not declare;
- ``expected``: every clause the row breaks is one the candidate declares.

``contracts.compare.attribution`` names every clause a row breaks (one per
aspect: validity, ids, weights) and the primary one, the first in
``CLAUSE_ORDER`` that is not declared. The comparison stays in tensors on
the case's device; only the rows a report shows (a few per clause, and the
mismatch cells up to a cap) become Python records.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from . import attribution as A
from .attribution.clauses import R_ACCURACY, R_GROUP_MASK_VALUE, R_SELECTION_FTZ
from .dense import add_faults, dense_faults, for_comparison, order_free
from .reasons import generic_reason, reason_text
from .shared import add_to_blame, split_shared
from .tolerance import BOUNDED_CLAUSES, declared_bound, plain_contract_tolerance, ulp_distance, weights_close, within_declared_accuracy

__all__ = ["DETAILS_PER_CLAUSE", "UNDECLARABLE", "VERDICTS", "CaseOutcome", "RowVerdicts", "ReadAnswer", "compare_case", "plain_output", "read_answer_for_blame", "row_blame"]

VERDICTS = ("exact", "within_tolerance", "near_tie", "mismatch", "expected")
# Clauses no declaration excuses: an id out of range, twice, or a fallback where eligible experts are left is
# no router's freedom (contracts.candidates.registry refuses such a declaration when a Candidate is built).
UNDECLARABLE = frozenset({"validity"})
DETAILS_PER_CLAUSE = 5
_WEIGHT_ACCURACY, _SELECTION = A.INDEX["weight_accuracy"], A.INDEX["selection"]
_GROUP_CLAUSES = (A.INDEX["group_selection"], A.INDEX["group_mask"])
_CHUNK = 8192  # bad rows attributed at a time: bounds the [B, k, k] and [B, E] work tensors


@dataclass
class CaseOutcome:
    rows: int
    verdict_counts: dict[str, int] = field(default_factory=dict)
    clause_rows: dict[str, int] = field(default_factory=dict)  # unexpected mismatches per primary clause
    expected_rows: dict[str, int] = field(default_factory=dict)  # declared deviations seen, per primary clause
    clauses_broken: dict[str, int] = field(default_factory=dict)  # mismatched rows breaking each undeclared clause
    expected_clauses: dict[str, int] = field(default_factory=dict)  # rows showing each declared clause
    inexact_weight_rows: int = 0
    max_weight_ulp: float = 0.0
    cells: list = field(default_factory=list)  # DataFrames of CELL_COLUMNS (without the case columns)
    cells_rows: int = 0  # cells in ``cells``
    cells_total: int = 0  # every differing cell of the case, recorded or not
    rows_detail: list[dict] = field(default_factory=list)  # a few per clause, tie-straddling rows preferred
    # Why the whole answer is unusable (not two tensors of [rows, k], modified inputs): on an empty batch no row
    # carries it, so the tally makes it an error of the candidate.
    case_problem: str | None = None
    # the unexpectedly mismatched rows (int64) and their primary clause (CLAUSE_ORDER index), for the diagnosis
    mismatched: torch.Tensor | None = None
    mismatched_primary: torch.Tensor | None = None
    # with ``per_row``: every row's verdict as a ``RowVerdicts`` (the matrix's train-versus-serve table reads it)
    per_row: "RowVerdicts | None" = None


def plain_output(value):
    """``(weights, ids)`` as plain, detached tensors: a tensor subclass cannot lie through ``==`` or ``isclose``."""
    w, ids = value
    return tuple(t.detach().as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t.detach() for t in (w, ids))


def validity_failure(actual, case) -> str | None:
    if not (isinstance(actual, (tuple, list)) and len(actual) == 2):
        return f"returned {type(actual).__name__}, not a (weights, ids) pair"
    w, ids = actual
    if not isinstance(w, torch.Tensor) or not isinstance(ids, torch.Tensor):
        return f"returned ({type(w).__name__}, {type(ids).__name__}), not two tensors"
    shape = (case.spec.rows, case.topk)
    if tuple(w.shape) != shape or tuple(ids.shape) != shape:
        return f"shapes weights {tuple(w.shape)}, ids {tuple(ids.shape)}; expected {shape}"
    if w.dtype != torch.float32 or ids.dtype != torch.int32:
        fix = " and ".join(f for f, bad in (("weights.float()", w.dtype != torch.float32), ("ids.int()", ids.dtype != torch.int32)) if bad)
        return f"dtypes weights {w.dtype}, ids {ids.dtype}; expected torch.float32 and torch.int32: return {fix}"
    device = case.scores.device
    if w.device != device or ids.device != device:
        return f"outputs on {w.device}/{ids.device}; the inputs were on {device}"
    if w.layout != torch.strided or ids.layout != torch.strided:
        return f"outputs of layout {w.layout}/{ids.layout}; expected dense tensors"
    return None


def _whole_case(case, problem: str, deviations) -> CaseOutcome:
    rows = case.spec.rows
    kind = "mismatch"  # validity cannot be declared: an answer that is not two tensors of the right kind never passes
    out = CaseOutcome(rows=rows, verdict_counts={**dict.fromkeys(VERDICTS, 0), kind: rows}, case_problem=problem)
    bucket = out.expected_rows if kind == "expected" else out.clause_rows
    bucket["validity"] = rows
    (out.expected_clauses if kind == "expected" else out.clauses_broken)["validity"] = rows
    out.rows_detail.append({"row": 0, "clause": "validity", "reason": problem, "verdict": kind, "clauses": ["validity"]})
    import pandas as pd

    out.cells.append(pd.DataFrame([{"row": 0, "col": -1, "clause": "validity", "verdict": kind, "reason": problem}]))
    out.cells_rows = out.cells_total = 1
    return out


def _validity_masks(ids: torch.Tensor, experts: int, c):
    out_of_range = ((ids < 0) | (ids >= experts)).any(1)
    ordered = ids.sort(dim=1).values
    repeats = ordered[:, 1:] == ordered[:, :-1]
    if c.allows_duplicate_ids:  # only the expert-0 fallback may repeat
        repeats &= ordered[:, 1:] != 0
    return out_of_range, repeats.any(1)


def _row_facts(keys, logits, ids, topk: int):
    """Per row: size of the tie group at the cutoff, whether it straddles, and its NaN logits (all of them: not only
    those of the groups a grouped contract keeps)."""
    cutoff = keys.gather(1, ids[:, topk - 1 : topk])
    group = (keys == cutoff).sum(1)
    inside = (keys.gather(1, ids) == cutoff).sum(1)
    return group, group > inside, torch.isnan(logits).sum(1)


def compare_case(case, exp, actual, contract, *, deviations: dict, inputs_changed: bool = False, exact: bool = False,
                 max_cells: int = 20000, quiet: frozenset = frozenset(), per_row: bool = False) -> CaseOutcome:  # fmt: skip
    """Compare ``actual`` with ``exp`` for every row of ``case``.

    ``per_row``: keep every row's verdict in ``CaseOutcome.per_row`` (an answer that is no answer at all keeps none).

    ``quiet``: kinds of row (``"near_tie"``, ``"expected"``, or ``"expected:CLAUSE"``: declared rows of that primary
    clause) that are counted but not recorded as examples
    or cells (the run already has its sample of them); a mismatched row is always recorded.
    """
    c = plain_contract_tolerance(contract, exact)  # --exact: bit identity, weights to 0 ULP, no near ties
    slot = None
    if not inputs_changed and c.shared_expert_slot == "last" and isinstance(actual, (tuple, list)) and len(actual) == 2:
        split = split_shared(exp, actual, c, case)  # the shared expert's column, checked apart
        if isinstance(split, str):
            return _whole_case(case, split, deviations)
        if split is not None:
            exp, actual, slot = split
    problem = "inputs were modified in place" if inputs_changed else validity_failure(actual, case)
    if problem:
        return _whole_case(case, problem, deviations)
    actual, faults = for_comparison(actual, exp), dense_faults(actual)
    if faults is not None:
        c = order_free(c)  # a dense answer has no column order: compared as a set, never blamed output_order
    w_act, ids_act = plain_output(actual)
    rows, experts = case.spec.rows, case.scores.shape[1]
    out = CaseOutcome(rows=rows, verdict_counts=dict.fromkeys(VERDICTS, 0))
    ids_equal = (ids_act == exp.ids).all(1)
    bit_equal = ((w_act == exp.weights) | (torch.isnan(w_act) & torch.isnan(exp.weights))).all(1)
    if slot is not None:
        bit_equal &= slot.exact
    if faults is not None:
        bit_equal &= faults == 0  # a row the map gets wrong is a validity finding, whatever its top k
    # Equal ids (the oracle's, so valid) with bit-equal weights are exact: a good candidate's rows nearly all
    # are, and one sync finds the rest, the only rows the tolerance, validity and ULP checks look at.
    rest = (~(ids_equal & bit_equal)).nonzero().squeeze(1)
    out.verdict_counts["exact"] = rows - rest.numel()
    if per_row:
        out.per_row = RowVerdicts.empty(rows, ids_act.device)
    if rest.numel() == 0:
        return out
    ids_rest, w_rest, we_rest, equal_rest = ids_act[rest], w_act[rest], exp.weights[rest], ids_equal[rest]
    oor_rest, twice_rest = _validity_masks(ids_rest, experts, c)
    good_rest = equal_rest & weights_close(w_rest, we_rest, c).all(1) & ~oor_rest & ~twice_rest
    if slot is not None:
        good_rest &= ~slot.bad[rest]
    if faults is not None:
        good_rest &= faults[rest] == 0
    out.verdict_counts["within_tolerance"] = out.inexact_weight_rows = int(good_rest.sum())
    if bool(equal_rest.any()):
        finite = ulp_distance(w_rest[equal_rest], we_rest[equal_rest])
        finite = finite[torch.isfinite(finite)]
        out.max_weight_ulp = float(finite.max()) if finite.numel() else 0.0
    out_of_range = torch.zeros(rows, dtype=torch.bool, device=rest.device).index_put_((rest,), oor_rest)
    twice = torch.zeros(rows, dtype=torch.bool, device=rest.device).index_put_((rest,), twice_rest)
    bad = rest[~good_rest]
    declared_clauses = torch.tensor([name in deviations and name not in UNDECLARABLE for name in A.CLAUSE_ORDER], device=bad.device)
    bounds = {clause: declared_bound(deviations, clause) for clause in BOUNDED_CLAUSES}
    for start in range(0, bad.numel(), _CHUNK):
        rows_b = bad[start : start + _CHUNK]
        values = exp.values(rows_b)
        blame = A.attribute(case, exp, values, w_act, ids_act, rows_b, c, out_of_range=out_of_range, twice=twice, ids_equal=ids_equal)
        if slot is not None:
            add_to_blame(blame, slot, rows_b)
        if faults is not None:
            add_faults(blame, faults, rows_b)
        declared = _declared_per_row(declared_clauses, blame, w_act.index_select(0, rows_b), bounds)
        _count(out, blame, declared)
        _keep_mismatched(out, rows_b, blame, declared)
        if out.per_row is not None:
            out.per_row.fill(rows_b, blame, declared)
        differing = (exp.ids.index_select(0, rows_b) != ids_act.index_select(0, rows_b)) | ~blame.weights_ok
        out.cells_total += int((differing & ~_verdicts(blame, declared)[5].unsqueeze(1)).sum())
        if out.cells_rows < max_cells or len(out.rows_detail) < DETAILS_PER_CLAUSE * len(A.CLAUSE_ORDER):
            _record(out, case, exp, values, w_act, ids_act, rows_b, blame, declared, max_cells, quiet)
    for d in out.rows_detail:  # the reports show a row of an order-free contract as sets (contracts.reports.sets)
        d["output_order"] = c.output_order
    return out


def _declared_per_row(declared: torch.Tensor, blame, weights: torch.Tensor, bounds: dict[str, float | None]) -> torch.Tensor:
    """What each row's declarations excuse, ``[B, clauses]``: the declared clauses, but a declared bounded clause
    (``tolerance.BOUNDED_CLAUSES``) only where the row lies within its bound: weight_accuracy where every weight is
    within it of the contract's weights for the row's own experts, selection where the choice departs from the
    contract's cutoff by no more (``attribution.selection_departure``), group_selection and group_mask where the
    groups used depart from a choice by group score by no more (``attribution.group_departure``)."""
    within = {}
    if bounds.get("weight_accuracy") is not None and bool(declared[_WEIGHT_ACCURACY]):
        # the catch-all only: weights that are the contract's cast to bf16 or fp16 (an exact counterfactual) are bounded
        catch_all = ((blame.weights == _WEIGHT_ACCURACY) & (blame.weights_code == R_ACCURACY)) | (
            (blame.weights2 == _WEIGHT_ACCURACY) & (blame.weights2_code == R_ACCURACY))
        ok = within_declared_accuracy(weights, blame.reference_weights, bounds["weight_accuracy"])
        within[_WEIGHT_ACCURACY] = ok | ~catch_all
    if bounds.get("selection") is not None and bool(declared[_SELECTION]):
        # the catch-all only: a choice the flushed-subnormal counterfactual gives exactly is that rule's
        ftz = (blame.ids == _SELECTION) & (blame.ids_code == R_SELECTION_FTZ)
        within[_SELECTION] = (blame.selection_departure <= bounds["selection"]) | ftz
    for clause in _GROUP_CLAUSES:
        name = A.CLAUSE_ORDER[clause]
        if bounds.get(name) is not None and bool(declared[clause]):
            # a leak the other mask value (-inf / 0.0) gives exactly is that rule's, whatever the bound
            other_mask = (blame.ids == clause) & (blame.ids_code == R_GROUP_MASK_VALUE)
            within[clause] = (blame.group_departure <= bounds[name]) | other_mask
    if not within:
        return declared
    rows = declared.unsqueeze(0).repeat(weights.shape[0], 1)
    for clause, ok in within.items():
        rows[:, clause] &= ok
    return rows


def _keep_mismatched(out: CaseOutcome, rows_b, blame, declared) -> None:
    _, _, mismatch, _, _, _, primary = _verdicts(blame, declared)
    rows, prim = rows_b[mismatch], primary[mismatch]
    if out.mismatched is None:
        out.mismatched, out.mismatched_primary = rows, prim
    else:
        out.mismatched = torch.cat([out.mismatched, rows])
        out.mismatched_primary = torch.cat([out.mismatched_primary, prim])


@dataclass
class ReadAnswer:
    """An answer as the attribution reads it, for ``row_blame`` and the diagnosis' per-row declarations: the shared
    expert's column split off (``slot``), a dense answer's faults (``faults``; its contract then order-free), the
    plain ``[M, k]`` weights and ids, and the validity masks."""

    exp: object
    contract: object
    w_act: torch.Tensor
    ids_act: torch.Tensor
    slot: object
    faults: torch.Tensor | None
    out_of_range: torch.Tensor
    twice: torch.Tensor
    ids_equal: torch.Tensor

    def attribute(self, case, rows: torch.Tensor):
        """The blame of ``rows`` (indices into the case), the shared slot's and the dense faults' added."""
        blame = A.attribute(case, self.exp, self.exp.values(rows), self.w_act, self.ids_act, rows, self.contract,
                            out_of_range=self.out_of_range, twice=self.twice, ids_equal=self.ids_equal)  # fmt: skip
        if self.slot is not None:
            add_to_blame(blame, self.slot, rows)
        if self.faults is not None:
            add_faults(blame, self.faults, rows)
        return blame


def read_answer_for_blame(case, exp, actual, contract) -> ReadAnswer:
    """``actual`` against ``exp`` under ``contract``, read as ``compare_case`` reads a valid answer (see ``ReadAnswer``)."""
    c, slot = contract, None
    if c.shared_expert_slot == "last":
        split = split_shared(exp, actual, c, case)
        if isinstance(split, tuple):
            exp, actual, slot = split
    actual, faults = for_comparison(actual, exp), dense_faults(actual)
    if faults is not None:
        c = order_free(c)
    w_act, ids_act = plain_output(actual)
    out_of_range, twice = _validity_masks(ids_act, case.scores.shape[1], c)
    return ReadAnswer(exp, c, w_act, ids_act, slot, faults, out_of_range, twice, (ids_act == exp.ids).all(1))


def row_blame(case, exp, actual, contract) -> torch.Tensor:
    """bool ``[M, len(CLAUSE_ORDER)]``: every clause each row of ``case`` breaks (all False for a clean row)."""
    r = read_answer_for_blame(case, exp, actual, contract)
    good = r.ids_equal & weights_close(r.w_act, r.exp.weights, r.contract).all(1) & ~r.out_of_range & ~r.twice
    if r.slot is not None:
        good &= ~r.slot.bad
    if r.faults is not None:
        good &= r.faults == 0
    broken = torch.zeros((case.spec.rows, len(A.CLAUSE_ORDER)), dtype=torch.bool, device=r.ids_act.device)
    bad = (~good).nonzero().squeeze(1)
    if bad.numel():
        broken[bad] = r.attribute(case, bad).broken()
    return broken


@dataclass
class RowVerdicts:
    """``compare_case``'s verdict of every row, as per-row tensors (``[M]`` bool; ``primary`` a CLAUSE_ORDER index,
    meaningful where ``mismatch`` or ``expected``): what the matrix's train-versus-serve table reads row by row."""

    mismatch: torch.Tensor
    expected: torch.Tensor
    near_tie: torch.Tensor
    primary: torch.Tensor

    @classmethod
    def empty(cls, rows: int, device) -> "RowVerdicts":
        flags = [torch.zeros(rows, dtype=torch.bool, device=device) for _ in range(3)]
        return cls(*flags, torch.zeros(rows, dtype=torch.long, device=device))

    def fill(self, rows_b: torch.Tensor, blame, declared) -> None:
        _, _, mismatch, expected, near, _, primary = _verdicts(blame, declared)
        self.mismatch[rows_b], self.expected[rows_b], self.near_tie[rows_b] = mismatch, expected, near
        self.primary[rows_b] = primary

    @property
    def differs(self) -> torch.Tensor:
        """The rows a comparison counts as routed differently (``MatrixPair.rows_differing``'s rows)."""
        return self.mismatch | self.expected | self.near_tie


def _bincount(values: torch.Tensor, names=A.CLAUSE_ORDER) -> dict[str, int]:
    counts = torch.bincount(values, minlength=len(names)).tolist() if values.numel() else [0] * len(names)
    return {name: n for name, n in zip(names, counts) if n}


def _add(into: dict, more: dict) -> None:
    for key, n in more.items():
        into[key] = into.get(key, 0) + n


def _primary(broken: torch.Tensor) -> torch.Tensor:
    """Index of the first True along dim 1 (the CLAUSE_ORDER priority)."""
    return broken.float().argmax(1)


def _verdicts(blame, declared):
    broken = blame.broken()
    undeclared = broken & ~declared
    mismatch = undeclared.any(1)
    expected = ~mismatch & broken.any(1)
    near = ~broken.any(1) & (blame.ids == A.NEAR_TIE)
    matched = ~broken.any(1) & ~near  # e.g. the same set in another order, where the contract leaves the order open
    primary = torch.where(mismatch, _primary(undeclared), _primary(broken))
    return broken, undeclared, mismatch, expected, near, matched, primary


def _count(out: CaseOutcome, blame, declared) -> None:
    broken, undeclared, mismatch, expected, near, matched, primary = _verdicts(blame, declared)
    v = out.verdict_counts
    v["mismatch"] += int(mismatch.sum())
    v["expected"] += int(expected.sum())
    v["near_tie"] += int(near.sum())
    v["within_tolerance"] += int(matched.sum())
    _add(out.clause_rows, _bincount(primary[mismatch]))
    _add(out.expected_rows, _bincount(primary[expected]))
    _add(out.clauses_broken, {n: int(x) for n, x in zip(A.CLAUSE_ORDER, undeclared.sum(0).tolist()) if x})
    _add(out.expected_clauses, {n: int(x) for n, x in zip(A.CLAUSE_ORDER, (broken & declared).sum(0).tolist()) if x})


def _reasons(i: int, rows: dict, case) -> list[tuple[str, str]]:
    """(clause or 'near_tie', reason) of each aspect row ``i`` breaks, in aspect order."""
    pairs = []
    for aspect, code in zip(rows["aspects"][i], rows["codes"][i]):
        if aspect >= 0 or aspect == A.NEAR_TIE:
            name = A.CLAUSE_ORDER[aspect] if aspect >= 0 else "near_tie"
            text = reason_text(code, e=rows["e"][i], a=rows["a"][i], slot=rows["slot"][i], numbers=rows["numbers"][i],
                               valid=rows["valid"][i], total=rows["total"][i], rsf=case.routed_scaling_factor,
                               factor=rows["factor"][i])  # fmt: skip
            pairs.append((name, text))
    return pairs


def _record(out: CaseOutcome, case, exp, values, w_act, ids_act, rows_b, blame, declared, max_cells: int, quiet: frozenset) -> None:
    """Row examples (a few per primary clause, the only per-row Python) and mismatch cells (vectorized, up to the cap)."""
    _, _, mismatch, expected, near, matched, primary = _verdicts(blame, declared)
    keep = ~matched
    if "near_tie" in quiet:
        keep &= ~near
    if "expected" in quiet:
        keep &= ~expected
    clauses = [A.INDEX[k[len("expected:"):]] for k in quiet if k.startswith("expected:") and k[len("expected:"):] in A.INDEX]
    if clauses:  # declared rows whose primary clause has its examples already ("expected:CLAUSE")
        keep &= ~(expected & torch.isin(primary, torch.tensor(clauses, device=primary.device)))
    if not bool(keep.any()):  # nothing here the report still needs: the counts are already in ``out``
        return
    e_b, a_b = exp.ids.index_select(0, rows_b), ids_act.index_select(0, rows_b)
    we_b, wa_b = exp.weights.index_select(0, rows_b), w_act.index_select(0, rows_b)
    group, straddles, nan_count = _row_facts(values.keys, case.scores.index_select(0, rows_b), e_b.long(), case.topk)
    label = torch.where(near, torch.full_like(primary, -1), primary)  # -1: near tie
    kind = torch.where(mismatch, 0, torch.where(expected, 1, 2))  # index into _KINDS
    detail_rows = _detail_rows(out, keep, label, straddles)
    if detail_rows:
        sub = torch.tensor(detail_rows, device=rows_b.device)
        chosen = values.scores.index_select(0, sub).gather(1, a_b.index_select(0, sub).long().clamp(0, values.scores.shape[1] - 1))
        rows = {
            name: t.index_select(0, sub).tolist() if t.shape[0] == rows_b.shape[0] else t.tolist()
            for name, t in (
                ("row", rows_b), ("e", e_b), ("a", a_b), ("we", we_b), ("wa", wa_b), ("group", group), ("straddles", straddles),
                ("nan", nan_count), ("label", label), ("kind", kind), ("slot", blame.slot),
                ("codes", torch.stack(blame.codes(), 1)), ("factor", blame.factor),
                ("aspects", torch.stack(blame.aspects(), 1)), ("valid", values.valid),
                ("numbers", (~torch.isnan(values.selection)).sum(1)), ("total", chosen.sum(1)),
            )
        }  # fmt: skip
        for i in range(len(detail_rows)):
            _add_detail(out, rows, i, case)
    room = max_cells - out.cells_rows
    if room > 0:
        _add_cells(out, keep, rows_b, e_b, a_b, we_b, wa_b, blame, label, kind, group, straddles, nan_count, room)


_KINDS = ("mismatch", "expected", "near_tie")


def _detail_rows(out: CaseOutcome, keep, label, straddles) -> list[int]:
    """Indices (into the chunk) of the rows to show: the first few of each clause, tie-straddling ones preferred."""
    seen: dict[int, list[int]] = {}
    for d in out.rows_detail:
        key = -1 if d["clause"] == "near_tie" else A.INDEX.get(d["clause"], -3)
        entry = seen.setdefault(key, [0, 0])
        entry[0] += 1
        entry[1] += bool(d.get("straddles_cutoff"))
    chosen = torch.zeros_like(keep)
    for value in torch.unique(label[keep]).tolist():
        had, had_straddling = seen.get(value, [0, 0])
        group = keep & (label == value)
        chosen |= group & (group.cumsum(0) <= DETAILS_PER_CLAUSE - had)
        straddling = group & straddles
        chosen |= straddling & (straddling.cumsum(0) <= DETAILS_PER_CLAUSE - had_straddling)
    return chosen.nonzero().squeeze(1).tolist()


def _add_detail(out: CaseOutcome, rows: dict, i: int, case) -> None:
    kind = _KINDS[rows["kind"][i]]
    clause = "near_tie" if rows["label"][i] < 0 else A.CLAUSE_ORDER[rows["label"][i]]
    pairs = _reasons(i, rows, case)
    pairs.sort(key=lambda p: p[0] != clause)  # the primary clause first
    reason = "; ".join([pairs[0][1]] + [f"also {name}: {text}" for name, text in pairs[1:]]) if pairs else ""
    out.rows_detail.append({
        "row": rows["row"][i], "clause": clause, "verdict": kind, "reason": reason,
        "clauses": [name for name, _ in pairs if name != "near_tie"] or None,
        "expected_ids": rows["e"][i], "actual_ids": rows["a"][i], "expected_weights": rows["we"][i],
        "actual_weights": rows["wa"][i], "tie_group_size": rows["group"][i], "straddles_cutoff": bool(rows["straddles"][i]),
        "nan_count": rows["nan"][i],
    })  # fmt: skip


def _add_cells(out: CaseOutcome, keep, rows_b, e_b, a_b, we_b, wa_b, blame, label, kind, group, straddles, nan_count, room: int) -> None:
    """The differing cells of the kept rows, as columns (no per-cell Python): at most ``room`` more."""
    import numpy as np
    import pandas as pd

    mask = ((e_b != a_b) | ~blame.weights_ok) & keep.unsqueeze(1)
    where = mask.nonzero()
    if where.numel() == 0:
        return
    where = where[:room]
    r, col = where[:, 0], where[:, 1]
    names = np.array(["near_tie", *A.CLAUSE_ORDER], dtype=object)
    codes = torch.where(label >= 0, torch.stack(blame.codes(), 1)
                        .gather(1, _aspect_of(label, blame).unsqueeze(1)).squeeze(1), blame.ids_code)[r].cpu().numpy()  # fmt: skip
    unique = np.unique(codes)
    reasons = np.array([generic_reason(int(x)) for x in unique], dtype=object)[np.searchsorted(unique, codes)]
    frame = pd.DataFrame({
        "row": rows_b[r].cpu().numpy(), "col": col.cpu().numpy(),
        "expected_id": e_b[r, col].cpu().numpy(), "actual_id": a_b[r, col].cpu().numpy(),
        "expected_weight": we_b[r, col].cpu().numpy(), "actual_weight": wa_b[r, col].cpu().numpy(),
        "weight_ulp": ulp_distance(wa_b[r, col], we_b[r, col]).cpu().numpy(),
        "clause": names[(label[r] + 1).cpu().numpy()], "verdict": np.array(_KINDS, dtype=object)[kind[r].cpu().numpy()],
        "reason": reasons,
        "tie_group_size": group[r].cpu().numpy(), "straddles_cutoff": straddles[r].cpu().numpy(), "nan_count": nan_count[r].cpu().numpy(),
    })  # fmt: skip
    out.cells.append(frame)
    out.cells_rows += len(frame)


def _aspect_of(label, blame) -> torch.Tensor:
    """Which aspect (an index into ``blame.aspects()``) holds each row's primary clause (the first that does)."""
    aspects = torch.stack(blame.aspects(), 1)
    return (aspects == label.unsqueeze(1)).float().argmax(1)
