"""Group-score ties resolved another way: the groups a router could have kept, for the ids aspect to judge within.

Where group scores tie at the contract's cutoff (the lowest score of a kept group), the group tie rule picks which of
the tied groups are kept; a router that picks others broke that rule (``group_tie_order``), not the mask. Its experts
are then judged against the contract's choice *within the groups it kept*: a tie among experts broken there is
``tie_order``, whatever the groups. Before this reading, a row of DeepSeek-V3's ``all_equal`` family (every group and
every expert tied) whose router broke both ties was blamed on ``group_mask``, and the tie clauses passed.

The router's groups are a **resolution of the group tie** when every group it took an expert from scores at least
the cutoff (groups above it are the contract's own, and kept by any resolution), and those above the cutoff together
with the ones it used number no more than ``topk_group``. The remaining kept places go to the other tied groups
whose best expert ranks lowest: if any resolution makes the router's experts the top ones up to ties, that one
does (a group kept only to fill a place can only add experts that outrank the router's). Rows with a NaN group
score are left to the NaN clauses.
"""

from __future__ import annotations

import math

import torch

__all__ = ["tie_resolution", "masked_outside", "at_the_mask", "ranked_group_scores"]


def ranked_group_scores(group_scores: torch.Tensor, nan_first: bool) -> torch.Tensor:
    """fp32 ``group_scores`` as a contract ranks them for ties and cutoffs: under ``nan_rule = "first"`` (``nan_first``)
    NaN stands as +inf, above every number and equal to one another (a group score of +inf ties it); otherwise as
    given, where NaN equals nothing."""
    scores = group_scores.float()
    return scores.nan_to_num(nan=math.inf, posinf=math.inf, neginf=-math.inf) if nan_first else scores


def at_the_mask(ids: torch.Tensor, ranking: torch.Tensor, mask_value: float, topk_group: int | None = None,
                n_group: int | None = None) -> torch.Tensor:  # fmt: skip
    """bool [B, k]: the router's experts ``ids`` [B, k] ranked (before any group mask, ``ranking`` [B, E]) at or below a
    finite group mask ``mask_value`` (0.0): what the mask makes of any dropped expert, so such a pick keeps no group. A
    router that masked right and took it in a tie with the kept groups' own zeros gives the same answer as one that
    never masked (below the mask it ranks no higher unmasked); which zero it took is the expert tie rule's, judged
    within the groups read as kept.

    Under a -inf mask (given ``topk_group`` and ``n_group``): an expert ranked -inf itself, only in the rows whose other
    picks already use ``topk_group`` groups. Those fix every group kept; any other group is dropped, masked to -inf,
    and its -inf experts tie the kept groups' own -inf ones (Megatron's group_limited_topk fills its last slots of a
    few_valid row from any of them: few_valid:1482888430:64 under mcore-sigmoid). Where the other picks use fewer
    groups a -inf pick still keeps its group (a 0.0-mask router's dropped expert taken over the kept groups' -inf
    ones: few_valid:877335192:1, tests/compare/test_group_ties.py). False everywhere otherwise."""
    value = ranking.gather(1, ids)
    if math.isfinite(mask_value):
        return value <= mask_value
    if topk_group is None or n_group is None:
        return torch.zeros(ids.shape, dtype=torch.bool, device=ids.device)
    at = value == -math.inf
    size = ranking.shape[1] // n_group
    others = _groups_used(ids, ~at, n_group, size).sum(1, keepdim=True)
    return at & (others >= topk_group)


