"""Which backward clause a mismatched row breaks: the first whose test explains the row (``clauses.GRAD_CLAUSES`` order).

- ``grad_unselected``: the row's gradient is off in an expert it did not choose, where the contract's is exactly
  zero (every scoring but a softmax over all experts, whose Jacobian couples them);
- ``grad_bias``: the bias's gradient from this row is off (ranks only: any gradient at all);
- ``grad_scaling``: the row is the reference times one scalar other than 1 (the factor missing, or applied twice);
- ``grad_renormalization``: the row is the reference with the denominator held constant (``sum.detach()``);
- ``grad_score_function``: the row is the reference with the score function's derivative replaced
  (``oracle.grad.GRAD_VARIANTS``: 1, the score itself, a softmax without cross terms);
- ``grad_accuracy``: none of these: a gradient off beyond the tolerance for a reason no rule names.

The counterfactuals are autograd of the contract's formula with one step's derivative swapped (the forward value
kept), at the candidate's own selection, in float64.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import oracle
from oracle.grad import reference_gradient

from .cases import BackwardCase
from .clauses import GradTolerance

__all__ = ["RowBlame", "blame_rows", "close", "row_scale"]

_SCORE_VARIANTS = {
    "sigmoid": ("score_identity", "score_value"),
    "softcap_sigmoid": ("score_identity", "score_value"),
    "sigmoid_of_topk": ("score_identity", "score_value"),
    "softmax": ("score_identity", "score_diagonal", "score_value"),
    "softmax_of_topk": ("score_identity", "score_diagonal", "score_value"),
}
_SCALAR_FREE = 2.0**-10  # a fitted factor within this of 1 is no scaling error (the tolerance's own business)


@dataclass(frozen=True)
class RowBlame:
    """One mismatched row: its clause, and its worst entry (``column`` an expert; ``of`` "logits" or "bias")."""

    row: int
    clause: str
    of: str
    column: int
    expected: float
    actual: float
    error: float  # |actual - expected| over the entry's allowance (> 1: outside the tolerance)


def row_scale(case: BackwardCase) -> torch.Tensor:
    """float64 ``[M]``: |routed_scaling_factor| * max |upstream| of each row (at least 1e-30: never a zero scale)."""
    up = case.upstream.double().abs().amax(dim=1)
    return (up * abs(case.routed_scaling_factor)).clamp(min=1e-30)


def close(actual: torch.Tensor, expected: torch.Tensor, scale: torch.Tensor, tol: GradTolerance) -> torch.Tensor:
    """bool, elementwise: within ``atol * scale + rtol * |expected|`` (``scale`` broadcast by row); NaN never is."""
    return (actual - expected).abs() <= tol.atol * scale + tol.rtol * expected.abs()


def _excess(actual, expected, scale, tol) -> torch.Tensor:
    allowance = tol.atol * scale + tol.rtol * expected.abs()
    return torch.nan_to_num((actual - expected).abs() / allowance, nan=float("inf"))


def _worst(row: int, of: str, actual: torch.Tensor, expected: torch.Tensor, scale, tol, clause: str) -> RowBlame:
    excess = _excess(actual, expected, scale, tol)
    col = int(excess.argmax())
    return RowBlame(row, clause, of, col, float(expected[col]), float(actual[col]), float(excess[col]))


def _reference(case, ids, c, variant) -> torch.Tensor:
    return reference_gradient(case.logits, case.bias, ids, case.upstream, contract=c, renormalize=case.renormalize,
                              routed_scaling_factor=case.routed_scaling_factor, variant=variant).logits  # fmt: skip


def blame_rows(case: BackwardCase, c: oracle.Contract, ids: torch.Tensor, grad: torch.Tensor, reference: torch.Tensor,
               rows: torch.Tensor, tol: GradTolerance, *, bias_bad: dict[int, RowBlame] | None = None) -> list[RowBlame]:  # fmt: skip
    """The mismatched rows among ``rows`` (bool ``[M]``: those checked), each with its clause.

    ``grad`` / ``reference``: float64 ``[M, E]`` logits gradients, the candidate's and the contract's at ``ids``.
    ``bias_bad``: rows whose own bias gradient is off (from ``check``), each with its worst bias entry."""
    bias_bad = bias_bad or {}
    scale = row_scale(case).unsqueeze(1)
    ok = close(grad, reference, scale, tol)
    bad = rows & ~ok.all(dim=1)
    for r in bias_bad:
        bad[r] = bool(rows[r])
    if not bool(bad.any()):
        return []
    selected = torch.zeros_like(ok).scatter_(1, ids.long(), True)
    coupled = c.scoring == "softmax"  # a softmax over all experts: every expert's logit moves every chosen weight
    variants: dict[str, torch.Tensor] = {}

    def matches(variant: str, r: int) -> bool:
        if variant not in variants:
            variants[variant] = _reference(case, ids, c, variant)
        return bool(close(grad[r], variants[variant][r], scale[r], tol).all())

    out = []
    for r in bad.nonzero().flatten().tolist():
        g, e = grad[r], reference[r]
        if not bool(ok[r].all()) and not coupled and not bool(ok[r][~selected[r]].all()):
            unselected = ~selected[r]
            blame = _worst(r, "logits", g[unselected], e[unselected], scale[r], tol, "grad_unselected")
            out.append(_unselected_column(blame, unselected))
            continue
        if r in bias_bad:
            out.append(bias_bad[r])
            continue
        clause = _logits_clause(c, case, g, e, scale[r], tol, lambda v, r=r: matches(v, r))
        out.append(_worst(r, "logits", g, e, scale[r], tol, clause))
    return out


def _unselected_column(blame: RowBlame, unselected: torch.Tensor) -> RowBlame:
    # _worst indexed the unselected experts only: map back to the expert's own column
    column = int(unselected.nonzero().flatten()[blame.column])
    return RowBlame(blame.row, blame.clause, blame.of, column, blame.expected, blame.actual, blame.error)


def _logits_clause(c, case, g, e, scale, tol, matches) -> str:
    norm = float((e * e).sum())
    if norm > 0:
        alpha = float((g * e).sum()) / norm
        if abs(alpha - 1) > _SCALAR_FREE and bool(close(g, alpha * e, scale * abs(alpha), tol).all()):
            return "grad_scaling"
    if oracle.renormalizes(c, case.renormalize, case.topk) and matches("renorm_detached"):
        return "grad_renormalization"
    if any(matches(v) for v in _SCORE_VARIANTS.get(c.scoring, ())):
        return "grad_score_function"
    return "grad_accuracy"
