"""The reference side of a comparison: the oracle's answer and the values it ranked."""

from __future__ import annotations

from dataclasses import dataclass

import torch

import oracle

from .tolerance import weights_close

__all__ = ["Expected", "agrees", "expected_for"]


@dataclass
class Expected:
    """The reference side of a comparison, plus what attribution needs."""

    weights: torch.Tensor
    ids: torch.Tensor
    sig: torch.Tensor  # fp32 [M, E], the oracle's
    ranking: torch.Tensor  # fp32 [M, E]
    keys: torch.Tensor  # int32 [M, E]


def expected_for(case, contract: oracle.Contract) -> Expected:
    """The oracle's answer for ``case`` under ``contract``, with its ranking data."""
    weights, ids, sig, ranking = oracle.route_with_values(
        case.scores,
        case.bias,
        case.topk,
        renormalize=case.renormalize,
        routed_scaling_factor=case.routed_scaling_factor,
        contract=contract,
    )
    return Expected(weights, ids, sig, ranking, oracle.rank_keys(ranking))


def agrees(exp: Expected, output, contract: oracle.Contract) -> torch.Tensor | None:
    """Per row: does ``output`` give the expected ids, with weights within tolerance? None if malformed."""
    try:
        w, ids = output
        same_ids = (ids.to(exp.ids.device) == exp.ids).all(1)
        return same_ids & weights_close(w.to(exp.weights.device), exp.weights, contract).all(1)
    except (TypeError, ValueError, RuntimeError):
        return None
