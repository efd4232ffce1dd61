"""The oracle's selection, rank keys and fp32 sigmoid as of commit 96b1b57, frozen, for the bit-identity tests only.

``oracle/_route.py`` and ``oracle/_scores.py`` were made faster on hard rows
(ties at the cutoff, NaN) and on fp32 logits; the oracle defines the
contracts, so the faster code must give the same bits as this one on every
input. ``tests/test_oracle_bit_identity.py`` routes through both. Copied
verbatim (only the module-level imports adjusted); never edit it to follow
the oracle.
"""

from __future__ import annotations

import torch

from oracle._keys import NAN_KEY

_NAN_FIRST_KEY = 2**31
_INELIGIBLE_KEY = NAN_KEY - 1


def rank_keys(values: torch.Tensor) -> torch.Tensor:
    # oracle/_keys.py's rank_keys as of 96b1b57 (the oracle's now shares its twiddle with the exact path)
    bits = (values + 0.0).view(torch.int32)
    keys = torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return keys.masked_fill_(torch.isnan(values), NAN_KEY)


def sigmoid_exact(x: torch.Tensor, formula: str) -> torch.Tensor:
    e = torch.exp(-x.double())
    e32 = e.float()
    if formula == "expf":
        return torch.reciprocal(e32.add_(1.0))
    sig = torch.reciprocal(e.add_(1.0)).float()
    return sig.masked_fill_(torch.isinf(e32), 0.0)


def _rule_keys(values: torch.Tensor, nan_rule: str) -> torch.Tensor:
    keys = rank_keys(values).long()
    if nan_rule == "first":
        keys.masked_fill_(torch.isnan(values), _NAN_FIRST_KEY)
    return keys


def _composite(keys: torch.Tensor, priority: torch.Tensor, n: int) -> torch.Tensor:
    return keys.long() * n + (n - 1 - priority)


def _fast_set(values: torch.Tensor, topk: int, c) -> tuple[torch.Tensor, torch.Tensor]:
    width = min(topk + 1, values.shape[1])
    top_values, candidates = torch.topk(values, width, dim=1)
    kth = top_values[:, topk - 1]
    lower = -float("inf") if c.floor is None else c.floor
    clean = (kth > lower) & ~torch.isnan(top_values).any(dim=1)
    if width > topk:
        clean &= kth != top_values[:, topk]
    return candidates[:, :topk], clean


def _in_order(chosen: torch.Tensor, chosen_values: torch.Tensor, priority: torch.Tensor, experts: int) -> torch.Tensor:
    comp = _composite(rank_keys(chosen_values), priority[chosen], experts)
    return chosen.gather(1, comp.argsort(dim=1, descending=True))


def _exact(values: torch.Tensor, topk: int, priority: torch.Tensor, c) -> torch.Tensor:
    keys = _rule_keys(values, c.nan_rule)
    if c.has_fallback:
        nan = torch.isnan(values)
        ineligible = nan if c.nan_rule == "never" else torch.zeros_like(nan)
        if c.floor is not None:
            ineligible |= ~(values > c.floor) & ~nan
        keys.masked_fill_(ineligible, _INELIGIBLE_KEY)
    top = torch.topk(_composite(keys, priority, values.shape[1]), topk, dim=1).indices
    if c.has_fallback:
        top.masked_fill_(keys.gather(1, top) == _INELIGIBLE_KEY, -1)
    return top


def select(values: torch.Tensor, topk: int, priority: torch.Tensor, c) -> torch.Tensor:
    chosen, clean = _fast_set(values, topk, c)
    ids = _in_order(chosen, values.gather(1, chosen), priority, values.shape[1])
    hard = (~clean).nonzero().squeeze(1)
    if hard.numel():
        ids.index_copy_(0, hard, _exact(values.index_select(0, hard), topk, priority, c))
    return ids
