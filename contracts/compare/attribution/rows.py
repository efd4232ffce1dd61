"""What every aspect reads of the bad rows (``BadRows``), the per-row helpers they share, and ``Assignment``.

Shapes: ``B`` bad rows, ``k`` slots, ``E`` experts, ``G`` groups. Ids are int64 throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

import oracle
from oracle import Contract

from .clauses import INDEX, NONE

__all__ = ["LOWEST", "Assignment", "BadRows", "at", "contract_keys", "groups_of", "repeats", "same_ids", "select_under", "unmatched"]

LOWEST = -(1 << 42)  # a rank key below every real one (ineligible experts)


@dataclass
class BadRows:
    """What attribution needs of the bad rows, gathered once (``attribute``)."""

    expected_ids: torch.Tensor  # [B, k] the expected answer's ids
    actual_ids: torch.Tensor  # [B, k] the candidate's ids clamped into range
    actual_weights: torch.Tensor  # [B, k]
    expected_weights: torch.Tensor  # [B, k]
    keys: torch.Tensor  # [B, E] rank keys of ``selection``
    selection: torch.Tensor  # [B, E] the ranking after the group mask
    ranking: torch.Tensor  # [B, E] scores + bias
    scores: torch.Tensor  # [B, E] what weights are made of
    logits: torch.Tensor  # [B, E] as fp32
    bias: torch.Tensor | None  # [E]
    logits_max: torch.Tensor  # [B] the row's largest logit (NaN ignored): a softmax's error grows with the distance to it
    valid: torch.Tensor  # [B] eligible slots of the oracle's answer
    kept: torch.Tensor | None  # [B, G] bool: the contract's kept groups (grouped contracts)
    group_scores: torch.Tensor | None  # [B, G]

    @property
    def group_size(self) -> int:
        """Experts per group (grouped contracts only)."""
        return self.ranking.shape[1] // self.kept.shape[1]

    def subset(self, rows: torch.Tensor) -> "BadRows":
        """The fields of ``rows`` (indices into these rows); the bias is per expert, shared."""
        return BadRows(**{f.name: (getattr(self, f.name).index_select(0, rows)
                                   if f.name != "bias" and getattr(self, f.name) is not None else getattr(self, f.name))
                          for f in fields(self)})  # fmt: skip


class Assignment:
    """One aspect's clause and reason code per row, first come first served: a row keeps the first clause assigned,
    and ``todo`` holds the rows still without one."""

    def __init__(self, todo: torch.Tensor):
        self.clause = torch.full(todo.shape, NONE, dtype=torch.long, device=todo.device)
        self.code = torch.zeros_like(self.clause)
        self.todo = todo

    def assign(self, mask: torch.Tensor, clause: str | int, reason: int) -> None:
        """``clause`` (a name, or NEAR_TIE) and ``reason`` for the ``mask`` rows still to do."""
        hit = self.todo & mask
        self.clause[hit] = INDEX[clause] if isinstance(clause, str) else clause
        self.code[hit] = reason
        self.todo = self.todo & ~hit


def at(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``values`` [B, E] at ``ids`` [B, n]."""
    return values.gather(1, ids)


def repeats(ids: torch.Tensor) -> torch.Tensor:
    """long [B, k]: how many earlier slots of the row hold the same id (0 for a first occurrence)."""
    k = ids.shape[1]
    slots = torch.arange(k, device=ids.device)
    earlier = slots.view(1, 1, -1) < slots.view(1, -1, 1)
    return ((ids.unsqueeze(2) == ids.unsqueeze(1)) & earlier).sum(2)


def unmatched(ids: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """bool [B, k]: slots of ``ids`` left over when the two rows are matched as multisets, one for one."""
    count = (ids.unsqueeze(2) == other.unsqueeze(1)).sum(2)
    return repeats(ids) >= count


def select_under(values: torch.Tensor, topk: int, contract: Contract) -> torch.Tensor:
    """The ids the contract would choose from ``values`` (a counterfactual ranking), in contract order."""
    return oracle.select_ids(values, topk, contract=contract).long()


def same_ids(alternative: torch.Tensor, actual_ids: torch.Tensor, contract: Contract) -> torch.Tensor:
    """bool [B]: ``alternative`` gives the candidate's ids: slot by slot, or as a set where the contract's order is
    ``any``."""
    if contract.output_order == "any":
        return (alternative.sort(1).values == actual_ids.sort(1).values).all(1)
    return (alternative == actual_ids).all(1)


def contract_keys(rows: BadRows, contract: Contract) -> torch.Tensor:
    """int64 [B, E]: the order the contract ranks the experts in: NaN by the NaN rule, ineligible values lowest."""
    keys = rows.keys.long()
    nan = torch.isnan(rows.selection)
    if contract.nan_rule == "first":
        keys = keys.masked_fill(nan, 1 << 40)
    elif contract.nan_rule == "never":
        keys = keys.masked_fill(nan, LOWEST)
    if contract.floor is not None:
        keys = keys.masked_fill(rows.selection <= contract.floor, LOWEST)
    return keys


def groups_of(rows: BadRows, picks: torch.Tensor) -> torch.Tensor:
    """bool [B, G]: the groups of the candidate's experts where ``picks`` [B, k] is True."""
    return torch.zeros(rows.kept.shape, device=rows.actual_ids.device).scatter_reduce_(
        1, rows.actual_ids // rows.group_size, picks.float(), "amax") > 0  # fmt: skip
