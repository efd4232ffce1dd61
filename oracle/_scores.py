"""Expert scores and ranking values: the contract's sigmoid or softmax, in its precision, plus the bias.

Every formula here gives the same bits on every device and for every memory
layout: the sigmoid and the softmax are computed through float64 and
rounded once (torch's own fp32 sigmoid is not layout-independent: on a CPU
the vectorized body and the scalar tail of one tensor round differently).
"""

from __future__ import annotations

import functools

import torch

from ._contracts import Contract

__all__ = ["expert_scores", "ranking_dtype", "ranking_from", "sigmoid_of", "softcap_sigmoid_rows", "softmax_rows", "sqrt_softplus_rows"]

_LOW_PRECISION = (torch.bfloat16, torch.float16)
# The midpoint between the largest fp32 number and 2**128: float64 values from here up round to fp32 inf.
_FP32_OVERFLOW = 2.0**128 - 2.0**103


def _sigmoid_exact(x: torch.Tensor, formula: str) -> torch.Tensor:
    """The fp32 sigmoid of fp32 ``x`` by ``formula``.

    correctly_rounded: round_fp32(1 / (1 + exp(-x))), and 0 where exp(-x)
                       overflows fp32 -- the correctly rounded sigmoid, as an
                       fp32 formula sees it
    expf:              e = round_fp32(exp(-x)); 1.0f / (1.0f + e) -- expf,
                       then fp32 add and divide (the serial scan's arithmetic)

    Below x = -88.72, exp(-x) exceeds the largest fp32 number: every fp32
    implementation of the formula (aiter's exp2 and rcp, torch's sigmoid, a
    CUDA kernel) gives exactly 0 there, although the true sigmoid is a tiny
    subnormal down to x = -103.9. The contract is the fp32 formula, so the
    oracle gives 0 too; otherwise those experts would rank above a tie that
    every real router sees.
    """
    e = x.double().neg_().exp_()  # exp(-x) in place: one float64 buffer, not three
    if formula == "expf":
        return torch.reciprocal(e.float().add_(1.0))
    overflows = e >= _FP32_OVERFLOW  # exactly where e.float() is inf, without the conversion
    return e.add_(1.0).reciprocal_().float().masked_fill_(overflows, 0.0)


@functools.lru_cache(maxsize=16)
def _sigmoid_table(dtype: torch.dtype, formula: str, rounded_to_input: bool, device: torch.device) -> torch.Tensor:
    # A 16-bit float has 65,536 values: tabulate the exact sigmoid once.
    every = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    table = _sigmoid_exact(every.float(), formula)
    if rounded_to_input:
        table = table.to(dtype).float()
    return table.to(device)


def _lookup(table: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    index = x.view(torch.int16).long().add_(2**15)
    # gather over an expanded view is the fastest table lookup torch has on a CPU
    return table.expand(x.shape[0], table.shape[0]).gather(1, index)


def sigmoid_of(x: torch.Tensor, formula: str, *, rounded_to_input: bool = False) -> torch.Tensor:
    """fp32 sigmoid of logits ``x`` [M, E] (any logit dtype); ``rounded_to_input``: rounded to ``x.dtype`` first."""
    if x.dtype in _LOW_PRECISION:
        return _lookup(_sigmoid_table(x.dtype, formula, rounded_to_input, x.device), x)
    return _sigmoid_exact(x.float(), formula)


def softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """Row softmax of ``x`` [M, n] through float64, rounded once to fp32.

    The usual max-subtracted formula, so its edge cases are torch's: a row
    holding NaN or +inf, or only -inf, is all NaN.
    """
    x64 = x.double()
    e = (x64 - x64.amax(dim=1, keepdim=True)).exp_()
    return (e / e.sum(dim=1, keepdim=True)).float()


def sqrt_softplus_rows(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``sqrt(softplus(x))`` (DeepSeek-V4's scores) through float64, rounded once.

    softplus(x) = max(x, 0) + log1p(exp(-|x|)): no overflow for large x, and
    +inf at +inf, 0 at -inf, NaN at NaN, as the model's fp32 code gives.
    """
    x64 = x.double()
    soft = x64.clamp(min=0) + torch.log1p(torch.exp(-x64.abs()))
    soft = torch.where(torch.isposinf(x64), x64, soft)
    return soft.sqrt_().float()


def softcap_sigmoid_rows(x: torch.Tensor, cap: float, formula: str) -> torch.Tensor:
    """fp32 ``sigmoid(tanh(x / cap) * cap)`` (Laguna's soft-capped scores): the capped logit through
    float64 rounded to fp32 once (the model's fp32 tanh), then the contract's fp32 sigmoid of it."""
    capped = (torch.tanh(x.double() / cap) * cap).float()
    return sigmoid_of(capped, formula)


def _in_precision(values: torch.Tensor, c: Contract, dtype: torch.dtype) -> torch.Tensor:
    if c.score_precision == "input" and dtype in _LOW_PRECISION:
        return values.to(dtype).float()
    return values


def expert_scores(x: torch.Tensor, c: Contract) -> torch.Tensor:
    """fp32 [M, E]: sig(x), softmax(x), sqrt(softplus(x)), sig(softcap(x)), or x itself (the *_of_topk
    scorings rank the logits), in the contract's precision."""
    if c.scoring == "sigmoid":
        return sigmoid_of(x, c.sigmoid_formula, rounded_to_input=c.score_precision == "input")
    if c.scoring == "softmax":
        return _in_precision(softmax_rows(x), c, x.dtype)
    if c.scoring == "sqrt_softplus":
        return _in_precision(sqrt_softplus_rows(x), c, x.dtype)
    if c.scoring == "softcap_sigmoid":
        return _in_precision(softcap_sigmoid_rows(x, c.softcap, c.sigmoid_formula), c, x.dtype)
    return x.float()


def ranking_dtype(c: Contract, logits: torch.dtype, bias: torch.dtype | None) -> torch.dtype | None:
    """The 16-bit dtype the ranking add (and a group score) is rounded to, or None for fp32.

    ``score_precision="input"`` computes as eager torch code does on these
    inputs: the add in the dtype torch promotes the logits and the bias to
    (bf16 + bf16 is bf16; bf16 + fp32 is fp32).
    """
    if c.score_precision != "input" or logits not in _LOW_PRECISION:
        return None
    promoted = torch.promote_types(logits, bias) if c.has_bias and bias is not None else logits
    return promoted if promoted in _LOW_PRECISION else None


def ranking_from(scores: torch.Tensor, bias: torch.Tensor | None, c: Contract, dtype: torch.dtype) -> torch.Tensor:
    """Ranking values fp32 [M, E]: ``scores + bias`` (the add in the contract's precision), or ``scores``."""
    if not c.has_bias:
        return scores
    low = ranking_dtype(c, dtype, bias.dtype)
    if low is not None:
        return (scores + bias.to(low).float()).to(low).float()
    return scores + bias.float()