def _groups_used(ids: torch.Tensor, picks: torch.Tensor, n_group: int, size: int) -> torch.Tensor:
    """bool [B, G]: the groups of the router's experts ``ids`` [B, k] where ``picks`` [B, k]."""
    used = torch.zeros((ids.shape[0], n_group), device=ids.device).scatter_reduce_(1, ids // size, picks.float(), "amax")
    return used > 0


def _fill_lowest_first(open_: torch.Tensor, best: torch.Tensor, room: torch.Tensor) -> torch.Tensor:
    """bool [B, G]: ``room`` [B, 1] of the ``open_`` groups, those whose best expert ranks lowest first (ties by
    group number)."""
    key = torch.where(open_, best, torch.full_like(best, math.inf))
    order = key.argsort(dim=1, stable=True)
    place = torch.empty_like(order).scatter_(1, order, torch.arange(key.shape[1], device=order.device).expand_as(order))
    return open_ & (place < room)


def tie_resolution(ids: torch.Tensor, extra: torch.Tensor, ranking: torch.Tensor, kept: torch.Tensor, group_scores: torch.Tensor,
                   topk_group: int, mask_value: float, nan_first: bool = False,
                   unused: bool = False) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(resolves [B], groups [B, G])``: whether the groups of the router's experts ``ids`` [B, k] are another
    resolution of a group-score tie than the contract's ``kept`` [B, G], and the groups that resolution keeps.

    ``extra`` [B, k]: the router's experts the contract does not choose (one of a dropped group that the contract
    takes too, a NaN slot's fill or a 0.0 mask's tie, uses no group); ``ranking`` [B, E]: the values experts rank by
    before any group mask; ``group_scores`` [B, G]: the contract's; ``mask_value``: the contract's group mask (-inf,
    or 0.0: then a pick ranked at or below it keeps no group, for it may be what the mask makes of any dropped
    expert, tying the kept groups' own zeros; the ids aspect judges it within the groups read as kept).
    ``nan_first``: the contract ranks NaN above every number (``nan_rule = "first"``, torch.topk's order): NaN group
    scores then tie one another at the top, and which of them a router keeps is a group tie like any other
    (Megatron's group_limited_topk in a nan_sparse row with more NaN groups than it keeps). Under the other rules a
    row with a NaN group score is left to the NaN clauses.

    ``unused``: the rows with no expert of a dropped group, where a group the contract keeps at the cutoff, none of
    whose experts the router took, is read as dropped for another tied group (one whose best expert ranks lower): the
    router kept that group and took none of its experts (Megatron's group_limited_topk with torch.topk's own order
    among bf16 group sums that tie: bf16_near_ties, batch_sizes). Without it a resolution needs an expert of a dropped
    group. Either way the groups read differ from the contract's only among groups tied exactly at its cutoff."""
    n_group = kept.shape[1]
    size = ranking.shape[1] // n_group
    scores = ranked_group_scores(group_scores, nan_first)
    cutoff = torch.where(kept, scores, torch.full_like(scores, math.inf)).amin(1, keepdim=True)
    above, tied = scores > cutoff, scores == cutoff
    in_kept = kept.gather(1, ids // size)
    picks = (in_kept | extra) & ~at_the_mask(ids, ranking, mask_value, topk_group, n_group)
    used = _groups_used(ids, picks, n_group, size)
    settled = above | used
    leak = (extra & ~in_kept).any(1)  # an expert of a dropped group the contract does not take: the groups differ
    best = torch.nan_to_num(ranking.float(), nan=-math.inf).view(ranking.shape[0], n_group, size).amax(2)
    room = (topk_group - settled.sum(1, keepdim=True)).clamp(min=0)
    groups = settled | _fill_lowest_first(tied & ~settled, best, room)
    # (unused: no leak, and the groups read keep another tied group in place of a tied one the contract keeps)
    differ = (~leak & (groups != kept).any(1)) if unused else leak
    resolves = (
        ~torch.isnan(scores).any(1)
        & differ
        & (~used | above | tied).all(1)  # every group used scores at least the cutoff
        & (settled.sum(1) <= topk_group)
    )
    return resolves, groups


def masked_outside(ranking: torch.Tensor, groups: torch.Tensor, mask_value: float) -> torch.Tensor:
    """fp32 [B, E]: ``ranking`` with the experts outside ``groups`` [B, G] set to the contract's mask value."""
    rows, experts = ranking.shape
    n_group = groups.shape[1]
    return ranking.view(rows, n_group, experts // n_group).masked_fill(~groups.unsqueeze(2), mask_value).view(rows, experts)
