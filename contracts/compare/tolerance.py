"""Tolerances: fp32 ULP distances and the weight comparison of a contract."""

from __future__ import annotations

import math

import torch

import oracle

__all__ = ["f32_ulp", "ulp_distance", "weights_close"]


def f32_ulp(value: float) -> float:
    # ULP of an fp32 number: 2^(exponent - 23), floored at the subnormal step.
    if value == 0 or not math.isfinite(value):
        return 2.0**-149
    return max(2.0 ** (math.frexp(abs(value))[1] - 24), 2.0**-149)


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 ULP steps between ``a`` and ``b`` (float64; 0 for NaN vs NaN, inf for NaN vs number)."""
    ka = oracle.rank_keys(a.float().contiguous()).long()
    kb = oracle.rank_keys(b.float().contiguous()).long()
    d = (ka - kb).abs().double()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, float("inf")), d)


def weights_close(a, e, c: oracle.Contract):
    return torch.isclose(a, e, rtol=c.weight_rtol, atol=c.weight_atol, equal_nan=True)
