"""A behavioural model of AMD aiter's generic ``biased_grouped_topk`` kernel (docs/aiter.md).

What it models, on purpose including aiter's known differences from the
``aiter`` contract:

- one selection round per output column: the strictly greatest ranking value
  wins, equal values go to aiter's wave64 lane priority, and the winner drops
  out (its score becomes -inf);
- NaN never wins a round, and neither does -inf: a round that finds no value
  ``> -inf`` emits the round index ``k`` as the expert id (the contract would
  rank -inf experts, then NaN experts);
- ``w = sig[id]``; with renormalize ``w * (routed_scaling_factor / sum)``, the
  sum taken in selection order, with no guard (a zero sum gives NaN or inf);
  without renormalize ``w * routed_scaling_factor``.

The lane table is this module's own copy (a kernel or model never shares the
oracle's facts, so a differential test can catch an error in either).
"""

from __future__ import annotations

import functools

import torch

from ._args import check_args, serves

__all__ = ["LANE_RANK", "covered", "route", "tie_priority"]


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, logits_strides: tuple[int, int] | None = None,
            bias_stride: int | None = None) -> bool:  # fmt: skip
    """Calls whose bias has the logits' dtype (aiter reads the bias in the logits' dtype: an fp32 bias with bf16 logits
    would be rounded), in the layouts ``route``'s argument check takes: logits of column stride 1, row stride >= E."""
    return dtype == bias_dtype and serves(rows=rows, experts=experts, logits_strides=logits_strides, bias_stride=bias_stride)


LANE_RANK = (
    56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48,
    40, 41, 42, 43, 47, 46, 45, 44, 36, 37, 38, 39, 35, 34, 33, 32,
    24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16,
    8, 9, 10, 11, 15, 14, 13, 12, 4, 5, 6, 7, 3, 2, 1, 0,
)  # fmt: skip


@functools.lru_cache(maxsize=16)
def tie_priority(experts: int, device: torch.device = torch.device("cpu")) -> torch.Tensor:
    order = sorted(range(experts), key=lambda e: (LANE_RANK[(e >> 2) & 63], e))
    priority = torch.empty(experts, dtype=torch.int64)
    priority[torch.tensor(order)] = torch.arange(experts)
    return priority.to(device)


def _sigmoid(x: torch.Tensor) -> torch.Tensor:
    # aiter: rcp(1 + exp2(-log2(e) * x)); torch's exp2 and division stand in for the hardware ones.
    return torch.reciprocal(torch.exp2(x * -1.4426950408889634).add_(1.0))


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0):
    check_args(scores, bias, topk, renormalize, routed_scaling_factor)
    rows, experts = scores.shape
    sig = _sigmoid(scores.float())
    ranked = sig + bias.to(scores.dtype).float()  # aiter reads the bias as the gating dtype
    valid = ranked > -float("inf")  # False for NaN and -inf: those never win a round
    bits = (ranked + 0.0).view(torch.int32)
    keys = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits).long()
    priority = tie_priority(experts, scores.device)
    composite = keys * experts + (experts - 1 - priority)
    composite = composite.masked_fill(~valid, torch.iinfo(torch.int64).min)
    top = torch.topk(composite, topk, dim=1)
    won = top.values != torch.iinfo(torch.int64).min
    round_index = torch.arange(topk, device=scores.device).expand(rows, topk)
    ids = torch.where(won, top.indices, round_index)
    weights = sig.gather(1, ids)
    # fp32 by name: aiter's kernel computes in fp32 whatever torch's default dtype is (a bf16 default rounded the
    # scaling factor here, 2.827 to 2.828125, until the call contexts' bf16 default dtype showed it)
    scale = torch.full((rows, 1), float(routed_scaling_factor), dtype=torch.float32, device=scores.device)
    if renormalize:
        total = torch.zeros(rows, dtype=torch.float32, device=scores.device)
        for j in range(topk):
            total = total + weights[:, j]
        scale = scale / total.unsqueeze(1)
    return weights * scale, ids.to(torch.int32)
