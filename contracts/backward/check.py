"""``check_backward``: a candidate's gradient of its routed weights against autograd of its contract in float64.

Per case (``cases.make_case``): the candidate routes fp32 logits (and bias) that require grad; the upstream
gradient dL/dweights is seeded; ``torch.autograd.grad`` gives the candidate's dL/dlogits (and dL/dbias); the
reference is ``oracle.grad.reference_gradient`` at the candidate's *own* selection and column order, so a forward
mismatch is not counted twice. Rows whose chosen set differs from the oracle's are not compared (the forward check
owns them): they are counted as ``skipped_selection``. A check that compared no row is NOT COVERED, never a PASS.

An exception in the candidate's forward or backward is the candidate's ERROR, with its one-line message; a router
whose weights carry no gradient is NOT DIFFERENTIABLE. Neither is a traceback.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field

import torch

import oracle
from oracle.grad import differentiable_route, reference_gradient

from .attribution import RowBlame, blame_rows, close, row_scale
from .cases import BackwardCase, make_case
from .clauses import CATCH_ALL, GRAD_CLAUSES, GradTolerance
from .declared import backward_deviations

__all__ = ["BackwardResult", "GradMismatch", "RowDetail", "check_backward", "replay_line"]

STATUSES = ("PASS", "FAIL", "ERROR", "NOT DIFFERENTIABLE", "NOT COVERED")


@dataclass(frozen=True)
class GradMismatch:
    """One mismatched (or declared) row: where, which clause, its worst entry, and the command that replays it."""

    case: int
    row: int
    clause: str
    declared: bool
    of: str  # "logits" or "bias"
    expert: int
    expected: float
    actual: float
    excess: float  # |actual - expected| over its allowance
    renormalize: bool
    routed_scaling_factor: float
    replay: str


@dataclass(frozen=True)
class RowDetail:
    """One row side by side (a replay's ``--row``): the candidate's experts and both gradients, every expert."""

    case: int
    row: int
    ids: list[int]
    expected: list[float]
    actual: list[float]
    checked: bool
    scale: float  # the row's tolerance scale (|rsf| * max |upstream|)


@dataclass
class BackwardResult:
    candidate: str
    contract: str
    device: str
    status: str = "PASS"
    rows_checked: int = 0
    skipped_selection: int = 0  # the candidate chose another set than the oracle: the forward check's rows
    skipped_uncovered: int = 0  # the candidate's covered gate declined the call
    mismatched: int = 0
    declared: int = 0
    cases: int = 0
    clauses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GRAD_CLAUSES, 0))
    declared_clauses: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GRAD_CLAUSES, 0))
    mismatches: list[GradMismatch] = field(default_factory=list)
    error: str | None = None
    tolerance: GradTolerance = field(default_factory=GradTolerance)
    deviations: dict[str, str] = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    seconds: float = 0.0
    detail: RowDetail | None = None

    def as_dict(self) -> dict:
        out = dataclasses.asdict(self)
        out["tolerance"] = self.tolerance.as_dict()
        out["deviations"] = {k: str(v) for k, v in self.deviations.items()}
        return out


class _CandidateFailed(Exception):
    """The candidate raised or answered malformed: its ERROR (message), not the harness's."""


class _NotDifferentiable(Exception):
    pass


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _route_of(candidate, c: oracle.Contract, contract_name: str):
    if candidate.name == "oracle":  # the oracle's forward is not differentiable; its backward form is oracle.grad's
        return functools.partial(differentiable_route, contract=c)
    return candidate.route_under(contract_name)


def replay_line(lookup: str, contract: str, device: str, options: dict, case: int, row: int) -> str:
    parts = ["python -m contracts backward", f"--candidate {lookup}", f"--contract {contract}", f"--device {device}",
             f"--experts {options['experts']}", f"--topk {options['topk']}", f"--rows-per-case {options['rows_per_case']}",
             f"--seed {options['seed']}"]  # fmt: skip
    if options.get("num_expert_group"):
        parts += [f"--num-expert-group {options['num_expert_group']}", f"--topk-group {options['topk_group']}"]
    return " ".join(parts + [f"--replay {case}", f"--row {row}"])


def check_backward(candidate, contract=None, *, device: str = "cpu", rows: int = 64, rows_per_case: int = 8,
                   seed: int = 0, experts: int | None = None, topk: int | None = None,
                   num_expert_group: int | None = None, topk_group: int | None = None,
                   tolerance: GradTolerance | None = None, deviations: dict[str, str] | None = None,
                   replay: int | None = None, row: int | None = None, lookup: str | None = None) -> BackwardResult:  # fmt: skip
    """Check ``candidate`` (a ``Candidate`` or a name ``get_candidate`` resolves) under ``contract`` (default: its own).

    ``rows`` rows in cases of ``rows_per_case``; ``replay``: only that case (``row``: keep that row's detail).
    ``deviations`` overrides the candidate's declared backward deviations (``declared.backward_deviations``)."""
    from ..candidates import get_candidate  # here: the registry is imported by the caller's process anyway
    from ..run.replay import candidate_lookup

    started = time.monotonic()
    if isinstance(candidate, str):
        candidate = get_candidate(candidate)
    contract_name = contract if isinstance(contract, str) else (candidate.contract if contract is None else None)
    c = oracle.get_contract(contract if contract is not None else candidate.contract)
    label = contract_name or oracle.contract_label(c)
    experts = experts or c.experts
    topk = topk or c.topk
    groups = {}
    if c.is_grouped or num_expert_group is not None:
        groups = {"num_expert_group": num_expert_group or c.n_group, "topk_group": topk_group or c.topk_group}
    tol = tolerance or GradTolerance()
    declared = backward_deviations(candidate, label) if deviations is None else dict(deviations)
    options = {"experts": experts, "topk": topk, "rows": rows, "rows_per_case": rows_per_case, "seed": seed, **groups}
    result = BackwardResult(candidate.name, label, device, tolerance=tol, deviations=declared, options=options)
    lookup = lookup or candidate_lookup(candidate)  # what get_candidate resolves: a replay line that runs
    route = _route_of(candidate, c, label)
    n_cases = max(1, -(-rows // rows_per_case))
    indices = range(n_cases) if replay is None else [replay]
    try:
        for index in indices:
            case = make_case(c, index=index, seed=seed, rows=rows_per_case, experts=experts, topk=topk, groups=groups)
            case = _on(case, device)
            _check_case(candidate, route, c, case, tol, declared, result, lookup, device, options, row)
            result.cases += 1
    except _CandidateFailed as exc:
        result.status, result.error = "ERROR", str(exc)
    except _NotDifferentiable as exc:
        result.status, result.error = "NOT DIFFERENTIABLE", str(exc)
    else:
        if result.mismatched:
            result.status = "FAIL"
        elif result.rows_checked == 0:
            result.status = "NOT COVERED"
    result.seconds = time.monotonic() - started
    return result


def _on(case: BackwardCase, device: str) -> BackwardCase:
    if device == "cpu":
        return case
    bias = None if case.bias is None else case.bias.to(device)
    return dataclasses.replace(case, logits=case.logits.to(device), bias=bias, upstream=case.upstream.to(device))


def _covered(candidate, case: BackwardCase, label: str) -> bool:
    try:
        shape = dict(rows=case.logits.shape[0], experts=case.logits.shape[1], topk=case.topk, dtype=torch.float32,
                     bias_dtype=None if case.bias is None else torch.float32, renormalize=case.renormalize, **case.groups)  # fmt: skip
        return candidate.covers(contract=label, **shape)
    except Exception:  # noqa: BLE001 -- a gate that cannot answer: call the router, its error is its own
        return True


def _call(route, case: BackwardCase, x, b):
    try:
        with torch.enable_grad():
            answer = route(x, b, case.topk, case.renormalize, case.routed_scaling_factor, **case.groups)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- the candidate's exception (or sys.exit) is its finding
        raise _CandidateFailed(f"the candidate's forward raised {_one_line(exc)} (case {case.index})") from None
    if not isinstance(answer, (tuple, list)) or len(answer) != 2 or not all(isinstance(t, torch.Tensor) for t in answer):
        raise _CandidateFailed(f"the candidate's answer is not (weights, ids) tensors: {type(answer).__name__} (case {case.index})")
    return answer


def _read_answer(answer, case: BackwardCase, c: oracle.Contract):
    """(weights [M, columns] in the candidate's columns, routed ids int64 [M, k], answer-valid rows bool [M])."""
    weights, ids = answer
    m, e = case.logits.shape
    if ids.dtype == torch.bool and tuple(ids.shape) == (m, e) and tuple(weights.shape) == (m, e):
        # a dense answer (probs [M, E], routing map [M, E]): no column order; ascending expert id stands for one
        valid = ids.sum(dim=1) == case.topk
        order = torch.sort(ids.to(torch.int8), dim=1, descending=True, stable=True).indices[:, : case.topk]
        chosen = torch.sort(order, dim=1).values
        return weights.gather(1, chosen), chosen, valid
    columns = case.upstream.shape[1]
    if weights.dim() != 2 or tuple(weights.shape) != (m, columns) or ids.dim() != 2 or ids.shape[0] != m or ids.shape[1] < case.topk:
        raise _CandidateFailed(f"the candidate's answer has weights {tuple(weights.shape)} and ids {tuple(ids.shape)}; "
                               f"expected [{m}, {columns}] each (the forward check's validity; case {case.index})")  # fmt: skip
    routed = ids[:, : case.topk].long()
    valid = ((routed >= 0) & (routed < e)).all(dim=1)
    return weights, routed.clamp(0, e - 1), valid


def _same_sets(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (torch.sort(a, dim=1).values == torch.sort(b.long(), dim=1).values).all(dim=1)


def _check_case(candidate, route, c, case, tol, declared, result, lookup, device, options, keep_row) -> None:
    m = case.logits.shape[0]
    if not _covered(candidate, case, result.contract):
        result.skipped_uncovered += m
        return
    with torch.no_grad():
        _, expected_ids = oracle.route(case.logits, case.bias, case.topk, renormalize=case.renormalize,
                                       routed_scaling_factor=case.routed_scaling_factor, contract=c, **case.groups)  # fmt: skip
    x = case.logits.clone().requires_grad_(True)
    b = None if case.bias is None else case.bias.clone().requires_grad_(True)
    weights, ids, valid = _read_answer(_call(route, case, x, b), case, c)
    if not weights.requires_grad:
        raise _NotDifferentiable(f"its weights carry no gradient (requires_grad=False, dtype {weights.dtype}): "
                                 "a kernel without a backward, or a route under torch.no_grad")  # fmt: skip
    checked = valid & _same_sets(ids, expected_ids[:, : case.topk])
    result.skipped_selection += int(m - checked.sum())
    result.rows_checked += int(checked.sum())
    # rows not compared send no gradient: the bias's gradient sums over the compared rows only
    case = dataclasses.replace(case, upstream=case.upstream * checked.unsqueeze(1).to(case.upstream.dtype))
    inputs = (x,) if b is None else (x, b)
    up = case.upstream if weights.shape[1] == case.upstream.shape[1] else case.upstream[:, : weights.shape[1]]
    try:
        grads = torch.autograd.grad(weights, inputs, grad_outputs=up.to(weights.dtype), allow_unused=True, retain_graph=b is not None)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 -- sys.exit in a backward hook too
        raise _CandidateFailed(f"the candidate's backward raised {_one_line(exc)} (case {case.index})") from None
    gx = torch.zeros_like(case.logits, dtype=torch.float64) if grads[0] is None else grads[0].detach().double()
    ref = reference_gradient(case.logits, case.bias, ids, case.upstream, contract=c, renormalize=case.renormalize,
                             routed_scaling_factor=case.routed_scaling_factor)  # fmt: skip
    bias_bad = {}
    if b is not None:
        gb = torch.zeros_like(ref.bias) if grads[1] is None else grads[1].detach().double()
        total_scale = row_scale(case)[checked].sum()
        if not bool(close(gb, ref.bias, total_scale, tol).all()):
            bias_bad = _bias_rows(weights, b, case, c, ids, checked, tol)
    blamed = blame_rows(case, c, ids, gx, ref.logits, checked, tol, bias_bad=bias_bad)
    _record(blamed, gx, ref.logits, case, declared, result, lookup, device, options, tol)
    if keep_row is not None and 0 <= keep_row < m:
        result.detail = RowDetail(case.index, keep_row, ids[keep_row].tolist(), ref.logits[keep_row].tolist(),
                                  gx[keep_row].tolist(), bool(checked[keep_row]), float(row_scale(case)[keep_row]))  # fmt: skip


def _bias_rows(weights, b, case, c, ids, checked, tol) -> dict[int, RowBlame]:
    """The rows whose own gradient into the bias is off: one backward per row (only when the call's total is off)."""
    out = {}
    scale = row_scale(case)
    for r in checked.nonzero().flatten().tolist():
        only = torch.zeros_like(case.upstream)
        only[r] = case.upstream[r]
        try:
            (gb,) = torch.autograd.grad(weights, (b,), grad_outputs=only[:, : weights.shape[1]].to(weights.dtype),
                                        allow_unused=True, retain_graph=True)  # fmt: skip
        except (Exception, SystemExit) as exc:  # noqa: BLE001 -- sys.exit in a backward hook too
            raise _CandidateFailed(f"the candidate's backward raised {_one_line(exc)} (case {case.index}, row {r})") from None
        gb = torch.zeros_like(case.bias, dtype=torch.float64) if gb is None else gb.detach().double()
        ref = reference_gradient(case.logits[r : r + 1], case.bias, ids[r : r + 1], case.upstream[r : r + 1], contract=c,
                                 renormalize=case.renormalize, routed_scaling_factor=case.routed_scaling_factor).bias  # fmt: skip
        if not bool(close(gb, ref, scale[r], tol).all()):
            allowance = tol.atol * scale[r] + tol.rtol * ref.abs()
            excess = torch.nan_to_num((gb - ref).abs() / allowance, nan=float("inf"))
            col = int(excess.argmax())
            out[r] = RowBlame(r, "grad_bias", "bias", col, float(ref[col]), float(gb[col]), float(excess[col]))
    return out


def _excused(blame: RowBlame, gx, ref, case, declared) -> bool:
    why = declared.get(blame.clause)
    if why is None:
        return False
    if blame.clause != CATCH_ALL:
        return True
    bound = getattr(why, "bound")
    loose = GradTolerance(rtol=min(bound, 2.0**-4), atol=min(bound, 2.0**-4))
    return bool(close(gx[blame.row], ref[blame.row], row_scale(case)[blame.row], loose).all())


def _record(blamed, gx, ref, case, declared, result, lookup, device, options, tol) -> None:
    for blame in blamed:
        excused = _excused(blame, gx, ref, case, declared)
        if excused:
            result.declared += 1
            result.declared_clauses[blame.clause] += 1
        else:
            result.mismatched += 1
            result.clauses[blame.clause] += 1
        result.mismatches.append(GradMismatch(
            case.index, blame.row, blame.clause, excused, blame.of, blame.column, blame.expected, blame.actual,
            blame.error, case.renormalize, case.routed_scaling_factor,
            replay_line(lookup, result.contract, device, options, case.index, blame.row)))  # fmt: skip
