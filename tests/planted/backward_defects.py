"""Routers whose forward is right and whose backward is wrong in one named way (the backward check's corpus).

Each is a plain routing callable, selecting as torch does (``torch.topk`` of the scores plus the bias) and
weighting by the contract's formula, with one defect in the gradient only. ``DEFECTS`` maps each to the contract
family it is checked under and the backward clause it must FAIL with.
"""

from __future__ import annotations

import torch


def _select(scores, bias, topk, **groups):
    ranked = scores.detach() + (bias.detach().float() if bias is not None else 0.0)
    if groups.get("num_expert_group", 1) > 1:  # the contract's group rule: top-2 sum per group, kept groups only
        g, kept = groups["num_expert_group"], groups["topk_group"]
        per = ranked.view(ranked.shape[0], g, -1)
        gscore = per.topk(2, dim=2).values.sum(2)
        keep = torch.zeros_like(gscore, dtype=torch.bool).scatter_(1, gscore.topk(kept, dim=1).indices, True)
        ranked = per.masked_fill(~keep.unsqueeze(2), -float("inf")).view_as(ranked)
    return torch.topk(ranked, topk, dim=1).indices


def _finish(w, ids, renormalize, rsf, *, detach_sum=False):
    if renormalize:
        total = w.sum(dim=1, keepdim=True)
        w = w / (total.detach() if detach_sum else total)
    return w * rsf, ids.to(torch.int32)


def detached_renormalization(scores, bias, topk, renormalize, rsf, **groups):
    """``w / w.sum().detach()``: the quotient rule's second term is lost (grad_renormalization)."""
    sig = torch.sigmoid(scores.float())
    ids = _select(sig, bias, topk, **groups)
    return _finish(sig.gather(1, ids), ids, renormalize, rsf, detach_sum=True)


def straight_through(scores, bias, topk, renormalize, rsf, **groups):
    """A straight-through top-k: the hard-masked scores forward, the dense scores' gradient backward
    (``sig + (sig * mask - sig).detach()``), so the denominator summed over that dense tensor pulls on experts not
    chosen (grad_unselected, on every renormalized row)."""
    sig = torch.sigmoid(scores.float())
    ids = _select(sig, bias, topk, **groups)
    hard = torch.zeros_like(sig).scatter_(1, ids, 1.0)
    dense = sig + (sig * hard - sig).detach()
    w = dense.gather(1, ids)
    if renormalize:
        w = w / dense.sum(dim=1, keepdim=True)
    return w * rsf, ids.to(torch.int32)


def bias_gradient(scores, bias, topk, renormalize, rsf, **groups):
    """Weights gathered from ``sig + bias`` with the bias subtracted again, detached: the forward is the scores',
    the backward sends the weights' gradient into the bias (grad_bias)."""
    sig = torch.sigmoid(scores.float())
    ids = _select(sig, bias, topk, **groups)
    ranked = sig + bias.float()
    w = ranked.gather(1, ids) - bias.float().detach()[ids]
    return _finish(w, ids, renormalize, rsf)


class _ScaleForwardOnly(torch.autograd.Function):
    """``w * rsf`` forward; backward passes the gradient through unscaled (the factor forgotten)."""

    @staticmethod
    def forward(ctx, w, rsf):
        return w * rsf

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def missing_scaling(scores, bias, topk, renormalize, rsf, **groups):
    """A custom autograd.Function scales forward only (grad_scaling, whenever rsf != 1)."""
    sig = torch.sigmoid(scores.float())
    ids = _select(sig, bias, topk, **groups)
    w = sig.gather(1, ids)
    if renormalize:
        w = w / w.sum(dim=1, keepdim=True)
    return _ScaleForwardOnly.apply(w, float(rsf)), ids.to(torch.int32)


class _SigmoidWrongBackward(torch.autograd.Function):
    """sigmoid forward; backward ``grad * s`` instead of ``grad * s * (1 - s)``."""

    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(s)
        return s

    @staticmethod
    def backward(ctx, grad):
        (s,) = ctx.saved_tensors
        return grad * s


def wrong_sigmoid_derivative(scores, bias, topk, renormalize, rsf, **groups):
    """A fused sigmoid whose backward forgets the (1 - s) factor (grad_score_function)."""
    sig = _SigmoidWrongBackward.apply(scores.float())
    ids = _select(sig, bias, topk, **groups)
    return _finish(sig.gather(1, ids), ids, renormalize, rsf)


def softmax_without_cross_terms(scores, bias, topk, renormalize, rsf, **groups):
    """A softmax (over all experts) whose backward keeps the diagonal p * (1 - p) only (grad_score_function)."""
    p = torch.softmax(scores.float(), dim=1)
    p = p.detach() + (scores.float() - scores.float().detach()) * (p * (1 - p)).detach()
    ids = torch.topk(p.detach(), topk, dim=1).indices
    return _finish(p.gather(1, ids), ids, renormalize, rsf)


def softmax_topk_detached(scores, bias, topk, renormalize, rsf, **groups):
    """gpt-oss style (softmax over the k chosen logits) with the softmax's normalizer detached (grad_score_function:
    the post-softmax's own normalization is its score function)."""
    x = scores.float()
    ids = torch.topk(x.detach(), topk, dim=1).indices
    chosen = x.gather(1, ids)
    e = (chosen - chosen.detach().amax(dim=1, keepdim=True)).exp()
    w = e / e.sum(dim=1, keepdim=True).detach()
    return _finish(w, ids, False, rsf)


def raises_in_backward(scores, bias, topk, renormalize, rsf, **groups):
    """A custom Function whose backward raises: the candidate's ERROR, not the harness's traceback."""
    sig = torch.sigmoid(scores.float())
    ids = _select(sig, bias, topk, **groups)
    return _Explodes.apply(sig.gather(1, ids)), ids.to(torch.int32)


class _Explodes(torch.autograd.Function):
    @staticmethod
    def forward(ctx, w):
        return w.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("no backward for this fused kernel")


def no_gradient(scores, bias, topk, renormalize, rsf, **groups):
    """A kernel without autograd: weights computed under no_grad."""
    with torch.no_grad():
        sig = torch.sigmoid(scores.float())
        ids = _select(sig, bias, topk, **groups)
        return _finish(sig.gather(1, ids), ids, renormalize, rsf)


# name -> (router, contract, the clause it must fail with)
DEFECTS = {
    "detached_renormalization": (detached_renormalization, "aiter", "grad_renormalization"),
    "straight_through": (straight_through, "aiter", "grad_unselected"),
    "bias_gradient": (bias_gradient, "aiter", "grad_bias"),
    "missing_scaling": (missing_scaling, "aiter", "grad_scaling"),
    "wrong_sigmoid_derivative": (wrong_sigmoid_derivative, "aiter", "grad_score_function"),
    "grouped_detached_renormalization": (detached_renormalization, "deepseek-v3", "grad_renormalization"),
    "grouped_bias_gradient": (bias_gradient, "deepseek-v3", "grad_bias"),
    "softmax_without_cross_terms": (softmax_without_cross_terms, "qwen3-moe", "grad_score_function"),
    "softmax_topk_detached": (softmax_topk_detached, "gpt-oss", "grad_score_function"),
}
