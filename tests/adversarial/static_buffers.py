"""Routers that return the same preallocated output tensors on every call, as kernels with static outputs do.

``wrong_every_other_call`` answers wrongly on odd calls and rightly on even
ones, into one buffer: if the harness kept the tensors of call 1 without
copying them, call 2 would overwrite the wrong answer with the right one
and the run would pass "deterministic". ``racy_ties`` breaks exact ties in
a fresh random order on every call, into one buffer: without a copy the
repeats compare the buffer with itself and never differ.
"""

import torch

import oracle
from contracts.candidates import Candidate

from tests.planted._common import correct, counter

_buffers: dict = {}
_next_call = counter()


def _static(rows: int, topk: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    key = (rows, topk, str(device))
    if key not in _buffers:
        _buffers[key] = (torch.empty(rows, topk, dtype=torch.float32, device=device), torch.empty(rows, topk, dtype=torch.int32, device=device))
    return _buffers[key]


def wrong_every_other_call(scores, bias, topk, renormalize, rsf):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    out_w, out_ids = _static(scores.shape[0], topk, scores.device)
    if _next_call() % 2:  # odd calls: the right experts, in reverse order, with zero weights
        out_w.zero_()
        out_ids.copy_(ids.flip(1))
    else:
        out_w.copy_(w)
        out_ids.copy_(ids)
    return out_w, out_ids


def racy_ties(scores, bias, topk, renormalize, rsf):
    experts = scores.shape[1]
    sig, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking).long()
    order = torch.randperm(experts, generator=torch.Generator().manual_seed(_next_call())).to(scores.device)
    ids = (keys * experts + order).topk(topk, dim=1).indices
    w = sig.gather(1, ids)
    if renormalize:
        total = w.sum(1, keepdim=True)
        w = w / torch.where(total > 0, total, torch.ones_like(total))
    out_w, out_ids = _static(scores.shape[0], topk, scores.device)
    out_w.copy_(w * rsf)
    out_ids.copy_(ids)
    return out_w, out_ids


# The same race, with the tie order declared: only the repeats can catch it.
racy_ties_declared = Candidate(
    name="racy-ties-static-buffer",
    route=racy_ties,
    expected_deviations={"aiter": {"tie_order": "exact ties are broken in a random order"}},
)
