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

from .dense import for_comparison
from .tolerance import weights_close

__all__ = ["Expected", "RowValues", "agrees", "expected_for"]


@dataclass
class RowValues:
    """What the oracle ranked, for some rows of a case (attribution needs these only for the rows that differ)."""

    scores: torch.Tensor  # fp32 [B, E]: the per-expert scores weights are made of (sigmoid, softmax, logit)
    ranking: torch.Tensor  # fp32 [B, E]: scores + bias, what ranks
    selection: torch.Tensor  # fp32 [B, E]: ranking after the group mask (the ranking itself when ungrouped)
    keys: torch.Tensor  # int32 [B, E]: rank keys of ``selection``
    valid: torch.Tensor  # int64 [B]: slots filled by an eligible expert
    kept: torch.Tensor | None  # bool [B, G]: the kept groups (grouped contracts)
    group_scores: torch.Tensor | None  # fp32 [B, G]


@dataclass
class Expected:
    """The expected answer of a case, and the oracle's values on demand (``values(rows)``)."""

    weights: torch.Tensor  # fp32 [M, k]
    ids: torch.Tensor  # int32 [M, k]
    case: object
    contract: object

    def replaced(self, weights: torch.Tensor, ids: torch.Tensor) -> "Expected":
        """The same case with another answer (a second candidate's)."""
        return dataclasses.replace(self, weights=weights, ids=ids)

    def values(self, rows: torch.Tensor) -> RowValues:
        """The oracle's values for ``rows`` (int64 indices): the oracle routes each row on its own, so
        routing the subset gives the same values as routing the whole case."""
        case = self.case
        trace = oracle.route_trace(
            case.scores.index_select(0, rows), case.bias, case.topk, renormalize=case.renormalize,
            routed_scaling_factor=case.routed_scaling_factor, contract=self.contract, **case.call_kwargs,
        )  # fmt: skip
        return RowValues(trace.expert_scores, trace.ranking, trace.selection_ranking, oracle.rank_keys(trace.selection_ranking),
                         trace.valid, trace.kept_group_mask, trace.group_scores)  # fmt: skip


def expected_for(case, contract) -> Expected:
    """The oracle's answer for ``case`` under ``contract`` (its values are computed later, for the rows that need them)."""
    weights, ids = oracle.route(
        case.scores,
        case.bias,
        case.topk,
        renormalize=case.renormalize,
        routed_scaling_factor=case.routed_scaling_factor,
        contract=contract,
        **case.call_kwargs,
    )
    return Expected(weights, ids, case, contract)


def agrees(exp: Expected, output, contract) -> torch.Tensor | None:
    """Per row: does ``output`` give the expected ids, with weights within tolerance? None if malformed."""
    try:
        w, ids = for_comparison(output, exp)  # a dense answer's experts in the expected columns: compared as a set
        same_ids = (ids.to(exp.ids.device) == exp.ids).all(1)
        return same_ids & weights_close(w.to(exp.weights.device), exp.weights, contract).all(1)
    except (TypeError, ValueError, RuntimeError):
        return None
