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

__all__ = ["DECLARED_WEIGHT_RTOL", "WeightAccuracy", "declared_weight_bound", "f32_ulp", "near_allowance", "plain_contract_tolerance",
           "ulp_distance", "weights_close", "within_declared_accuracy"]

# A declared ``weight_accuracy`` excuses weights within this much of the contract's, relative (2^-16: about 128 fp32
# ULPs, "ULP-level"), unless the declaration names its own bound (``WeightAccuracy``: a candidate whose weights are
# bf16 values says 2^-8 or so). Beyond it the row is a mismatch of weight_accuracy: a declaration of rounding
# differences is no licence for weights 5 % off. Plus an absolute 2^-126 (the smallest normal fp32): an underflowed,
# subnormal weight may be off by all its bits.
DECLARED_WEIGHT_RTOL = 2.0**-16
DECLARED_WEIGHT_ATOL = 2.0**-126


class WeightAccuracy(str):
    """A declared ``weight_accuracy`` deviation: why (the text, as every declaration) and the largest relative error of
    a weight it excuses (``max_relative``)."""

    max_relative: float

    def __new__(cls, why: str, max_relative: float = DECLARED_WEIGHT_RTOL):
        if not (isinstance(max_relative, (int, float)) and 0 <= max_relative < 1):
            raise ValueError(f"weight_accuracy bound {max_relative!r} must be a relative error in [0, 1), e.g. 2**-8 for bf16 weights")
        text = super().__new__(cls, why)
        text.max_relative = float(max_relative)
        return text


def declared_weight_bound(deviations: dict) -> float | None:
    """The relative bound of the declared ``weight_accuracy`` in ``deviations`` (None when it is not declared)."""
    why = deviations.get("weight_accuracy")
    if why is None:
        return None
    return getattr(why, "max_relative", DECLARED_WEIGHT_RTOL)


def within_declared_accuracy(weights: torch.Tensor, reference: torch.Tensor, bound: float) -> torch.Tensor:
    """bool [B]: every weight of the row within ``bound`` (relative, plus 2^-126) of the contract's; NaN only for NaN."""
    return torch.isclose(weights.float(), reference.float(), rtol=bound, atol=DECLARED_WEIGHT_ATOL, equal_nan=True).all(1)

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
    """Elementwise: ``|a - e| <= atol + rtol * |e|``, NaN matching only NaN."""
    return torch.isclose(a, e, rtol=c.weight_rtol, atol=c.weight_atol, equal_nan=True)


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
