"""Expert load on captured logits: how many tokens each expert receives, per layer, from the oracle and the candidate.

Training runs log this histogram (the load-balancing statistic), and a
routing defect often shows as a load skew before anyone looks at single
tokens. A check on captured logits (``--logits``) counts, per family (a
layer), the expert ids of the oracle's answer and of the candidate's, and the
summary records both the oracle's histogram and the candidate's difference
from it (``Summary.expert_load``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

__all__ = ["ExpertLoad", "load_rows", "sum_records"]


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

    def add_record(self, record: dict) -> None:
        """Add another shard's ``record()`` (its counts: the oracle's, and the candidate's as the oracle's plus the difference)."""
        for family, v in record.items():
            o = torch.tensor(v["oracle"], dtype=torch.long)
            c = o + torch.tensor(v["candidate_minus_oracle"], dtype=torch.long)
            if family in self.oracle and self.oracle[family].numel() != o.numel():
                raise ValueError(f"expert_load of {family}: {o.numel()} experts in one part, {self.oracle[family].numel()} in another")
            self.oracle[family] = self.oracle.get(family, torch.zeros_like(o)) + o
            self.candidate[family] = self.candidate.get(family, torch.zeros_like(c)) + c
            self.rows[family] = self.rows.get(family, 0) + int(v["rows"])

    def record(self) -> dict | None:
        """``summary.json``'s ``expert_load``: per family, rows, the oracle's counts, the candidate's minus the oracle's,
        and the figures a reader scans (the hottest expert's load over the mean, the largest count difference)."""
        if not self.rows:
            return None
        out = {}
        for family in sorted(self.oracle, key=_layer_order):  # the plan's order (layer 0 first), whichever shard saw a layer first
            o = self.oracle[family]
            c = self.candidate[family]
            diff = c - o
            mean = o.sum().item() / max(o.numel(), 1)
            out[family] = {
                "rows": self.rows[family],
                "oracle": o.tolist(),
                "candidate_minus_oracle": diff.tolist(),
                "oracle_max_over_mean": round(o.max().item() / mean, 4) if mean else 0.0,
                "candidate_max_over_mean": round(c.max().item() / mean, 4) if mean else 0.0,
                "max_abs_difference": int(diff.abs().max().item()),
                "experts_differing": int((diff != 0).sum().item()),
            }
        return out


def _layer_order(family: str) -> tuple[int, str]:
    tail = family.rpartition(".L")[2]
    return (int(tail), family) if tail.isdigit() else (-1, family)


def sum_records(records: list[dict | None]) -> dict | None:
    """The ``expert_load`` of a check whose cases were split (torchrun ranks, merged ``--shard`` bundles): every part's
    counts added per layer, the derived figures recomputed; None when no part checked captured logits."""
    load = ExpertLoad()
    for record in records:
        if record:
            load.add_record(record)
    return load.record()


def load_rows(expert_load: dict | None) -> list[dict]:
    """One table row per layer, for the reports."""
    return [
        {"family": family, "rows": v["rows"], "hottest expert (oracle)": int(max(range(len(v["oracle"])), key=v["oracle"].__getitem__)),
         "oracle max/mean": v["oracle_max_over_mean"], "candidate max/mean": v["candidate_max_over_mean"],
         "max abs(candidate - oracle)": v["max_abs_difference"], "experts differing": v["experts_differing"]}
        for family, v in (expert_load or {}).items()
    ]  # fmt: skip
