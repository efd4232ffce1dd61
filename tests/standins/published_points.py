"""A user's kernel that publishes its launch shapes as the kernel packages do: a block per token below 100 rows, a
warp per token from 100. Its fp16 loader for the warp launch is wrong (the first row comes out reversed), so only a
plan that pins fp16 logits at 100 rows or more sees it."""

import torch

from tests.planted._common import correct

BATCH_SWITCH_POINTS = (100,)


def route(scores, bias, topk, renormalize, routed_scaling_factor):
    weights, ids = correct(scores, bias, topk, renormalize, routed_scaling_factor)
    if scores.dtype == torch.float16 and scores.shape[0] >= 100:
        weights, ids = weights.clone(), ids.clone()
        weights[0], ids[0] = weights[0].flip(0), ids[0].flip(0)
    return weights, ids
