"""Routers of the captured-logits tests: the models' own routing written with torch ops (correct) and one defect each.

Plain callables ``fn(scores, bias, topk, renormalize, routed_scaling_factor)``,
loaded as ``captured_routers:NAME``. The softmax ones follow Qwen3-MoE's
model code, the sigmoid ones DeepSeek-V3's (groups of 8, 4 kept, the
dropped groups masked, the bias ranking only).
"""

import torch


def softmax_topk(scores, bias, topk, renormalize, rsf):
    p = torch.softmax(scores.float(), dim=-1)
    w, ids = torch.topk(p, topk, dim=-1)
    if renormalize:
        w = w / w.sum(-1, keepdim=True)
    return w * rsf, ids.to(torch.int32)


def softmax_topk_unnormalized(scores, bias, topk, renormalize, rsf):
    """The defect: the chosen probabilities are never renormalized."""
    p = torch.softmax(scores.float(), dim=-1)
    w, ids = torch.topk(p, topk, dim=-1)
    return w * rsf, ids.to(torch.int32)


def _grouped(scores, bias, topk, renormalize, rsf, *, groups=True, mask=float("-inf")):
    sig = scores.float().sigmoid()
    choice = sig + bias.float()
    rows, experts = choice.shape
    if groups:
        g = choice.view(rows, 8, experts // 8).topk(2, dim=-1).values.sum(-1)
        kept = torch.zeros_like(g).scatter_(1, g.topk(4, dim=-1).indices, 1.0).bool()
        choice = choice.masked_fill(~kept.repeat_interleave(experts // 8, dim=1), mask)
    ids = choice.topk(topk, dim=-1).indices
    w = sig.gather(1, ids)
    if renormalize:
        w = w / (w.sum(-1, keepdim=True) + 1e-20)
    return w * rsf, ids.to(torch.int32)


def sigmoid_grouped(scores, bias, topk, renormalize, rsf, **_):
    return _grouped(scores, bias, topk, renormalize, rsf)


def sigmoid_no_groups(scores, bias, topk, renormalize, rsf, **_):
    """The defect: the expert groups are ignored (the top-k of all experts)."""
    return _grouped(scores, bias, topk, renormalize, rsf, groups=False)
