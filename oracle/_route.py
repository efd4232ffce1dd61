"""The routing function of both contracts, vectorized over rows.

Plain statement (per row, per contract; see ``oracle.CONTRACTS``)::

    sig     = sigmoid(x)                       # fp32
    ranking = sig + bias                       # fp32; ranks only
    ids     = the topk experts by (rank_key(ranking) desc, tie priority asc)
    w       = sig[ids], renormalized and scaled by the contract's formula

How it is fast without being clever in the wrong place: one ``torch.topk``
over ``topk + 1`` values per row finds the selected *set* whenever the k-th
value is a number strictly above the (k+1)-th and no NaN is in sight (almost
every row of real logits). Only the k selected entries are then put in
contract order with exact keys. Rows where the cutoff is tied, or NaN, -inf
or the serial sentinel reach it, take the exact path: a composite int64 key
``rank_key * E + (E - 1 - priority)`` that is distinct per expert, so
``torch.topk`` over it has a single right answer whatever torch's own tie
behaviour is.
"""

from __future__ import annotations

import functools

import torch

from ._contracts import Contract, get_contract
from ._keys import NAN_KEY, rank_keys
from ._tie_priority import tie_priority
from ._validate import check_route_args

__all__ = ["SERIAL_SENTINEL", "ranking_values", "route", "route_with_values", "sigmoid"]

SERIAL_SENTINEL = -1e30
_CHUNK_ROWS_CPU = 1024
_CHUNK_ROWS_GPU = 1 << 16


@functools.lru_cache(maxsize=32)
def _priority_on(experts: int, rule: str, device: torch.device) -> torch.Tensor:
    return tie_priority(experts, rule).to(device)


def _sigmoid_exact(x: torch.Tensor, contract: str) -> torch.Tensor:
    """The contract's fp32 sigmoid, computed through float64 so it is the same
    bits on every device and for every memory layout.

    (torch's own fp32 sigmoid is not: on a CPU the vectorized body and the
    scalar tail of one tensor round differently, so a logit's sigmoid would
    depend on where it sits in the batch.)

    aiter:  round_fp32(1 / (1 + exp(-x))), and 0 where exp(-x) overflows fp32
            -- the correctly rounded sigmoid, as an fp32 formula sees it
    serial: e = round_fp32(exp(-x)); 1.0f / (1.0f + e)  -- expf, then fp32 add and divide

    Below x = -88.72, exp(-x) exceeds the largest fp32 number: every fp32
    implementation of the formula (aiter's exp2 and rcp, torch's sigmoid, a
    CUDA kernel) gives exactly 0 there, although the true sigmoid is a tiny
    subnormal down to x = -103.9. The contract is the fp32 formula, so the
    oracle gives 0 too; otherwise those experts would rank above a tie that
    every real router sees.
    """
    e = torch.exp(-x.double())
    e32 = e.float()
    if contract == "serial":
        return torch.reciprocal(e32.add_(1.0))
    sig = torch.reciprocal(e.add_(1.0)).float()
    return sig.masked_fill_(torch.isinf(e32), 0.0)


@functools.lru_cache(maxsize=8)
def _sigmoid_table(dtype: torch.dtype, contract: str, device: torch.device) -> torch.Tensor:
    # A 16-bit float has 65,536 values: tabulate the exact sigmoid once.
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    return _sigmoid_exact(every.float(), contract).to(device)


def sigmoid(scores: torch.Tensor, contract: str | Contract = "aiter") -> torch.Tensor:
    """fp32 sigmoid of ``scores`` under ``contract`` (see ``_sigmoid_exact``)."""
    c = get_contract(contract)
    if scores.dtype in (torch.bfloat16, torch.float16):
        table = _sigmoid_table(scores.dtype, c.name, scores.device)
        index = scores.view(torch.int16).long().add_(2**15)
        # gather over an expanded view is the fastest table lookup torch has on a CPU
        return table.expand(scores.shape[0], table.shape[0]).gather(1, index)
    return _sigmoid_exact(scores.float(), c.name)


def ranking_values(scores: torch.Tensor, bias: torch.Tensor, contract: str | Contract = "aiter"):
    """``(sig, ranking)``, both fp32 ``[M, E]``, as the contract computes them."""
    sig = sigmoid(scores, contract)
    return sig, sig + bias.float()


def _composite(keys: torch.Tensor, priority: torch.Tensor, experts: int) -> torch.Tensor:
    # Distinct per expert: equal keys are separated by the priority, which is < experts.
    return keys.long() * experts + (experts - 1 - priority)


