"""The backward check's inputs: seeded fp32 logits and bias, an upstream gradient dL/dweights, the call options.

Case ``i`` of seed ``s`` is drawn from its own generator (seed ``(s * 1_000_003 + i) mod 2^63``), so a replay rebuilds one case
without the others. The call options cycle through what the contract admits (both ``renormalize`` values, the
scaling factors 1.0, 2.5, 2.827 and the contract's own), so a missing factor or a skipped quotient rule is met in
the first few cases. The logits' scale alternates between 1 and 3: the sigmoid's derivative is then exercised
near its middle and near saturation, without rows whose scores all underflow (those have no gradient to compare).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

import oracle

__all__ = ["BackwardCase", "call_options", "make_case"]

_LOGIT_SCALES = (1.0, 3.0)


@dataclass(frozen=True)
class BackwardCase:
    """One call: fp32 ``logits`` ``[M, E]``, fp32 ``bias`` ``[E]`` or None, fp32 ``upstream`` ``[M, columns]``."""

    index: int
    seed: int
    logits: torch.Tensor
    bias: torch.Tensor | None
    upstream: torch.Tensor
    topk: int
    renormalize: bool
    routed_scaling_factor: float
    groups: dict  # num_expert_group / topk_group for a grouped contract, else empty


def call_options(c: oracle.Contract) -> list[tuple[bool, float]]:
    """Every (renormalize, routed_scaling_factor) pair the contract admits, in a fixed order."""
    factors = c.admitted_scaling_factors
    if factors is None:
        factors = tuple(dict.fromkeys((*oracle.SCALING_FACTORS, c.routed_scaling_factor)))
    return [(r, f) for f in factors for r in c.admitted_renormalize_values]


def make_case(c: oracle.Contract, *, index: int, seed: int, rows: int, experts: int, topk: int, groups: dict) -> BackwardCase:
    g = torch.Generator().manual_seed((seed * 1_000_003 + index) % 2**63)  # any int64 --seed: in range
    scale = _LOGIT_SCALES[index % len(_LOGIT_SCALES)]
    logits = torch.randn(rows, experts, generator=g) * scale
    bias = torch.randn(experts, generator=g) * 0.5 if c.has_bias else None
    columns = topk + (1 if c.shared_expert_slot == "last" else 0)
    upstream = torch.randn(rows, columns, generator=g)
    options = call_options(c)
    renormalize, rsf = options[index % len(options)]
    return BackwardCase(index, seed, logits, bias, upstream, topk, renormalize, float(rsf), dict(groups))
