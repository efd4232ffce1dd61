"""Breaks exact ties differently on every call (a kernel whose tie order depends on a race).

Each call ranks by the aiter contract's keys but orders equal keys by a fresh
random permutation, so rows with a tie at the top-k cutoff change between calls.
"""

import torch

import oracle
from contracts.candidates import Candidate

from ._common import counter

_next_call = counter()


def route(scores, bias, topk, renormalize, rsf):
    experts = scores.shape[1]
    sig, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking).long()
    order = torch.randperm(experts, generator=torch.Generator().manual_seed(_next_call())).to(scores.device)
    ids = (keys * experts + order).topk(topk, dim=1).indices
    weights = sig.gather(1, ids)
    if renormalize:
        total = weights.sum(1, keepdim=True)
        weights = weights / torch.where(total > 0, total, torch.ones_like(total))
    return weights * rsf, ids.to(torch.int32)


# The same router, declaring both of its deviations: such a run passes and reports them as seen.
declared = Candidate(
    name="flaky-ties-declared",
    route=route,
    expected_deviations={
        "aiter": {
            "tie_order": "exact ties are broken in a random order",
            "determinism": "the tie order changes from call to call",
        }
    },
)