def _select(ranking: torch.Tensor, topk: int, priority: torch.Tensor, floor: float) -> torch.Tensor:
    """int64 ids ``[M, topk]`` in contract order; slots no valid value can fill hold ``-1``.

    ``floor=None`` (aiter): every expert ranks, NaN below -inf, so no slot
    stays empty. ``floor=-1e30`` (serial): only values strictly above the
    sentinel can be taken; NaN never is.
    """
    rows, experts = ranking.shape
    width = min(topk + 1, experts)
    values, candidates = torch.topk(ranking, width, dim=1)
    kth = values[:, topk - 1]
    lower = -float("inf") if floor is None else floor
    clean = (kth > lower) & ~torch.isnan(values).any(dim=1)
    if width > topk:
        clean &= kth != values[:, topk]
    chosen = candidates[:, :topk]

    # Put each clean row's set in contract order.
    comp = _composite(rank_keys(ranking.gather(1, chosen)), priority[chosen], experts)
    ids = chosen.gather(1, comp.argsort(dim=1, descending=True))

    hard = (~clean).nonzero().squeeze(1)
    if hard.numel():
        sub = ranking.index_select(0, hard)
        keys = rank_keys(sub)
        if floor is not None:
            keys.masked_fill_(~(sub > floor), NAN_KEY)
        comp_sub = _composite(keys, priority, experts)
        top = torch.topk(comp_sub, topk, dim=1).indices
        if floor is not None:
            top.masked_fill_(keys.gather(1, top) == NAN_KEY, -1)
        ids.index_copy_(0, hard, top)
    return ids


def _sequential_sum(w: torch.Tensor) -> torch.Tensor:
    # fp32, in output order, one column at a time: the order a kernel's loop adds in.
    total = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device)
    for j in range(w.shape[1]):
        total = total + w[:, j]
    return total


def route(
    scores: torch.Tensor,
    bias: torch.Tensor,
    topk: int,
    *,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    contract: str | Contract = "aiter",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Route ``scores`` ``[M, E]`` under ``contract``; returns ``(weights fp32, ids int32)``, each ``[M, topk]``.

    Inputs are never modified. Works on any device torch supports, for
    bf16/fp16/fp32 logits, row-strided inputs (column stride 1), any
    ``1 <= topk <= E``.
    """
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, contract, keep_values=False)[:2]


def route_with_values(
    scores: torch.Tensor,
    bias: torch.Tensor,
    topk: int,
    *,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    contract: str | Contract = "aiter",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``route`` plus the fp32 ``sig`` and ``ranking`` ``[M, E]`` it ranked with (for explaining mismatches)."""
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, contract, keep_values=True)


def _route(scores, bias, topk, renormalize, routed_scaling_factor, contract, *, keep_values):
    c = get_contract(contract)
    check_route_args(scores, bias, topk, renormalize, routed_scaling_factor)
    rows, experts = scores.shape
    device = scores.device
    weights = torch.empty((rows, topk), dtype=torch.float32, device=device)
    ids = torch.empty((rows, topk), dtype=torch.int32, device=device)
    values = [torch.empty((rows, experts), dtype=torch.float32, device=device) for _ in range(2)] if keep_values else None
    if rows == 0:
        return (weights, ids, *values) if keep_values else (weights, ids)
    priority = _priority_on(experts, c.tie_rule, device)
    # Row chunks keep each chunk's fp32 intermediates cache-resident on a CPU
    # (about 2x faster than whole-matrix passes at M = 65,536).
    chunk = _CHUNK_ROWS_CPU if device.type == "cpu" else _CHUNK_ROWS_GPU
    for start in range(0, rows, chunk):
        stop = min(start + chunk, rows)
        sig, ranking = ranking_values(scores[start:stop], bias, c)
        w, i = _route_rows(sig, ranking, topk, renormalize, float(routed_scaling_factor), c, priority)
        weights[start:stop] = w
        ids[start:stop] = i
        if keep_values:
            values[0][start:stop] = sig
            values[1][start:stop] = ranking
    return (weights, ids, *values) if keep_values else (weights, ids)


def _route_rows(sig, ranking, topk, renormalize, rsf, c, priority):
    if c.name == "serial":
        ids = _select(ranking, topk, priority, floor=SERIAL_SENTINEL)
        ids.clamp_(min=0)  # the expert-0 fallback
        w = sig.gather(1, ids)
        if renormalize:
            w = (w / (_sequential_sum(w) + 1e-20).unsqueeze(1)) * rsf
        else:
            w = w * rsf
    else:
        ids = _select(ranking, topk, priority, floor=None)
        w = sig.gather(1, ids)
        if renormalize:
            total = _sequential_sum(w)
            w = w / torch.where(total > 0, total, torch.ones_like(total)).unsqueeze(1)
        w = w * rsf
    return w, ids
