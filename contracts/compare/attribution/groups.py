"""The groups a grouped contract keeps: experts chosen from groups the contract dropped, read by the contract's own
rule within other groups (the other mask value, the other group tie rule or group score, another group kept in place
of one, groups kept among NaN scores) before they are left a leak (``group_mask``).

The ids aspect (``ids``) runs ``read_other_groups`` before the special values, which would otherwise take the blame
for an expert of another group, and ``read_group_leak`` after them. Both assign into the ids aspect's
``Assignment``; the group tie read with the experts within the groups it keeps is ``ids.within_tied_groups``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import oracle
from oracle import Contract

from ..group_ties import at_the_mask, ranked_group_scores
from .clauses import R_GROUP_MASK, R_GROUP_MASK_VALUE, R_GROUP_SELECTION, R_GROUP_TIE, R_NAN_GROUPS
from .rows import Assignment, BadRows, at, groups_of, same_ids, select_under

__all__ = ["read_group_leak", "read_other_groups", "top_groups"]


@dataclass(frozen=True)
class _GroupsUsed:
    """Which groups the router's experts and the contract's come from, [B, G] bool each but ``leaked`` [B]."""

    used: torch.Tensor  # the groups of the router's experts
    expected: torch.Tensor  # the groups of the expected experts
    # an expert the oracle did not choose, from a dropped group (the oracle itself fills NaN slots from them)
    leaked: torch.Tensor


def _groups_used(rows: BadRows, extra: torch.Tensor) -> _GroupsUsed:
    size = rows.group_size
    used = torch.zeros_like(rows.kept).scatter_(1, rows.actual_ids // size, True)
    expected = torch.zeros_like(rows.kept).scatter_(1, rows.expected_ids // size, True)
    leaked = (extra & ~rows.kept.gather(1, rows.actual_ids // size)).any(1)
    return _GroupsUsed(used, expected, leaked)


def read_group_leak(rows: BadRows, assignment: Assignment, extra: torch.Tensor) -> None:
    """The second pass: what is left of a leak (an expert the contract does not choose, from a group it drops) after
    the special values and the group ties is ``group_mask``. ``extra`` [B, k]: the router's experts the contract
    does not choose."""
    if not bool(assignment.todo.any()):
        return
    assignment.assign(_groups_used(rows, extra).leaked, "group_mask", R_GROUP_MASK)


def read_other_groups(rows: BadRows, contract: Contract, assignment: Assignment, extra: torch.Tensor) -> torch.Tensor | None:
    """The first pass: experts chosen by the contract's own rule within other groups (the other mask value, the
    other group tie rule or group score, groups kept among NaN scores, more groups used than kept), compared as sets
    where the order is ``any``. Returns the rows whose router kept another group in place of one it took none of, its
    experts the top ones of the groups it used (``group_selection`` unless a tie within the contract's own groups
    explains them: the caller reads it last; None: no such row)."""
    todo = assignment.todo  # the rows to do as this pass starts: the readings below are tried on these
    if not bool(todo.any()):
        return None
    groups = _groups_used(rows, extra)
    ungrouped = contract.replace(n_group=1, topk_group=1)
    _read_other_mask_value(rows, contract, assignment, ungrouped)
    # the contract's group scores as it ranks them (under nan_rule "first" NaN ties at the top: group_ties)
    ranked_scores = ranked_group_scores(rows.group_scores, contract.nan_rule == "first")
    cutoff = ranked_scores.masked_fill(~rows.kept, math.inf).amin(1, keepdim=True)
    _read_other_group_rules(rows, contract, assignment, ungrouped, ranked_scores, cutoff)
    replaced = _replaced_near_the_cutoff(rows, contract, groups)
    tied_away = _tied_away_at_minus_inf(rows, contract, groups)
    if not bool((todo & (groups.leaked | replaced | tied_away)).any()):
        return None
    # Kept other groups, chose right within them? The contract's selection restricted to the used groups.
    n_rows, k = rows.actual_ids.shape
    n_group, size = rows.kept.shape[1], rows.group_size
    within = rows.ranking.view(n_rows, n_group, size).masked_fill(~groups.used.unsqueeze(2), -math.inf).view(n_rows, -1)
    alternative = select_under(within, k, ungrouped)
    consistent = same_ids(alternative, rows.actual_ids, contract)
    # ... or chose its numbers right, its -inf picks being ties among themselves (and the group ties' doing)
    same_numbers = (_numbers_among(rows, alternative) == _numbers_among(rows, rows.actual_ids)).all(1)
    assignment.assign(tied_away & same_numbers, "group_tie_order", R_GROUP_TIE)
    among_nan = _kept_among_nan_group_scores(rows, groups)
    if contract.nan_rule == "first":  # NaN group scores tie one another at the top: which of them are kept is a group tie
        assignment.assign(groups.leaked & same_numbers & among_nan, "group_tie_order", R_GROUP_TIE)
    else:
        assignment.assign(groups.leaked & same_numbers & among_nan, "nan_last", R_NAN_GROUPS)
    assignment.assign(groups.leaked & _more_groups_used_than_kept(rows, contract, groups), "group_mask", R_GROUP_MASK)
    # Do the groups it used tie the kept ones exactly (group scores equal at the cutoff, as ranked above)?
    tied = ((ranked_scores == cutoff) | ~(groups.used & ~rows.kept)).all(1)
    assignment.assign(groups.leaked & (consistent | same_numbers) & tied, "group_tie_order", R_GROUP_TIE)
    assignment.assign(groups.leaked & consistent, "group_selection", R_GROUP_SELECTION)
    return replaced & consistent


def _read_other_mask_value(rows: BadRows, contract: Contract, assignment: Assignment, ungrouped: Contract) -> None:
    """The right groups, masked with the other value (-inf where the contract says 0.0, or the reverse): the contract's
    answer under that mask is the router's and not the contract's own (``group_mask``, ``R_GROUP_MASK_VALUE``)."""
    n_rows, k = rows.actual_ids.shape
    other = 0.0 if math.isinf(contract.group_mask) else -math.inf
    masked = rows.ranking.view(n_rows, rows.kept.shape[1], rows.group_size).masked_fill(~rows.kept.unsqueeze(2), other).view(n_rows, -1)
    alternative = select_under(masked, k, ungrouped)
    hit = same_ids(alternative, rows.actual_ids, contract) & ~same_ids(alternative, rows.expected_ids, contract)
    assignment.assign(hit, "group_mask", R_GROUP_MASK_VALUE)


def _read_other_group_rules(rows: BadRows, contract: Contract, assignment: Assignment, ungrouped: Contract,
                            ranked_scores: torch.Tensor, cutoff: torch.Tensor) -> None:  # fmt: skip
    """The contract's pipeline with one group rule changed (the other group tie rule, the other group score): the
    candidate's experts may come from groups the oracle kept (masked values filling NaN slots), so every row is
    tried, not only those with an expert of a dropped group."""
    k = rows.actual_ids.shape[1]
    other_tie = "highest" if contract.group_tie_rule == "lowest" else "lowest"
    other_score = "max" if contract.group_score == "top2_sum" else "top2_sum"
    for score, tie, name, why in ((contract.group_score, other_tie, "group_tie_order", R_GROUP_TIE),
                                  (other_score, contract.group_tie_rule, "group_selection", R_GROUP_SELECTION),
                                  (other_score, other_tie, "group_selection", R_GROUP_SELECTION)):  # fmt: skip
        masked, alternative_kept = _masked_by(rows, contract, score, tie)
        alternative = select_under(masked, k, ungrouped)
        hit = same_ids(alternative, rows.actual_ids, contract) & ~same_ids(alternative, rows.expected_ids, contract)
        if name == "group_selection":
            hit &= ~_only_tied_groups_differ(rows, ranked_scores, cutoff, alternative_kept)
        assignment.assign(hit, name, why)


def _only_tied_groups_differ(rows: BadRows, ranked_scores: torch.Tensor, cutoff: torch.Tensor,
                             alternative_kept: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """bool [B]: the other group score keeps other groups only among those the contract's scores tie exactly at its
    cutoff: the groups differ by a group tie, which the tie readings judge (the experts within them too), so it is no
    ``group_selection``. An unrounded top-2 sum of bf16 values can order groups whose bf16 sums tie as torch.topk
    happened to: Megatron's group_limited_topk, ``batch_sizes:1828424403:33`` row 18 under mcore-sigmoid, found by a
    default-plan check of mcore-deepseek-v3 (commit 4684de9). No test replays it, and that replay no longer holds
    such a row on this plan."""
    return ((ranked_scores == cutoff) | ~(alternative_kept ^ rows.kept)).all(1)


def _replaced_near_the_cutoff(rows: BadRows, contract: Contract, groups: _GroupsUsed) -> torch.Tensor:
    """bool [B]: no expert of a dropped group, but none of a group the contract took experts from either: the router
    kept another group in its place, whose experts lost to those of the groups both kept (the mask 0.0, or tiny
    scores). Only where the groups it lost score within 2^-5 of the best group the contract drops (group sums in bf16
    flip there); a router that keeps one group too few is no group_selection. hf-mistral4 on a random_bf16 row, top-2
    sums 0.0515 and 0.0517, was blamed on selection before
    (``tests/compare/test_attribution.py::test_a_group_kept_in_place_of_a_near_tied_one_is_group_selection``)."""
    lost = groups.expected & ~groups.used
    lost_score = rows.group_scores.masked_fill(~lost, math.inf).amin(1)
    best_dropped = rows.group_scores.masked_fill(rows.kept, -math.inf).amax(1)
    close = torch.isfinite(lost_score) & torch.isfinite(best_dropped) & (lost_score - best_dropped <= 2.0**-5 * lost_score.abs())
    return ~groups.leaked & lost.any(1) & (groups.used.sum(1) < contract.topk_group) & close


def _tied_away_at_minus_inf(rows: BadRows, contract: Contract, groups: _GroupsUsed) -> torch.Tensor:
    """bool [B]: every group the router lost ties the best dropped one exactly (groups of one finite expert all score
    -inf: few_valid), so another of the tied groups was kept: group_tie_order, if its numbers are the top numbers of
    the groups it used (its -inf picks are ties among themselves). sglang-torch under deepseek-v3, few_valid rows
    (``tests/compare/test_attribution.py::test_a_group_of_minus_inf_score_kept_in_place_of_a_tied_one_is_group_tie_order``;
    its row is also read by ``ids._read_group_tie_with_none_of_its_experts``, added later: the test fails only
    without both)."""
    lost = groups.expected & ~groups.used
    lost_score = rows.group_scores.masked_fill(~lost, math.inf).amin(1)
    lost_best = rows.group_scores.masked_fill(~lost, -math.inf).amax(1)
    best_dropped = rows.group_scores.masked_fill(rows.kept, -math.inf).amax(1)
    few_groups = ~groups.leaked & lost.any(1) & (groups.used.sum(1) < contract.topk_group)
    return few_groups & (lost_best == best_dropped) & (lost_score == best_dropped)


def _kept_among_nan_group_scores(rows: BadRows, groups: _GroupsUsed) -> torch.Tensor:
    """bool [B]: the router kept other groups only among those whose group score is NaN (each group it took a number
    from that the contract drops, and each the contract keeps that it took none from, scores NaN: a NaN among the
    group's top experts). Where its numbers are the top numbers of its groups, where such groups rank (a router scoring
    a group by its numbers keeps one holding a number over one of NaN only) is the NaN rule's, fixed in the group
    scores, not in the mask. (Groups of its -inf and NaN picks are fills, as the contract's own NaN slots are.) SGLang's
    Triton moe_fused_gate, nan_dense rows (``tests/compare/test_attribution.py::test_groups_kept_among_nan_scores_are_the_nan_rules``)."""
    numbered = groups_of(rows, torch.isfinite(at(rows.ranking, rows.actual_ids)))
    swapped = numbered ^ rows.kept
    return (numbered & ~rows.kept).any(1) & (torch.isnan(rows.group_scores) | ~swapped).all(1)


def _more_groups_used_than_kept(rows: BadRows, contract: Contract, groups: _GroupsUsed) -> torch.Tensor:
    """bool [B]: more groups used than kept. A pick at or below a 0.0 mask uses no group (what the mask makes of any
    dropped expert, tying the kept groups' zeros: the tie and mask clauses judge it, the second pass's leak too)."""
    at_mask = at_the_mask(rows.actual_ids, rows.ranking, contract.group_mask, contract.topk_group, rows.kept.shape[1])
    n_used = groups_of(rows, ~at_mask).sum(1)
    return n_used > groups.expected.sum(1).clamp(min=contract.topk_group)


def _numbers_among(rows: BadRows, ids: torch.Tensor) -> torch.Tensor:
    """bool [B, E]: the experts of ``ids`` whose ranking value is a finite number."""
    return torch.zeros_like(rows.ranking, dtype=torch.bool).scatter_(1, ids, torch.isfinite(at(rows.ranking, ids)))


def _masked_by(rows: BadRows, contract: Contract, score: str, tie: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 [B, E], bool [B, G]): the ranking with the groups a group score rule ``score`` and group tie rule ``tie``
    drop masked, and the groups they keep."""
    n_rows, experts = rows.ranking.shape
    n_group = rows.kept.shape[1]
    per_group = rows.ranking.view(n_rows, n_group, experts // n_group)
    if score == contract.group_score:
        group_scores = rows.group_scores
    else:
        keys = oracle.rank_keys(per_group.contiguous())  # NaN lowest, ...
        if contract.nan_rule == "first":  # ... or first, as the contract ranks it: a NaN among a group's top makes it NaN
            keys = keys.long().masked_fill(torch.isnan(per_group), 1 << 40)
        top = per_group.gather(2, keys.topk(min(2, per_group.shape[2]), dim=2).indices)
        group_scores = top[..., 0] + top[..., -1] if score == "top2_sum" else top[..., 0]
    group_keys = oracle.rank_keys(group_scores.float().contiguous() + 0.0).long()
    if contract.nan_rule == "first":
        group_keys = group_keys.masked_fill(torch.isnan(group_scores), 1 << 40)
    kept = top_groups(group_keys, tie, contract.topk_group)
    return per_group.masked_fill(~kept.unsqueeze(2), contract.group_mask).view(n_rows, experts), kept


def top_groups(group_keys: torch.Tensor, tie: str, topk_group: int) -> torch.Tensor:
    """bool [B, G]: the ``topk_group`` groups of the largest group keys, ties by the group tie rule ``tie``."""
    n_group = group_keys.shape[1]
    priority = oracle.group_tie_priority(n_group, tie).to(group_keys.device)
    kept_groups = (group_keys * n_group + (n_group - 1 - priority)).topk(topk_group, dim=1).indices
    return torch.zeros(group_keys.shape, dtype=torch.bool, device=group_keys.device).scatter_(1, kept_groups, True)
