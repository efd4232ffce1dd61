"""Expert load on captured logits: how many tokens each expert receives, per layer, from the oracle and the candidate.

Training runs log this histogram (the load-balancing statistic), and a
routing defect often shows as a load skew before anyone looks at single
tokens. A check on captured logits (``--logits``) counts, per family (a
layer), the expert ids of the oracle's answer and of the candidate's, and the
summary records both the oracle's histogram and the candidate's difference
from it (``Summary.expert_load``; the records themselves: contracts.reports.expert_load).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..reports.expert_load import load_record

__all__ = ["ExpertLoad"]


def _counts(ids: torch.Tensor, experts: int) -> torch.Tensor:
    flat = ids.reshape(-1).long().cpu()
    flat = flat[(flat >= 0) & (flat < experts)]  # an out-of-range id is a validity finding, not a load
    return torch.bincount(flat, minlength=experts)


@dataclass
class ExpertLoad:
    """Per family: the oracle's and the candidate's expert counts, summed case by case (bounded: [E] per layer)."""

    oracle: dict[str, torch.Tensor] = field(default_factory=dict)
    candidate: dict[str, torch.Tensor] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)

    def add(self, family: str, experts: int, oracle_ids: torch.Tensor, candidate_ids: torch.Tensor) -> None:
        zero = torch.zeros(experts, dtype=torch.long)
        self.oracle[family] = self.oracle.get(family, zero) + _counts(oracle_ids, experts)
        self.candidate[family] = self.candidate.get(family, zero) + _counts(candidate_ids, experts)
        self.rows[family] = self.rows.get(family, 0) + int(oracle_ids.shape[0])

    def record(self) -> dict | None:
        """``summary.json``'s ``expert_load`` (contracts.reports.expert_load.load_record)."""
        return load_record({f: (self.rows[f], self.oracle[f].tolist(), self.candidate[f].tolist()) for f in self.rows})
