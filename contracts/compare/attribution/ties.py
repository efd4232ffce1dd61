"""When two experts tie: exactly (every faithful implementation ranks them equal), nearly (within both scores'
error bounds), or only by a sign (-0.0 and +0.0); and the counterfactual of a router that flushes subnormals.

The ids aspect (``ids``) and the row-whole check (``core``) read these; a pair is given as two broadcastable id
tensors ``p`` and ``q`` into the row's experts.
"""

from __future__ import annotations

import math

import torch

import oracle
from oracle import Contract

from ..tolerance import near_allowance
from .rows import BadRows, at, select_under

__all__ = ["exact_pairs", "flush_to_zero_alternative", "minus_zeros", "near_pairs", "near_to", "rule_explains", "sign_explains"]


def _at_pairs(values: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``values`` [B, E] at ``ids`` of any shape [B, ...]."""
    return at(values, ids.flatten(1)).view(ids.shape)


def _same_inputs(rows: BadRows, p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(same logit, same bias), broadcast of p and q: equal as values (-0.0 == +0.0, NaN == NaN)."""
    logit_p, logit_q = _at_pairs(rows.logits, p), _at_pairs(rows.logits, q)
    same_logit = (logit_p == logit_q) | (torch.isnan(logit_p) & torch.isnan(logit_q))
    if rows.bias is None:
        return same_logit, torch.ones_like(same_logit)
    bias_p, bias_q = rows.bias[p], rows.bias[q]
    return same_logit, (bias_p == bias_q) | (torch.isnan(bias_p) & torch.isnan(bias_q))


def exact_pairs(rows: BadRows, p: torch.Tensor, q: torch.Tensor, contract: Contract) -> torch.Tensor:
    """bool, broadcast of p and q: experts p and q tie exactly in every faithful implementation (equal keys, and equal
    inputs, both saturated, both masked, an infinite value or both NaN)."""
    key_p, key_q = _at_pairs(rows.keys, p), _at_pairs(rows.keys, q)
    logit_p, logit_q = _at_pairs(rows.logits, p), _at_pairs(rows.logits, q)
    value_p, value_q = _at_pairs(rows.selection, p), _at_pairs(rows.selection, q)
    same_logit, same_bias = _same_inputs(rows, p, q)
    if contract.scoring == "sigmoid":
        saturated = ((logit_p >= 20) & (logit_q >= 20)) | ((logit_p <= -90) & (logit_q <= -90))
    elif contract.scoring == "softmax":
        top = torch.nan_to_num(rows.logits, nan=-math.inf).amax(1).view(-1, *([1] * (p.dim() - 1)))
        saturated = ((logit_p - top) <= -110) & ((logit_q - top) <= -110)  # exp underflows to exactly 0
    else:
        saturated = torch.zeros_like(same_logit)
    # Two NaN ranking values tie exactly whatever their biases (a contract that ranks NaN first, as torch.topk does,
    # keeps them NaN, and NaN has no error bound): NaN experts taken one place off the tie rule passed as a near tie
    # under mcore-sigmoid-ungrouped (tests/compare/test_never_raises.py's nan_dense example).
    both_nan = torch.isnan(value_p) & torch.isnan(value_q)
    exact = torch.isinf(value_p) | both_nan | (same_bias & (same_logit | saturated)) | (p == q)
    if rows.kept is not None:
        size = rows.logits.shape[1] // rows.kept.shape[1]
        kept_p = rows.kept.gather(1, (p // size).flatten(1)).view(p.shape)
        kept_q = rows.kept.gather(1, (q // size).flatten(1)).view(q.shape)
        exact |= ~kept_p & ~kept_q  # both masked: the mask value ties them
    return (key_p == key_q) & exact


def near_pairs(rows: BadRows, contract: Contract, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """bool, broadcast of p and q: the two experts' selection values lie within both scores' error bounds."""
    top = rows.logits_max.view(-1, *([1] * (p.dim() - 1)))
    value_p, value_q = _at_pairs(rows.selection, p), _at_pairs(rows.selection, q)
    allowance_p = near_allowance(_at_pairs(rows.scores, p), _at_pairs(rows.logits, p), contract, top)
    allowance_q = near_allowance(_at_pairs(rows.scores, q), _at_pairs(rows.logits, q), contract, top)
    finite = torch.isfinite(value_p) & torch.isfinite(value_q)
    return finite & ((value_p - value_q).abs() <= allowance_p + allowance_q)


def near_to(rows: BadRows, contract: Contract, p: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """bool [B, n]: each expert of ``p`` [B, n] is a near pair of the row's ``anchor`` expert [B, 1]."""
    top = rows.logits_max.unsqueeze(1)
    value_p, value_anchor = at(rows.selection, p), at(rows.selection, anchor)
    allowance_p = near_allowance(at(rows.scores, p), at(rows.logits, p), contract, top)
    allowance_anchor = near_allowance(at(rows.scores, anchor), at(rows.logits, anchor), contract, top)
    finite = torch.isfinite(value_p) & torch.isfinite(value_anchor)
    return finite & ((value_p - value_anchor).abs() <= allowance_p + allowance_anchor)


def _priorities(rows: BadRows, contract: Contract) -> list[torch.Tensor]:
    """Tie priorities a router may use (lower wins): the contract's, lowest index, highest index."""
    experts = rows.logits.shape[1]
    index = torch.arange(experts, device=rows.logits.device)
    return [oracle.tie_priority(experts, contract.tie_rule).to(rows.logits.device), index, experts - 1 - index]


def minus_zeros(rows: BadRows) -> torch.Tensor:
    """long [B, E]: 1 where the ranking value is -0.0 (the sign the signed_zero clause is about)."""
    return ((rows.selection == 0) & torch.signbit(rows.selection)).long()


def rule_explains(rank: torch.Tensor, chosen: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """bool [B]: by ``rank`` ([B, E] or [E], lower wins) every chosen member of ``group`` beats every unchosen one."""
    rank = rank.expand_as(group)
    worst_chosen = torch.where(chosen & group, rank, torch.full_like(rank, -1)).amax(1)
    best_unchosen = torch.where(~chosen & group, rank, torch.full_like(rank, 1 << 40)).amin(1)
    return (chosen & group).any(1) & (worst_chosen < best_unchosen)


def sign_explains(rows: BadRows, contract: Contract, chosen: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """bool [B]: ranking -0.0 values apart from +0.0 ones (either way, ties then by one of ``_priorities``)
    chose ``chosen`` out of the tie ``group`` ([B, E] masks), and no plain tie rule alone does."""
    experts = rows.logits.shape[1]
    negative = minus_zeros(rows)
    signed = torch.zeros(chosen.shape[0], dtype=torch.bool, device=chosen.device)
    plain = torch.zeros_like(signed)
    for priority in _priorities(rows, contract):
        plain |= rule_explains(priority, chosen, group)
        for worse in (negative, 1 - negative):  # -0.0 below +0.0, or above it
            signed |= rule_explains(worse * experts + priority, chosen, group)
    return signed & ~plain


def flush_to_zero_alternative(rows: BadRows, contract: Contract, topk: int) -> torch.Tensor | None:
    """Ids a router would give that flushes subnormal ranking values to zero (None if the rows have none)."""
    subnormal = (rows.selection != 0) & (rows.selection.abs() < 2.0**-126)
    if not bool(subnormal.any()):
        return None
    return select_under(rows.selection.masked_fill(subnormal, 0.0), topk, contract)
