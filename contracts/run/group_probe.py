"""Recover a grouped contract's group tie order from a candidate's answers (the probe's questions at group level).

Every group holds the same values but its second best: its best expert is at LEAD in every group (so
each kept group shows in the answer through it, when k >= topk_group), and its second best at one of
three levels that order the group scores (top-2 sums): ABOVE_2ND > TIE_2ND > BELOW_2ND. The experts
are positive logits, so neither mask value (-inf, 0.0) lets a dropped group in. The recovery then
mirrors the experts': set questions find the kept set among the tied groups, ordering questions
(fillers above) order each set.
"""

from __future__ import annotations

import torch

from .tie_probe import Asker, ProbeError

__all__ = ["probe_groups"]

LEAD, ABOVE_2ND, TIE_2ND, BELOW_2ND, REST = 3.0, 2.5, 2.0, 1.0, 0.25


def _group_row(levels: list[float], experts: int, n_group: int) -> torch.Tensor:
    size = experts // n_group
    row = torch.full((n_group, size), REST)
    row[:, 0] = LEAD
    row[:, 1] = torch.tensor(levels)
    return row.reshape(experts)


def _kept_seen(answer: list[int], size: int) -> set[int]:
    return {e // size for e in answer}


def probe_groups(asker: Asker, *, experts: int, n_group: int, topk_group: int, topk: int) -> tuple[list[int], int]:
    """``(group order strongest first, calls)``; ProbeError when the answers are not a group tie order."""
    if topk < topk_group:
        raise ProbeError(f"top-{topk} shows fewer groups than the {topk_group} kept: the group order cannot be read off the answers")
    size = experts // n_group
    start = asker.calls
    order: list[int] = []
    remaining = list(range(n_group))
    while remaining:
        if len(remaining) <= topk_group:
            found = list(remaining)
        else:
            levels = [TIE_2ND if g in remaining else BELOW_2ND for g in range(n_group)]
            found = sorted(_kept_seen(asker.ask(_group_row(levels, experts, n_group).unsqueeze(0))[0], size))
            if len(found) != topk_group or not set(found) <= set(remaining):
                raise ProbeError(f"a group set question kept groups {found}; expected {topk_group} of the tied groups {remaining}")
        wins = dict.fromkeys(found, 0)
        fillers = [g for g in range(n_group) if g not in found]
        for j in range(1, len(found)):
            above = fillers[: topk_group - j]
            levels = [ABOVE_2ND if g in above else TIE_2ND if g in found else BELOW_2ND for g in range(n_group)]
            kept = _kept_seen(asker.ask(_group_row(levels, experts, n_group).unsqueeze(0))[0], size) & set(found)
            for g in kept:
                wins[g] += 1
        ordered = sorted(found, key=lambda g: (-wins[g], g))
        order.extend(ordered)
        remaining = [g for g in remaining if g not in found]
    return order, asker.calls - start
