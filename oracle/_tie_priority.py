"""Tie priorities: which of several experts with equal rank keys wins.

A priority is a permutation ``p`` of ``0..E-1``: expert ``e`` has priority
``p[e]`` and a lower value wins a tie. Two rules exist.

``lowest``
    ``p[e] = e``: the serial scan's strict ``>`` keeps the first expert seen.

``aiter``
    aiter's wave64 traversal. Experts are read in vectors of four:
    vector ``g = e >> 2`` lives on lane ``g & 63`` (bank ``g >> 6``). The
    cross-lane reduction visits lanes in ``LANE_RANK`` order, and within a
    lane the lowest expert id wins. So experts are ordered by
    ``(LANE_RANK[lane(e)], e)``.

    When ``E`` is not a multiple of 4 the last vector is partial. We assume the
    missing elements are padding that never wins (aiter pads with ``-inf``),
    so the real experts keep the order the formula gives them; the formula
    is applied unchanged for every ``E >= 1``.

Group ties (grouped contracts: equal group scores at the ``topk_group``
cutoff) have their own rules, ``GROUP_TIE_RULES``: ``lowest`` (group ``g``
has priority ``g``) or ``highest`` (priority ``G - 1 - g``, as some
group-elimination steps keep the last group seen).
"""

from __future__ import annotations

import functools

import torch

__all__ = ["GROUP_TIE_RULES", "LANE_RANK", "TIE_RULES", "group_tie_priority", "tie_priority", "tie_order"]

# Traversal rank of each of the 64 lanes in aiter's argmax reduction (docs/contracts.md#the-tie-table):
# lane 63 is visited first, so its experts win ties.
LANE_RANK: tuple[int, ...] = (
    56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48,
    40, 41, 42, 43, 47, 46, 45, 44, 36, 37, 38, 39, 35, 34, 33, 32,
    24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16,
    8, 9, 10, 11, 15, 14, 13, 12, 4, 5, 6, 7, 3, 2, 1, 0,
)  # fmt: skip

TIE_RULES = ("aiter", "lowest")
GROUP_TIE_RULES = ("lowest", "highest")


@functools.lru_cache(maxsize=64)
def _order_list(experts: int, rule: str) -> tuple[int, ...]:
    if rule == "lowest":
        return tuple(range(experts))
    return tuple(sorted(range(experts), key=lambda e: (LANE_RANK[(e >> 2) & 63], e)))


def _check(experts: int, rule: str) -> None:
    if isinstance(experts, bool) or not isinstance(experts, int) or experts < 1:
        raise ValueError(f"experts={experts!r} must be a positive int (the number of experts E)")
    if rule not in TIE_RULES:
        raise ValueError(f"rule={rule!r} is not a tie rule; use one of {TIE_RULES}")


def tie_order(experts: int, rule: str) -> torch.Tensor:
    """Experts from strongest to weakest tie priority (int64 ``[E]``).

    ``tie_order(896, "aiter")[:5]`` is ``[252, 253, 254, 255, 508]``.
    """
    _check(experts, rule)
    return torch.tensor(_order_list(experts, rule), dtype=torch.int64)


def tie_priority(experts: int, rule: str) -> torch.Tensor:
    """Priority of each expert (int64 ``[E]``, a permutation; lower wins ties)."""
    order = tie_order(experts, rule)
    priority = torch.empty_like(order)
    priority[order] = torch.arange(experts, dtype=torch.int64)
    return priority


def group_tie_priority(n_group: int, rule: str) -> torch.Tensor:
    """Priority of each expert group (int64 ``[G]``; lower wins a tie between group scores)."""
    if isinstance(n_group, bool) or not isinstance(n_group, int) or n_group < 1:
        raise ValueError(f"n_group={n_group!r} must be a positive int (the number of expert groups)")
    if rule not in GROUP_TIE_RULES:
        raise ValueError(f"rule={rule!r} is not a group tie rule; use one of {GROUP_TIE_RULES}")
    ascending = torch.arange(n_group, dtype=torch.int64)
    return ascending if rule == "lowest" else ascending.flip(0)
