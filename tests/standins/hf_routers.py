"""Planted defects in the models' own routers (kernels.models): each wraps a faithful transformers router and
breaks one thing a kernel engineer could get wrong, so a check must blame that one clause.

- ``renorm_dropped``: qwen3-next called with norm_topk_prob off whatever ``renormalize`` asks -> renormalization
- ``softmax_over_all``: granite-moe's weights as the softmax over all E logits, not the k chosen -> softmax_scope
- ``group_max``: DeepSeek-V2's router (group score = max), its answer put in rank order, under a top2_sum,
  rank-ordered copy of its contract -> group_selection
- ``bias_in_weight``: glm4-moe's weights built from sig(x) + bias -> bias_in_weight
- ``scaled_before_renorm``: dots1 scaling first, then renormalizing (the factor cancels) -> scaling
- ``divided_by_k``: qwen3-next's weights divided by k -> scaling
- ``bf16_divided_by_k``: qwen3-moe's weights (cast back to bf16 logits' dtype) divided by k -> scaling, not the
  cast's weight_accuracy
- ``expert_scale_ignored``: gemma4's router called without the case's per-expert weight scale (its parameter
  keeps the initial ones) -> scaling
"""

from __future__ import annotations

import torch

from kernels.models import route_for

_QWEN3_NEXT = route_for("qwen3-next")
_QWEN3_MOE = route_for("qwen3-moe")
_GRANITE = route_for("granite-moe")
_DSV2 = route_for("deepseek-v2")
_GLM4 = route_for("glm4-moe")
_DOTS1 = route_for("dots1")
_GEMMA4 = route_for("gemma4")


def renorm_dropped(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, **groups):
    return _QWEN3_NEXT(scores, bias, topk, False, routed_scaling_factor, **groups)


def softmax_over_all(scores, bias, topk, renormalize=False, routed_scaling_factor=1.0, **groups):
    _, ids = _GRANITE(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
    probs = torch.softmax(scores.float(), dim=-1)
    return probs.gather(1, ids.long()), ids


def group_max(scores, bias, topk, renormalize=False, routed_scaling_factor=1.0, **groups):
    w, ids = _DSV2(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
    # rank order (weight descending, then the lower id): the contract copy asks for it, so that only the groups differ
    order = torch.argsort(ids.long(), dim=1, stable=True)
    w, ids = w.gather(1, order), ids.gather(1, order)
    order = torch.argsort(-w, dim=1, stable=True)
    return w.gather(1, order), ids.gather(1, order)


def bias_in_weight(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, **groups):
    _, ids = _GLM4(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
    w = (torch.sigmoid(scores.float()) + bias.float()).gather(1, ids.long())
    if renormalize:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    return w * routed_scaling_factor, ids


def scaled_before_renorm(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, **groups):
    if not renormalize:
        return _DOTS1(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
    w, ids = _DOTS1(scores, bias, topk, False, routed_scaling_factor, **groups)  # w * rsf first ...
    return w / (w.sum(dim=-1, keepdim=True) + 1e-20), ids  # ... then renormalized: the factor is gone


def divided_by_k(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, **groups):
    w, ids = _QWEN3_NEXT(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
    return w / topk, ids


def bf16_divided_by_k(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, **groups):
    w, ids = _QWEN3_MOE(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
    return w / topk, ids


def expert_scale_ignored(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, expert_scale=None, **groups):
    return _GEMMA4(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
