"""STAND-IN for a hypothetical aiter release that breaks ties to the lowest expert id. NOT aiter.

A planted drift: everything as ``aiter_standin`` (same signature, checks,
sigmoid, round-index fill, unguarded renormalization) except that equal
ranking values go to the lowest expert id instead of aiter's wave64 lane
order, as if a release had changed its wave reduction. ``--against
aiter-model`` must report it as ``tie_order`` mismatches and nothing else.
"""

from __future__ import annotations

import torch

from .aiter_standin import check_call

__all__ = ["biased_grouped_topk"]

__version__ = "stand-in (not aiter): lowest-index ties"


def _route(scores, bias, topk, renormalize, routed_scaling_factor):
    sig = torch.reciprocal(torch.exp2(scores.float() * -1.4426950408889634).add_(1.0))
    ranked = sig + bias.float() + 0.0  # + 0.0 makes -0.0 equal +0.0
    valid = ranked > -float("inf")  # NaN and -inf never win a round
    ranked = ranked.masked_fill(~valid, -float("inf"))
    chosen = torch.sort(ranked, dim=1, descending=True, stable=True).indices[:, :topk]  # stable: lowest id first
    slot = torch.arange(topk, device=scores.device).expand_as(chosen)
    ids = torch.where(slot < valid.sum(1, keepdim=True), chosen, slot)  # the round index when nothing is left
    weights = sig.gather(1, ids)
    scale = torch.full((scores.shape[0], 1), routed_scaling_factor, dtype=torch.float32, device=scores.device)
    if renormalize:
        total = torch.zeros(scores.shape[0], dtype=torch.float32, device=scores.device)
        for j in range(topk):
            total = total + weights[:, j]
        scale = scale / total.unsqueeze(1)
    return weights * scale, ids.to(torch.int32)


def biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group, need_renorm, routed_scaling_factor=1.0):
    check_call(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group, need_renorm, routed_scaling_factor)
    weights, ids = _route(gating_output, correction_bias, topk_ids.shape[1], need_renorm, routed_scaling_factor)
    topk_weights.copy_(weights)
    topk_ids.copy_(ids)
