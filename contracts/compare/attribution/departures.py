"""How far a row's choice departs from the contract's, relative: what a declared bounded clause must bound.

- ``selection_departure``: how far past the contract's cutoff the row's experts reach (a declared ``selection``);
- ``group_departure``: how far the groups the row's experts came from depart from a choice of groups by score (a
  declared ``group_selection`` or ``group_mask``).

(Not ``contracts.compare.departures``, which says in a trainer's words why a router departs from the contract.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import oracle
from oracle import Contract

from .rows import BadRows, at, groups_of, unmatched

__all__ = ["GroupFacts", "group_departure", "selection_departure"]

_TINY = 2.0**-126  # the smallest normal fp32: a flushed subnormal is no departure
# How far an expert of a group the router is read to keep may outrank its lowest choice: a bf16 sigmoid flips two
# experts 2^-10 apart without any group being another (the departure is the larger of that and the groups' gap).
_OUTRANK_STEPS = (0.0, 2.0**-12, 2.0**-10, 2.0**-8, 2.0**-7, 2.0**-6, 2.0**-5, 2.0**-4, 2.0**-3)


@dataclass(frozen=True)
class GroupFacts:
    """What ``group_departure``'s two readings and ``selection_departure``'s NaN-first one need of the groups, [B, G]
    each but ``per_expert``."""

    scores: torch.Tensor  # the contract's group scores, NaN as -inf
    scale: torch.Tensor  # sum of |score| + |ranking value - score| over each group's two top experts
    # False for a group holding NaN: neither the worst kept nor the best left out (a router ranking NaN first scores
    # it NaN), where NaN ranks being the NaN clauses' to judge
    numbered: torch.Tensor
    # the order kept places are filled in: groups holding NaN first (they count on neither side), then by score (an
    # open group of -inf score still before any group that is not open)
    fill_key: torch.Tensor
    per_expert: torch.Tensor  # [B, E]: each expert's scale, |score| + |ranking value - score|

    @staticmethod
    def of(rows: BadRows) -> "GroupFacts | None":
        """The facts of a grouped contract's rows; None elsewhere."""
        if rows.kept is None or rows.group_scores is None:
            return None
        per_expert = torch.nan_to_num(rows.scores.abs() + (rows.ranking - rows.scores).abs(), nan=math.inf, posinf=math.inf)
        n_rows, n_group = rows.kept.shape
        size = rows.ranking.shape[1] // n_group
        scores = torch.nan_to_num(rows.group_scores.float(), nan=-math.inf)
        top2 = oracle.rank_keys(rows.ranking.view(n_rows, n_group, size).contiguous()).topk(min(2, size), dim=2).indices
        scale = per_expert.view(n_rows, n_group, size).gather(2, top2).sum(2)
        numbered = ~torch.isnan(rows.group_scores) & ~torch.isnan(rows.ranking).view(n_rows, n_group, size).any(2)
        fill_key = torch.where(numbered, scores.clamp(min=torch.finfo(torch.float32).min), torch.full_like(scores, math.inf))
        return GroupFacts(scores, scale, numbered, fill_key, per_expert)


# ---------------------------------------------------------------- selection_departure


def selection_departure(rows: BadRows, groups: GroupFacts | None) -> torch.Tensor:
    """float [B]: how far past the contract's cutoff (the smallest finite selection value the oracle chose) each row's
    choice reaches. For every expert the candidate chose that the oracle did not, its distance below the cutoff; for
    every one the oracle chose that the candidate did not, its distance above it; each less 2^-126 and divided by the
    expert's scale, ``|score| + |selection value - score|`` (a sigmoid and its bias, each rounded where a router ranks
    in a narrower dtype), at least the cutoff expert's. A router ranking bf16 values departs by about 2^-8; one that
    drops its top expert by far more. Experts of non-finite value (NaN, masked groups) are the special-value and
    group clauses' to judge, and count 0 here, except an expert ranked -inf taken in place of a number the contract
    chose: that departs infinitely. In grouped contracts, where the router kept other groups as one ranking NaN first
    in the group scores would, the least of that and the same measure against the top numbers of the groups it kept."""
    k = rows.expected_ids.shape[1]
    expected_values = at(rows.selection, rows.expected_ids)
    counted = (torch.arange(k, device=rows.expected_ids.device) < rows.valid.unsqueeze(1)) & torch.isfinite(expected_values)
    departure = _departure_from(rows, rows.selection, rows.expected_ids, counted)
    if groups is not None:
        departure = _against_groups_kept_by_nan_first(rows, groups, departure)
    minus_inf = _minus_inf_for_a_number(rows, expected_values)
    departure = torch.where(minus_inf, torch.full_like(departure, math.inf), departure)
    return torch.where(counted.any(1), departure, torch.zeros_like(departure))


