"""A DeepSeek-V3 router written the straightforward way, as a plain callable: the harness's worked example.

    python -m contracts check --candidate examples.deepseek_v3_router:route --contract deepseek-v3

It routes as transformers' ``DeepseekV3TopkRouter`` and the engines' torch paths do (``noaux_tc``):

    sig    = sigmoid(logits)                       fp32
    choice = sig + bias                            the correction bias only ranks
    group  = sum of the two largest choice values of each of the 8 groups
    choice outside the topk_group best groups := -inf
    ids    = torch.topk(choice, topk)
    w      = sig[ids] / (sum + 1e-20) * routed_scaling_factor

Everything is ranked by ``torch.topk``, so equal values come out in torch.topk's order and NaN ranks above every
number. The ``deepseek-v3`` contract takes the lowest index among equal values and ranks NaN last, so the check
fails on exactly those rows: ``tie_order`` (and ``group_tie_order``), ``nan_last``. examples/README.md shows the
report; examples/declared_router.py declares them.
"""

from __future__ import annotations

import torch


def route(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    """``(weights fp32 [M, topk], ids int32 [M, topk])``, both contiguous; ``scores`` [M, E] of any float dtype."""
    rows, experts = scores.shape
    sig = torch.sigmoid(scores.float())
    choice = sig + bias.float()
    grouped = choice.view(rows, num_expert_group, experts // num_expert_group)
    group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
    kept = group_scores.topk(topk_group, dim=-1).indices
    keep = torch.zeros(rows, num_expert_group, dtype=torch.bool, device=scores.device).scatter_(1, kept, True)
    masked = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(rows, experts)
    ids = masked.topk(topk, dim=-1).indices
    weights = sig.gather(1, ids)
    if renormalize:
        weights = weights / (weights.sum(dim=-1, keepdim=True) + 1e-20)
    return (weights * routed_scaling_factor).contiguous(), ids.to(torch.int32).contiguous()
