"""The validity aspect: ids out of range, an expert twice (but the expert-0 fallback of contracts that have one), or
that fallback where eligible experts are left."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from oracle import Contract

from .clauses import INDEX, NONE, R_FALLBACK_EARLY, R_OUT_OF_RANGE, R_TWICE

__all__ = ["ValidityAspect", "validity_aspect"]


@dataclass(frozen=True)
class ValidityAspect:
    """The validity aspect of each row, [B] each."""

    clause: torch.Tensor  # NONE or INDEX["validity"]
    code: torch.Tensor
    invalid: torch.Tensor  # bool: no ids or weights clause is read for the row


def validity_aspect(contract: Contract, actual_ids: torch.Tensor, valid: torch.Tensor, *, out_of_range: torch.Tensor,
                    twice: torch.Tensor, ids_equal: torch.Tensor) -> ValidityAspect:  # fmt: skip
    """The validity of the candidate's ``actual_ids`` [B, k] (not clamped), ``valid`` [B] the eligible slots of the
    oracle's answer; ``out_of_range``, ``twice``, ``ids_equal`` [B]: the comparison's own masks of these rows."""
    early = _fallback_too_early(contract, actual_ids, valid) & ~out_of_range & ~ids_equal
    invalid = out_of_range | twice | early
    clause = torch.where(invalid, INDEX["validity"], NONE)
    code = torch.where(out_of_range, R_OUT_OF_RANGE, torch.where(twice, R_TWICE, torch.where(early, R_FALLBACK_EARLY, 0)))
    return ValidityAspect(clause, code, invalid)


def _fallback_too_early(contract: Contract, actual_ids: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """bool [B]: expert 0 repeated in more slots than the row has slots no eligible expert can fill."""
    if not contract.has_fallback:
        return torch.zeros(actual_ids.shape[0], dtype=torch.bool, device=actual_ids.device)
    repeats = ((actual_ids == 0).sum(1) - 1).clamp(min=0)  # a single expert 0 is a choice, for the ids aspect to judge
    return repeats > (actual_ids.shape[1] - valid)