def _against_groups_kept_by_nan_first(rows: BadRows, groups: GroupFacts, departure: torch.Tensor) -> torch.Tensor:
    """``departure``, or where the router used other groups as one ranking NaN first in the group scores would (groups
    holding NaN in place of kept ones: a tie of NaN scores, or NaN above numbers, the NaN and group tie rules' to
    judge), the least of it and its numbers measured against the top numbers of the groups it used, as many as it
    took. lmdeploy-torch under deepseek-v3, a nan_sparse row (``tests/compare/test_attribution.py::
    test_numbers_of_groups_kept_by_nan_first_are_measured_against_those_groups``)."""
    kept = _nan_first_kept(rows, groups)
    own, ranked_own = _own_groups_top(rows, kept)
    theirs = _departure_from(rows, rows.ranking, own, ranked_own, only_counted=True)
    swapped = _groups_swapped_among_nan(rows, kept, ~groups.numbered)
    return torch.where(swapped, torch.minimum(departure, theirs), departure)


def _minus_inf_for_a_number(rows: BadRows, expected_values: torch.Tensor) -> torch.Tensor:
    """bool [B]: an expert ranked -inf taken while a number the contract chose is left out: no rounding, whatever the
    bound (ranked -inf before any group mask, and the number in a group the router took another number from: an
    expert of a dropped group, a number of a group not kept, or a dropped group's experts all masked to 0.0 and taken
    as ties, is the group clauses' to judge)."""
    extra, missing = unmatched(rows.actual_ids, rows.expected_ids), unmatched(rows.expected_ids, rows.actual_ids)
    ranked = at(rows.ranking, rows.actual_ids)
    left_out = missing & torch.isfinite(expected_values)
    if rows.kept is not None:
        left_out &= groups_of(rows, torch.isfinite(ranked)).gather(1, rows.expected_ids // rows.group_size)
    return (extra & (ranked == -math.inf)).any(1) & left_out.any(1)


def _departure_from(rows: BadRows, values: torch.Tensor, expected: torch.Tensor, counted: torch.Tensor, *,
                    only_counted: bool = False) -> torch.Tensor:  # fmt: skip
    """float [B]: ``selection_departure``'s measure of the router's choice against the experts ``expected`` [B, k]
    under ``values`` [B, E], the cutoff the least of the slots where ``counted``; ``only_counted``: the other slots of
    ``expected`` are no choice at all (a router's expert matching one is measured against the cutoff too)."""
    actual = rows.actual_ids
    scale = torch.nan_to_num(rows.scores.abs() + (values - rows.scores).abs(), nan=math.inf, posinf=math.inf)
    value_e, value_a, scale_e, scale_a = at(values, expected), at(values, actual), at(scale, expected), at(scale, actual)
    inf = torch.full_like(value_e, math.inf)
    cut_slot = torch.where(counted, value_e, inf).argmin(1, keepdim=True)
    cut, cut_scale = value_e.gather(1, cut_slot), scale_e.gather(1, cut_slot)
    matched = torch.where(counted, expected, torch.full_like(expected, -1)) if only_counted else expected
    extra, missing = unmatched(actual, matched), unmatched(matched, actual) & (counted if only_counted else True)
    below = ((cut - value_a) - _TINY).clamp(min=0) / torch.maximum(scale_a, cut_scale).clamp(min=_TINY)
    above = ((value_e - cut) - _TINY).clamp(min=0) / torch.maximum(scale_e, cut_scale).clamp(min=_TINY)
    below = torch.where(extra & torch.isfinite(value_a), torch.nan_to_num(below, nan=math.inf), torch.zeros_like(below))
    above = torch.where(missing & torch.isfinite(value_e), torch.nan_to_num(above, nan=math.inf), torch.zeros_like(above))
    return torch.maximum(below.amax(1), above.amax(1))


def _fill(open_: torch.Tensor, key: torch.Tensor, room: torch.Tensor) -> torch.Tensor:
    """bool [..., G]: the ``open_`` groups that take the ``room`` [..., 1] places left, best ``key`` first (ties by
    group number)."""
    order = torch.where(open_, key, torch.full_like(key, -math.inf)).argsort(dim=-1, descending=True, stable=True)
    place = torch.empty_like(order).scatter_(-1, order, torch.arange(key.shape[-1], device=order.device).expand_as(order))
    return open_ & (place < room)


def _nan_first_kept(rows: BadRows, groups: GroupFacts) -> torch.Tensor:
    """bool [B, G]: the groups a router ranking NaN first in the group scores is read to keep: those it took its
    experts from, filled up to the contract's number in ``groups.fill_key``'s order (groups holding NaN first)."""
    used = groups_of(rows, torch.ones_like(rows.actual_ids, dtype=torch.bool))
    room = (rows.kept.sum(1, keepdim=True) - used.sum(1, keepdim=True)).clamp(min=0)
    return used | _fill(~used, groups.fill_key, room)


def _own_groups_top(rows: BadRows, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, k] ids, [B, k] bool): the top numbers (ranking before any group mask) of the groups ``kept`` [B, G], as
    many as the router took numbers; the bool marks those slots."""
    inside = kept.repeat_interleave(rows.group_size, dim=1) & torch.isfinite(rows.ranking)
    k = rows.actual_ids.shape[1]
    top = torch.where(inside, rows.ranking, torch.full_like(rows.ranking, -math.inf)).topk(k, dim=1).indices
    taken = torch.isfinite(at(rows.ranking, rows.actual_ids)).sum(1, keepdim=True)
    return top, torch.arange(k, device=rows.actual_ids.device) < taken


def _groups_swapped_among_nan(rows: BadRows, kept: torch.Tensor, holds_nan: torch.Tensor) -> torch.Tensor:
    """bool [B]: the groups ``kept`` differ from the contract's as a router ranking NaN first in the group scores
    would keep them: each one in place of a contract's holds NaN, and each of the contract's left out either holds NaN
    or scores no higher than every kept one without NaN (a group holding NaN took its place)."""
    added, left = kept & ~rows.kept, rows.kept & ~kept
    scores = rows.group_scores.float()
    best_left = torch.where(left & ~holds_nan, scores, torch.full_like(scores, -math.inf)).amax(1)
    worst_kept = torch.where(kept & ~holds_nan, scores, torch.full_like(scores, math.inf)).amin(1)
    return (added | left).any(1) & (~added | holds_nan).all(1) & ~(best_left > worst_kept)


# ---------------------------------------------------------------- group_departure


def group_departure(rows: BadRows, contract: Contract, groups: GroupFacts | None) -> torch.Tensor:
    """float [B]: how far the groups a row's experts came from depart from keeping groups by score (grouped
    contracts; 0 elsewhere). The router's choice is read as ``topk_group`` kept groups: those it took a finite-ranked
    expert from, then the best-scoring others that hold no expert outranking its lowest choice by more than a step
    (had it kept such a group, that expert would be in its answer). The reading's departure is the larger of the
    best group left out less the worst group kept (less 2^-126, flushed subnormals, over the larger of the two
    groups' scales, each the sum of ``|score| + |ranking value - score|`` over its two top experts) and how far an
    expert left out of a kept group outranks the lowest choice (relative to the two experts' scales); the row's is
    the least over the steps, and over a second reading for the other mask value, 0.0 (``_by_the_zero_mask``). The
    contract's own groups depart by 0 and a bf16 flip of two near group sums by about 2^-8; the lowest groups, or no
    groups at all, by far more. A group of -inf score kept over one with a number, and more groups used than the
    contract keeps, depart infinitely. Groups holding NaN count on neither side; -inf and NaN experts (slots of rows
    with too few numbers) and experts of dropped groups the contract takes too use no group: the NaN, tie and mask
    clauses judge those."""
    if groups is None:
        return torch.zeros(rows.actual_ids.shape[0], device=rows.actual_ids.device)
    chosen = at(rows.ranking, rows.actual_ids)
    # an expert of a dropped group that the contract takes too (a NaN slot's fill, a 0.0 mask's) uses no group
    own_fill = ~unmatched(rows.actual_ids, rows.expected_ids) & ~rows.kept.gather(1, rows.actual_ids // rows.group_size)
    finite = torch.isfinite(chosen) & ~own_fill
    slot = torch.where(finite, chosen, torch.full_like(chosen, math.inf)).argmin(1, keepdim=True)
    lowest_scale = at(groups.per_expert, rows.actual_ids).gather(1, slot)
    by_minus_inf = _reading(rows, contract, groups, finite, chosen.gather(1, slot), lowest_scale)
    return torch.minimum(by_minus_inf, _by_the_zero_mask(rows, contract, groups, chosen, finite))


def _by_the_zero_mask(rows: BadRows, contract: Contract, groups: GroupFacts, chosen: torch.Tensor,
                      finite: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``group_departure``'s 0.0 reading: a pick ranked at 0 or below, or one of a group beyond the ``topk_group``
    best-scoring groups the positive picks came from, may be a dropped group's 0.0 (a tie of the mask with kept
    zeros), and every kept one above 0 outranks them."""
    positive = finite & (chosen > 0)
    holding = groups_of(rows, positive)
    by_score = torch.where(holding, groups.scores, torch.full_like(groups.scores, -math.inf)).argsort(dim=1, descending=True, stable=True)
    top = torch.zeros_like(holding).scatter_(1, by_score[:, : contract.topk_group], True) & holding
    counted = positive & top.gather(1, rows.actual_ids // rows.group_size)
    zeros = finite & ~counted
    lowest = torch.where(zeros.any(1, keepdim=True), torch.zeros_like(chosen[:, :1]),
                         torch.where(counted, chosen, torch.full_like(chosen, math.inf)).amin(1, keepdim=True))  # fmt: skip
    return _reading(rows, contract, groups, counted, lowest, torch.zeros_like(lowest))


def _reading(rows: BadRows, contract: Contract, groups: GroupFacts, counted: torch.Tensor, lowest: torch.Tensor,
             lowest_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``group_departure`` of one reading: ``counted`` [B, k] the chosen experts whose groups the router kept,
    ``lowest`` [B, 1] the value no expert left out of a kept group may outrank (an unused group that does by more
    than a step is read as dropped; what a kept group's does adds to the departure)."""
    n_rows, n_group, size = rows.actual_ids.shape[0], rows.kept.shape[1], rows.group_size
    used = groups_of(rows, counted)
    ahead = ((rows.ranking - lowest) - _TINY).clamp(min=0) / torch.maximum(groups.per_expert, lowest_scale).clamp(min=_TINY)
    unchosen = torch.ones_like(rows.ranking, dtype=torch.bool).scatter_(1, rows.actual_ids, False)
    ahead = torch.where((rows.ranking > lowest) & unchosen, torch.nan_to_num(ahead, nan=math.inf), torch.zeros_like(ahead))
    outranks = ahead.view(n_rows, n_group, size).amax(2)  # [B, G]: how far a group's best expert left out outranks
    scores, group_scale, numbered = groups.scores, groups.scale, groups.numbered
    fill_places = (contract.topk_group - used.sum(1, keepdim=True)).clamp(min=0)
    # every outrank step at once, a leading dimension [S, B, G] (a loop over the steps was most of a blame's time)
    steps = torch.tensor(_OUTRANK_STEPS, device=rows.actual_ids.device).view(-1, 1, 1)
    kept = used | _fill(~used & (outranks <= steps), groups.fill_key, fill_places)
    inside = torch.where(kept & numbered, scores, math.inf)
    outside = torch.where(kept | ~numbered, -math.inf, scores)
    worst_in, worst_at = inside.min(-1)
    best_out, best_at = outside.max(-1)
    group_scale = group_scale.expand(len(_OUTRANK_STEPS), -1, -1)
    scale = torch.maximum(group_scale.gather(-1, worst_at.unsqueeze(-1)), group_scale.gather(-1, best_at.unsqueeze(-1))).squeeze(-1)
    gap = ((best_out - worst_in) - _TINY).clamp(min=0) / scale.clamp(min=_TINY)
    gap = torch.where(best_out == -math.inf, torch.zeros_like(gap), torch.nan_to_num(gap, nan=math.inf))
    gap = torch.where((worst_in == -math.inf) & (best_out > -math.inf), torch.full_like(gap, math.inf), gap)
    best = torch.maximum(gap, torch.where(kept, outranks, 0.0).amax(-1)).amin(0)
    return torch.where(used.sum(1) > contract.topk_group, torch.full_like(best, math.inf), best)
