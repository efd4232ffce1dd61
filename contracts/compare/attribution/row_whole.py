"""The row-whole check beside ``nan_last`` and ``sentinel_fallback`` (``Blame.core``).

Those clauses free where NaN ranks and what fills the slots no eligible expert can, never which numbers are
chosen: the candidate's other experts (numbers, above the floor) must still be the top ones of the row, up to exact
and near ties at their cutoff, or the row also breaks ``selection``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

import oracle
from oracle import Contract

from .clauses import INDEX, NONE, R_NAN_TIE, R_NOT_TOP_ELIGIBLE, R_NOT_TOP_NUMBERS
from .groups import top_groups
from .rows import LOWEST, BadRows, at, contract_keys, repeats
from .ties import near_to, rule_explains

__all__ = ["RowWholeAspect", "row_whole_aspect"]


@dataclass(frozen=True)
class RowWholeAspect:
    """Per row: the clause of the row-whole check (``selection``, ``tie_order`` or NONE) and its reason code."""

    clause: torch.Tensor  # [B]
    code: torch.Tensor  # [B]


def row_whole_aspect(rows: BadRows, contract: Contract, ids_clause: torch.Tensor, freed: torch.Tensor) -> RowWholeAspect:
    """The row-whole check of the rows whose ids aspect is ``nan_last`` or ``sentinel_fallback`` (``ids_clause``
    [B]); ``freed`` [B, k]: the slots the ids aspect found freed (aiter's round index). Beside ``sentinel_fallback``
    the candidate must also take as many eligible experts as the contract fills."""
    n_rows = rows.actual_ids.shape[0]
    clause = torch.full((n_rows,), NONE, dtype=torch.long, device=rows.actual_ids.device)
    code = torch.zeros_like(clause)
    nan_rows = ids_clause == INDEX["nan_last"]
    sentinel_rows = ids_clause == INDEX["sentinel_fallback"]
    sub = (nan_rows | sentinel_rows).nonzero().squeeze(1)
    if sub.numel() == 0:
        return RowWholeAspect(clause, code)
    subset = rows.subset(sub)
    freed_sub = freed.index_select(0, sub)
    not_top, taken = _numbers_not_top(subset, contract, freed_sub)
    if subset.kept is not None and bool(not_top.any()):
        not_top &= _numbers_not_top_under_nan_first_groups(subset, contract, freed_sub)
    short = sentinel_rows.index_select(0, sub) & (taken < subset.valid)  # a fallback where eligible experts are left
    reason = torch.where(sentinel_rows.index_select(0, sub), R_NOT_TOP_ELIGIBLE, R_NOT_TOP_NUMBERS)
    hit = not_top | short
    clause[sub[hit]] = INDEX["selection"]
    code[sub[hit]] = reason[hit]
    tie_broken = ~hit & _nan_tie_broken(subset, contract, freed_sub)
    clause[sub[tie_broken]] = INDEX["tie_order"]
    code[sub[tie_broken]] = R_NAN_TIE
    return RowWholeAspect(clause, code)


def _nan_tie_broken(rows: BadRows, contract: Contract, freed: torch.Tensor) -> torch.Tensor:
    """bool [B]: NaN experts taken where the NaN rule put numbers (NaN ranked higher) all tie: the tie rule says which,
    and the router took others than it says."""
    nan = torch.isnan(rows.selection)
    took = at(nan, rows.actual_ids) & (repeats(rows.actual_ids) == 0) & ~freed
    nan_taken = torch.zeros(rows.selection.shape, dtype=torch.long, device=rows.actual_ids.device).scatter_add_(
        1, rows.actual_ids, took.long()) > 0  # fmt: skip
    priority = oracle.tie_priority(rows.logits.shape[1], contract.tie_rule).to(rows.logits.device)
    return took.any(1) & ~rule_explains(priority, nan_taken, nan)


def _numbers_not_top_under_nan_first_groups(rows: BadRows, contract: Contract, freed: torch.Tensor) -> torch.Tensor:
    """bool [B]: the numbers are not the top ones either where NaN ranks first in the group scores. The NaN rule frees
    where NaN ranks in the group scores too: a router that ranks NaN first (torch.topk) gives every group holding NaN a
    NaN score, keeps those groups first and takes its numbers from the groups it kept. With more such groups than the
    contract keeps, which of them are kept is a tie among NaN group scores; the groups the router took its experts
    from then say which, if they are all such groups. SGLang's torch router failed so on selection
    (``tests/test_grouped_contracts.py::test_a_router_that_ranks_nan_first_in_the_group_scores_passes_under_its_declarations``)."""
    not_top = torch.ones(rows.actual_ids.shape[0], dtype=torch.bool, device=rows.actual_ids.device)
    for used in (False, True):
        not_top &= _numbers_not_top(dataclasses.replace(rows, **_nan_first_groups(rows, contract, used)), contract, freed)[0]
    return not_top


def _numbers_not_top(rows: BadRows, contract: Contract, freed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bool [B], long [B]): whether the candidate's numbers (the experts its NaN or fallback slots leave, ``freed``
    aside) are not the top numbers of ``rows.selection`` up to exact and near ties at their cutoff; how many it took."""
    pool = ~torch.isnan(rows.selection)
    if contract.floor is not None:
        pool &= rows.selection > contract.floor
    keys = contract_keys(rows, contract)
    counted = at(pool, rows.actual_ids) & (repeats(rows.actual_ids) == 0) & ~freed
    n = counted.sum(1)
    ranked = torch.where(pool, keys, torch.full_like(keys, LOWEST))
    top_keys, top_experts = ranked.sort(1, descending=True)
    nth = (n - 1).clamp(min=0).unsqueeze(1)
    boundary, anchor = top_keys.gather(1, nth), top_experts.gather(1, nth)
    experts = torch.arange(rows.logits.shape[1], device=rows.logits.device).expand_as(keys)
    taken = torch.zeros(keys.shape, dtype=torch.long, device=keys.device).scatter_add_(1, rows.actual_ids, counted.long()) > 0
    below = counted & (at(keys, rows.actual_ids) < boundary) & ~near_to(rows, contract, rows.actual_ids, anchor)
    passed_over = pool & ~taken & (keys > boundary) & ~near_to(rows, contract, experts, anchor)
    return (n > 0) & (below.any(1) | passed_over.any(1)), n


def _nan_first_groups(rows: BadRows, contract: Contract, used: bool) -> dict:
    """The fields of ``rows`` a grouped contract gives when NaN ranks first in the group scores: a group holding NaN
    scores NaN (its top value, or the sum of its top two, under NaN first) and is kept before every number, ties by
    the contract's group tie rule or, with ``used``, where more groups hold NaN than are kept, the groups the router
    took its experts from when every one of them holds NaN; the selection is the ranking masked outside the groups
    kept."""
    n_rows, experts = rows.ranking.shape
    n_group = rows.kept.shape[1]
    size = experts // n_group
    per_group = rows.ranking.view(n_rows, n_group, size)
    nan_group = torch.isnan(per_group).any(2)
    group_keys = oracle.rank_keys(rows.group_scores.float().contiguous() + 0.0).long().masked_fill(nan_group, 1 << 40)
    kept = top_groups(group_keys, contract.group_tie_rule, contract.topk_group)
    if used:
        took = torch.zeros_like(rows.kept).scatter_(1, rows.actual_ids // size, True)
        tied = (nan_group.sum(1) > contract.topk_group) & ~(took & ~nan_group).any(1) & (took.sum(1) <= contract.topk_group)
        kept = torch.where(tied.unsqueeze(1), took, kept)
    selection = per_group.masked_fill(~kept.unsqueeze(2), contract.group_mask).view(n_rows, experts)
    return {"selection": selection, "keys": oracle.rank_keys(selection.contiguous()), "kept": kept}
