"""A stand-in for ``transformer_engine.pytorch.router`` (TE cannot be installed on this project's machines): its one
function ``fused_topk_with_score_function`` with TE's keyword interface and dense answer, written independently in
plain torch (no TE or Megatron code), computing what the mcore contracts state. It tests ``kernels.trainers``'s TE
adapter's plumbing (keywords, the dense answer, the conversion to ``[M, k]``), not TE's kernel.

    s      = sigmoid(x) rounded to x.dtype        (softmax for score_function="softmax")
    choice = s + expert_bias                       ranks only
    group  = sum of the topk // group_topk largest choice values of each contiguous group
    ids    = topk of choice outside the kept groups (ties: lowest index, NaN last)
    w      = s[ids] / (sum + 1e-20) in x.dtype, * scaling_factor
"""

from __future__ import annotations

import torch

CALLS: list[dict] = []  # the keywords of every call (the tests read them)


def _best(values: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k largest per row: NaN last, ties to the lowest index (a stable sort, not torch.topk)."""
    by_value = torch.sort(torch.nan_to_num(values.float(), nan=-float("inf")), dim=-1, descending=True, stable=True).indices
    nan_last = torch.sort(torch.isnan(values).gather(-1, by_value).to(torch.uint8), dim=-1, stable=True).indices
    return by_value.gather(-1, nan_last)[..., :k]


def fused_topk_with_score_function(logits, topk, use_pre_softmax=False, num_groups=None, group_topk=None,
                                   scaling_factor=None, score_function="softmax", expert_bias=None):  # fmt: skip
    CALLS.append(dict(topk=topk, use_pre_softmax=use_pre_softmax, num_groups=num_groups, group_topk=group_topk,
                      scaling_factor=scaling_factor, score_function=score_function, bias=expert_bias is not None))  # fmt: skip
    tokens, experts = logits.shape
    dtype = logits.dtype
    if score_function != "sigmoid":
        raise NotImplementedError("the stand-in routes score_function='sigmoid' only")
    scores = torch.sigmoid(logits.double()).float().to(dtype)
    choice = scores + expert_bias if expert_bias is not None else scores
    if num_groups and group_topk:
        per_group = choice.view(tokens, num_groups, -1)
        top = per_group.gather(2, _best(per_group, topk // group_topk))
        group_scores = top[..., 0]
        for j in range(1, top.shape[2]):
            group_scores = group_scores + top[..., j]
        kept = _best(group_scores.to(choice.dtype), group_topk)
        keep = torch.zeros(tokens, num_groups, dtype=torch.bool, device=logits.device).scatter_(1, kept, True)
        choice = per_group.masked_fill(~keep.unsqueeze(2), -float("inf")).view(tokens, experts)
    ids = _best(choice, topk)
    w = scores.gather(1, ids)
    if topk > 1:
        w = w / (w.sum(dim=-1, keepdim=True) + 1e-20)
    if scaling_factor:
        w = w * scaling_factor
    probs = torch.zeros_like(logits).scatter(1, ids, w)
    routing_map = torch.zeros(tokens, experts, dtype=torch.bool, device=logits.device).scatter(1, ids, True)
    return probs, routing_map
