"""The clauses a row can break, in the order its primary clause is chosen, the reason codes, and ``Blame``.

Every aspect module names a clause by its index in ``CLAUSE_ORDER`` and a
reason by one of the ``R_*`` codes below; ``contracts.compare.reasons`` turns
(clause, code) into text, once, for the rows a report shows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = ["CLAUSE_ORDER", "INDEX", "NEAR_TIE", "NONE", "Blame"]

# Every clause name, in the order a row's primary clause is chosen (the first broken one wins).
CLAUSE_ORDER: tuple[str, ...] = (
    "validity", "group_mask", "group_selection", "group_tie_order", "nan_last", "sentinel_fallback",
    "tie_order", "signed_zero", "selection", "output_order", "bias_in_weight", "renorm_guard", "renormalization",
    "softmax_scope", "scaling", "weight_accuracy",
)  # fmt: skip
INDEX = {name: i for i, name in enumerate(CLAUSE_ORDER)}
NEAR_TIE = -2  # the ids aspect found only a near tie
NONE = -1

# Reason codes: (clause, code) -> the reason's template; {slot}, {n}, {extra}, {missing}, ... are filled per row.
R_OUT_OF_RANGE, R_TWICE, R_FALLBACK_EARLY = 1, 2, 3
R_ROUND_INDEX, R_NAN_OVER_NUMBER, R_NAN_ORDER, R_NAN_TAKEN, R_NUMBER_OVER_NAN, R_NAN_GROUPS = 10, 11, 12, 13, 14, 15
R_SENTINEL = 20
R_GROUP_MASK, R_GROUP_SELECTION, R_GROUP_TIE, R_GROUP_MASK_VALUE = 30, 31, 32, 33
R_TIE_SET, R_TIE_ORDER, R_SIGNED_ZERO, R_NEAR_ULP, R_NEAR_SET, R_NAN_TIE = 40, 41, 42, 44, 45, 46
R_SELECTION, R_SELECTION_FTZ, R_ORDER, R_ORDER_FTZ, R_NOT_TOP_NUMBERS, R_NOT_TOP_ELIGIBLE = 50, 51, 52, 53, 54, 55
R_BIAS, R_GUARD_DIVIDED, R_NOT_RENORMALIZED, R_SCALING, R_ACCURACY = 60, 61, 62, 63, 64
R_RENORMALIZED, R_SOFTMAX_OF_CHOSEN, R_SOFTMAX_OF_ALL, R_FACTOR, R_EPS_MISSING = 65, 66, 67, 68, 69
R_EPS_ADDED, R_GUARD_ADDED = 74, 75
# a per-expert weight scale (weight_scale="per_expert") ignored, applied before renormalizing, taken by slot, or twice
R_SCALE_IGNORED, R_SCALE_BEFORE_RENORM, R_SCALE_BY_SLOT, R_SCALE_TWICE = 70, 71, 72, 73
# the shared expert's column (shared_expert_slot="last", contracts.compare.shared): its id, its weight
R_SHARED_ID, R_SHARED_WEIGHT = 80, 81
# the contract's weights rounded to bf16 / fp16: the weights were cast to a 16-bit dtype (weight_accuracy)
R_CAST_BF16, R_CAST_FP16 = 90, 91
# a dense answer's row (contracts.compare.dense): the routing_map holds more or fewer than k experts, or probs are
# nonzero (NaN, infinite) outside it
R_DENSE_MORE, R_DENSE_FEWER, R_DENSE_OUTSIDE = 100, 101, 102


@dataclass
class Blame:
    """Per bad row (the rows passed in, in order): the clause of each aspect (index into CLAUSE_ORDER, or NONE / NEAR_TIE).

    Mutable: ``contracts.compare.shared`` and ``contracts.compare.dense`` add the clauses of the shared expert's
    column and of a dense answer's faults after the attribution."""

    validity: torch.Tensor  # [B] NONE or INDEX["validity"]
    ids: torch.Tensor  # [B] clause index, NONE, or NEAR_TIE
    weights: torch.Tensor  # [B] clause index or NONE
    validity_code: torch.Tensor
    ids_code: torch.Tensor
    weights_code: torch.Tensor
    slot: torch.Tensor  # [B] the first differing slot (-1 if none)
    # [B, k] the contract's weights for the candidate's own experts (where the row also breaks renorm_guard in a narrower
    # arithmetic, that rule's weights): what a declared weight_accuracy's bound is measured from
    reference_weights: torch.Tensor
    weights_ok: torch.Tensor  # [B, k] bool
    # The row-whole check of the ids, beside a clause that frees part of them (nan_last, sentinel_fallback):
    # ``selection`` when the experts that clause does not free are not the top ones.
    core: torch.Tensor | None = None
    core_code: torch.Tensor | None = None
    # A second weight rule the same row breaks (renormalization and scaling both missing, say).
    weights2: torch.Tensor | None = None
    weights2_code: torch.Tensor | None = None
    factor: torch.Tensor | None = None  # [B] the constant a ``scaling`` row's weights are off by (NaN if none)
    # [B] how far past the contract's cutoff the row's choice reaches, relative (``selection_departure``): what a
    # declared ``selection`` must bound
    selection_departure: torch.Tensor | None = None
    # [B] how far the groups the row's experts came from depart from a choice of groups by score, relative
    # (``group_departure``): what a declared ``group_selection`` or ``group_mask`` must bound
    group_departure: torch.Tensor | None = None

    def __post_init__(self):
        none = torch.full_like(self.ids, NONE)
        for name in ("core", "core_code", "weights2", "weights2_code"):
            if getattr(self, name) is None:
                setattr(self, name, none.clone() if not name.endswith("code") else torch.zeros_like(self.ids))
        if self.factor is None:
            self.factor = torch.full(self.ids.shape, math.nan, device=self.ids.device)
        for name in ("selection_departure", "group_departure"):
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros(self.ids.shape, device=self.ids.device))

    def aspects(self) -> tuple[torch.Tensor, ...]:
        """The clause of every aspect, in the order reasons are listed: validity, ids, the row-whole ids, weights (two)."""
        return (self.validity, self.ids, self.core, self.weights, self.weights2)

    def codes(self) -> tuple[torch.Tensor, ...]:
        return (self.validity_code, self.ids_code, self.core_code, self.weights_code, self.weights2_code)

    def broken(self) -> torch.Tensor:
        """bool [B, len(CLAUSE_ORDER)]: every clause each row breaks."""
        rows = self.ids.shape[0]
        out = torch.zeros((rows, len(CLAUSE_ORDER)), dtype=torch.bool, device=self.ids.device)
        for aspect in self.aspects():
            hit = aspect >= 0
            out[hit.nonzero().squeeze(1), aspect[hit]] = True
        return out
