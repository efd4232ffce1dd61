"""The reference side of a comparison: the oracle's answer and the values it ranked.

With ``--against`` the expected ids and weights are the other candidate's,
while the values (scores, ranking, groups) stay the oracle's: attribution
explains a difference in terms of the contract either way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

import oracle

from .tolerance import weights_close

__all__ = ["Expected", "agrees", "expected_for"]


@dataclass
class Expected:
    weights: torch.Tensor  # fp32 [M, k]
    ids: torch.Tensor  # int32 [M, k]
    scores: torch.Tensor  # fp32 [M, E]: the per-expert scores weights are made of (sigmoid, softmax, logit)
    ranking: torch.Tensor  # fp32 [M, E]: scores + bias, what ranks
    selection: torch.Tensor  # fp32 [M, E]: ranking after the group mask (the ranking itself when ungrouped)
    keys: torch.Tensor  # int32 [M, E]: rank keys of ``selection``
    trace: object  # oracle.RouteTrace: groups kept, group scores, eligible slots

    def replaced(self, weights: torch.Tensor, ids: torch.Tensor) -> "Expected":
        """The same values with another answer (a second candidate's)."""
        return dataclasses.replace(self, weights=weights, ids=ids)


def expected_for(case, contract) -> Expected:
    """The oracle's answer for ``case`` under ``contract``, with the values it ranked."""
    trace = oracle.route_trace(
        case.scores,
        case.bias,
        case.topk,
        renormalize=case.renormalize,
        routed_scaling_factor=case.routed_scaling_factor,
        contract=contract,
        **case.group_args,
    )
    return Expected(trace.weights, trace.ids, trace.expert_scores, trace.ranking, trace.selection_ranking,
                    oracle.rank_keys(trace.selection_ranking), trace)  # fmt: skip


def agrees(exp: Expected, output, contract) -> torch.Tensor | None:
    """Per row: does ``output`` give the expected ids, with weights within tolerance? None if malformed."""
    try:
        w, ids = output
        same_ids = (ids.to(exp.ids.device) == exp.ids).all(1)
        return same_ids & weights_close(w.to(exp.weights.device), exp.weights, contract).all(1)
    except (TypeError, ValueError, RuntimeError):
        return None
