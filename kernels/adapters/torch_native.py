"""Torch-native routing, as serving engines write their fallback (docs/contracts.md#how-other-routers-differ).

    sig = sigmoid(x.float()); ranked = sig + bias
    ids = torch.topk(ranked, k).indices; w = sig.gather(ids)
    w = w / w.sum() if renormalize (no guard); w = w * routed_scaling_factor

Its tie order is whatever ``torch.topk`` does on the device (unspecified, and
different on CPU and CUDA), and ``torch.topk`` ranks NaN above every number.
It is here so users can see, column by column, what that costs them.
"""

from __future__ import annotations

import torch

from ._args import check_args

__all__ = ["route"]


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0):
    # torch reads the logits and the bias in any layout, as an engine's fallback does: no stride is refused
    check_args(scores, bias, topk, renormalize, routed_scaling_factor, logits_rows=False)
    sig = torch.sigmoid(scores.float())
    ranked = sig + bias.float()
    ids = torch.topk(ranked, topk, dim=-1).indices
    weights = sig.gather(1, ids)
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    weights = weights * routed_scaling_factor
    return weights, ids.to(torch.int32)
