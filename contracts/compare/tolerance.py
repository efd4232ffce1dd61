"""Tolerances: fp32 ULP distances, the weight comparison of a contract, and the near-tie allowance.

Near ties (docs/contracts.md): two faithful implementations of a contract's
arithmetic round the scores differently, so two experts whose ranking
values are closer than both scores' error bounds may swap. The bound of one
expert's score ``s`` (fp32) is

    ulps(s) * 2^(exponent(s) - 24)        for a normal s,
    ulps(s) * s * 2^-23 + 2^-149          for a subnormal s (one rounding on the subnormal grid),
    0                                     for s == 0,

with ``ulps = near_tie_ulp + near_tie_x_ulp * t``, ``t = (1 - s) * |x|`` for a
sigmoid and ``t = |x - max(x)|`` for a softmax. A score of exactly 0 is
exact in every implementation (the fp32 formula underflows there), and a
subnormal one is off by a rounding step at most, so a router that flushes
subnormals to zero is a mismatch, not a near tie.
"""

from __future__ import annotations

import dataclasses
import math

import torch

import oracle

__all__ = ["BOUNDED_CLAUSES", "DECLARED_BOUND", "Bounded", "broadcast_isclose", "declared_bound", "f32_ulp", "near_allowance",
           "plain_contract_tolerance", "ulp_distance", "weights_close", "within_declared_accuracy"]

# The declarable clauses that are catch-alls, and so carry a bound: ``weight_accuracy`` (any weight no rule explains)
# and ``selection`` (any choice of experts no tie, special value or group rule explains). Declared, each excuses a
# row only within its bound: ``weight_accuracy`` weights within the bound of the contract's, relative (plus 2^-126:
# an underflowed, subnormal weight may lose all its bits); ``selection`` a choice whose experts lie within the bound
# of the contract's cutoff, relative to their scale (``attribution.selection_departure``). The default, 2^-16 (about
# 128 fp32 ULPs), is an fp32 computation in another order; a router that ranks or weighs in bf16 names its own bound
# (``Candidate.declared_bounds``: 2^-8 is one bf16 rounding). Beyond it the row is a mismatch of that clause: a
# declaration of rounding differences excused weights 5 % off, and the k lowest-ranked experts, before the bounds.
# ``group_selection`` and ``group_mask`` (grouped contracts: groups no score, tie or mask rule explains) excuse a row
# whose groups depart from a choice by group score by no more than the bound (``attribution.group_departure``): a
# declaration of bf16 group sums excused the lowest-scoring groups, and no groups at all, before.
BOUNDED_CLAUSES = ("weight_accuracy", "selection", "group_selection", "group_mask")
DECLARED_BOUND = 2.0**-16
DECLARED_WEIGHT_ATOL = 2.0**-126


class Bounded(str):
    """A declared deviation of a bounded clause: why (the text, as every declaration) and its bound (``bound``)."""

    bound: float

    def __new__(cls, why: str, bound: float = DECLARED_BOUND):
        if isinstance(bound, bool) or not (isinstance(bound, (int, float)) and 0 <= bound < 1):
            raise ValueError(f"bound {bound!r} must be a relative error in [0, 1), e.g. 2**-7 for a router that ranks or weighs in bf16")
        text = super().__new__(cls, why)
        text.bound = float(bound)
        return text


def declared_bound(deviations: dict, clause: str) -> float | None:
    """The bound of ``clause`` (one of ``BOUNDED_CLAUSES``) in ``deviations`` (None when it is not declared; the
    default bound for a declaration made without one)."""
    why = deviations.get(clause)
    if why is None:
        return None
    return getattr(why, "bound", DECLARED_BOUND)


def broadcast_isclose(a: torch.Tensor, e: torch.Tensor, *, rtol: float, atol: float, equal_nan: bool = False) -> torch.Tensor:
    """``torch.isclose`` over the broadcast of ``a`` and ``e``, both expanded first. torch 2.11 (the GPU hosts') writes
    the NaN match into a tensor of ``a``'s shape and raises where ``a`` is the smaller one ("output with shape [27, 16]
    doesn't match the broadcast shape [10, 2, 27, 16]"); 2.13 broadcasts. Every closeness test of the comparison goes
    through here (tests/compare/strict_torch.py emulates 2.11 so CI on 2.13 catches a call that does not)."""
    a, e = torch.broadcast_tensors(a, e)
    return torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=equal_nan)


def within_declared_accuracy(weights: torch.Tensor, reference: torch.Tensor, bound: float) -> torch.Tensor:
    """bool [B]: every weight of the row within ``bound`` (relative, plus 2^-126) of the contract's; NaN only for NaN."""
    return broadcast_isclose(weights.float(), reference.float(), rtol=bound, atol=DECLARED_WEIGHT_ATOL, equal_nan=True).all(1)


_TINY = 2.0**-126  # the smallest normal fp32
_SUB_STEP = 2.0**-149


def f32_ulp(value: float) -> float:
    """ULP of an fp32 number: 2^(exponent - 23), floored at the subnormal step (scalar helper)."""
    if value == 0 or not math.isfinite(value):
        return _SUB_STEP
    return max(2.0 ** (math.frexp(abs(value))[1] - 24), _SUB_STEP)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 ULP steps between ``a`` and ``b`` (float64; 0 for NaN vs NaN, inf for NaN vs number)."""
    ka = oracle.rank_keys(a.float().contiguous()).long()
    kb = oracle.rank_keys(b.float().contiguous()).long()
    d = (ka - kb).abs().double()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, float("inf")), d)


def weights_close(a: torch.Tensor, e: torch.Tensor, c) -> torch.Tensor:
    """Elementwise over the broadcast of ``a`` and ``e``: ``|a - e| <= atol + rtol * |e|``, NaN matching only NaN."""
    return broadcast_isclose(a, e, rtol=c.weight_rtol, atol=c.weight_atol, equal_nan=True)


def plain_contract_tolerance(c, exact: bool):
    """``c``, or with ``exact`` a copy with no weight tolerance and no near-tie allowance (bit identity)."""
    if not exact:
        return c
    return dataclasses.replace(c, weight_rtol=0.0, weight_atol=0.0, near_tie_ulp=0, near_tie_x_ulp=0.0)


def near_allowance(scores: torch.Tensor, x: torch.Tensor, c, row_max: torch.Tensor | None = None) -> torch.Tensor:
    """The error bound of each expert's score (same shape as ``scores``; see the module docstring)."""
    s = scores.float()
    if c.scoring == "softmax_of_topk":
        return torch.zeros_like(s)  # the ranking is the logit itself: exact
    xf = x.float()
    if c.scoring == "softmax":
        ref = row_max if row_max is not None else torch.nan_to_num(xf, nan=-math.inf).amax(dim=-1, keepdim=True)
        t = (xf - ref).abs()  # row_max broadcasts against the scores' shape
    else:
        t = (1.0 - s) * xf.abs()
    ulps = c.near_tie_ulp + c.near_tie_x_ulp * torch.nan_to_num(t, nan=0.0, posinf=0.0)
    mag = s.abs()
    _, exponent = torch.frexp(mag)
    normal = ulps * torch.ldexp(torch.ones_like(mag), exponent - 24)
    subnormal = ulps * mag * 2.0**-23 + _SUB_STEP * (ulps > 0)
    allow = torch.where(mag >= _TINY, normal, subnormal)
    allow = torch.where(mag == 0, torch.zeros_like(allow), allow)
    return torch.where(torch.isfinite(s) & torch.isfinite(xf), allow, torch.zeros_like(allow))
