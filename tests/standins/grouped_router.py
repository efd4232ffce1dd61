"""A grouped router (DeepSeek-V3 noaux_tc) written independently of the oracle, plus engine-like variants of it.

Plain statement (per row; the model code and the engines, docs/contracts.md):

    sig    = sigmoid(x)                       fp32 (float64, rounded once; 0 where exp(-x) overflows fp32,
                                              as every fp32 formula of the sigmoid gives there)
    choice = sig + bias                       ranks only
    group  = sum of the two largest choice values of each contiguous group
    kept   = the topk_group best groups (ties: the lowest group)
    choice outside the kept groups := MASK    (-inf: SGLang, vLLM; 0.0: the model's reference code)
    ids    = the topk best experts (ties: the lowest expert; NaN below every number)
    w      = sig[ids] / (sum + 1e-20) * routed_scaling_factor

It orders with ``torch.sort(stable=True)`` on (is NaN, value), not with the
oracle's rank keys, so the two share no code. Variants for the diagnosis
tests: ``route_mask_zero`` (the reference code's 0.0 mask), ``route_bf16``
(the sigmoid and the add in bf16, as the engines' torch paths compute them
for bf16 logits), ``route_group_max`` (the group score as the group's
maximum), ``route_bias_in_weight``.
"""

from __future__ import annotations

import torch

from contracts.candidates import Candidate


def _order(values: torch.Tensor) -> torch.Tensor:
    """Indices sorting each row by value descending, NaN last, ties to the lowest index."""
    by_value = torch.sort(torch.nan_to_num(values, nan=0.0), dim=-1, descending=True, stable=True).indices
    nan_last = torch.sort(torch.isnan(values).gather(-1, by_value).to(torch.uint8), dim=-1, stable=True).indices
    return by_value.gather(-1, nan_last)


def _order_nan_first(values: torch.Tensor) -> torch.Tensor:
    """The same with NaN first, as torch.topk ranks it (ties among NaN to the lowest index)."""
    by_value = torch.sort(torch.nan_to_num(values, nan=0.0), dim=-1, descending=True, stable=True).indices
    nan_first = torch.sort((~torch.isnan(values)).gather(-1, by_value).to(torch.uint8), dim=-1, stable=True).indices
    return by_value.gather(-1, nan_first)


def _route(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group, mask=-float("inf"),
           precision=torch.float32, group_score="top2", bias_in_weight=False, order=_order):  # fmt: skip
    rows, experts = scores.shape
    size = experts // num_expert_group
    if precision == torch.float32:
        e = torch.exp(-scores.double())
        sig = (1.0 / (1.0 + e)).float().masked_fill(torch.isinf(e.float()), 0.0)
        choice = sig + bias.float()
    else:
        sig = torch.sigmoid(scores.to(precision))
        choice = (sig + bias.to(precision)).float()
        sig = sig.float()
    grouped = choice.view(rows, num_expert_group, size)
    top = grouped.gather(2, order(grouped)[..., :2])
    group = top[..., 0] + top[..., 1] if group_score == "top2" else top[..., 0]
    kept = order(group)[:, :topk_group]
    keep = torch.zeros(rows, num_expert_group, dtype=torch.bool, device=scores.device).scatter_(1, kept, True)
    masked = grouped.masked_fill(~keep.unsqueeze(2), mask).view(rows, experts)
    ids = order(masked)[:, :topk]
    w = (choice if bias_in_weight else sig).gather(1, ids)
    if renormalize:
        w = w / (w.sum(1, keepdim=True) + 1e-20)
    return (w * routed_scaling_factor).float(), ids.to(torch.int32)


def route(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group, topk_group=topk_group)


def route_mask_zero(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group, topk_group=topk_group, mask=0.0)


def route_bf16(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    precision = torch.bfloat16 if scores.dtype == torch.bfloat16 else torch.float32
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group, topk_group=topk_group,
                  precision=precision)  # fmt: skip


def route_group_max(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group, topk_group=topk_group,
                  group_score="max")  # fmt: skip


def route_bias_in_weight(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group, topk_group=topk_group,
                  bias_in_weight=True)  # fmt: skip


def route_nan_first(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    """NaN ranked first everywhere, as torch.topk ranks it (SGLang's and vLLM's torch routers): within a group (so a
    group holding NaN scores NaN), among the groups (so it is kept first) and among the experts."""
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group, topk_group=topk_group,
                  order=_order_nan_first)  # fmt: skip


nan_first_declared = Candidate(
    name="grouped-nan-first", route=route_nan_first,
    # what SGLang's torch router declares of its NaN rows: NaN first, and ties among NaN experts and NaN groups
    expected_deviations={"deepseek-v3": {"nan_last": "ranks NaN first (torch.topk), in the group scores too",
                                         "tie_order": "NaN experts tie", "group_tie_order": "NaN groups tie",
                                         "group_mask": "NaN experts of groups the contract drops"}},
)  # fmt: skip


def route_nan_first_lowest_numbers(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    """The NaN-first router, but in a row holding NaN the numbers it takes are the lowest of its kept groups, not the
    top ones: the NaN rule frees where NaN ranks, never which numbers win."""
    w, ids = route_nan_first(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group,
                             topk_group=topk_group)  # fmt: skip
    rows, experts = scores.shape
    size = experts // num_expert_group
    choice = torch.sigmoid(scores.float()) + bias.float()
    for r in torch.isnan(choice).any(1).nonzero().flatten().tolist():
        groups = (ids[r].long() // size).unique()
        pool = torch.cat([torch.arange(g * size, (g + 1) * size, device=scores.device) for g in groups.tolist()])
        numbers = pool[~torch.isnan(choice[r, pool])]
        lowest = numbers[torch.sort(choice[r, numbers], stable=True).indices]
        nan_ids = ids[r][torch.isnan(choice[r, ids[r].long()])]
        ids[r] = torch.cat([nan_ids, lowest[: topk - nan_ids.numel()].to(ids.dtype)])[:topk]
    sig = torch.sigmoid(scores.float()).gather(1, ids.long())
    if renormalize:
        sig = sig / (sig.sum(1, keepdim=True) + 1e-20)
    return (sig * routed_scaling_factor).float(), ids


nan_first_lowest_numbers_declared = Candidate(
    name="grouped-nan-first-lowest-numbers", route=route_nan_first_lowest_numbers,
    expected_deviations=nan_first_declared.expected_deviations,
)  # fmt: skip
