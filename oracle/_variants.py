"""Single-field variants of a contract, for diagnosing a router that fails it.

Each variant changes one field to a value real routers are known to use
(docs/contracts.md#how-other-routers-differ: bf16 scores in the engines' torch paths, the reference
code's 0.0 mask, ``torch.topk``'s NaN-first order, vLLM's unguarded
division, ...). Routing the mismatched rows under each variant tells which
single change explains them; the label completes the sentence "the router
matches CONTRACT with ...".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ._contracts import Contract

__all__ = ["Variant", "variants"]


@dataclass(frozen=True)
class Variant:
    label: str
    field: str
    value: object
    contract: Contract


def _show(value) -> str:
    return "-inf" if isinstance(value, float) and math.isinf(value) else str(value)


_SHORT_DTYPE = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}

_NAN_LABELS = {
    "first": "NaN ranked above every number (as torch.topk ranks it)",
    "last": "NaN ranked below every number, filling only the slots numbers cannot",
    "never": "NaN never taken (expert 0 fills the slots numbers cannot)",
}
_RENORM_LABELS = {
    "raw": "the weights divided by their raw sum (no zero-sum guard, no epsilon)",
    "eps": "the weights divided by their sum + 1e-20",
    "guard": "the weights divided by their sum only when it is > 0",
}


def _candidates(c: Contract, dtype_name: str | None):
    """(field, value, label) for every one-field change that can change what the oracle returns or accepts."""
    if dtype_name != "fp32":
        dt = dtype_name or "the logits dtype"
        # the *_of_topk scorings rank the logits as given: with the weights rounded anyway, nothing is left to round
        if not (c.scoring.endswith("_of_topk") and c.weight_precision == "input"):
            if c.score_precision == "fp32":
                yield "score_precision", "input", f"the scores and the ranking add computed in {dt}"
            else:
                yield "score_precision", "fp32", "the scores and the ranking add computed in fp32"
        if c.weight_precision == "fp32":
            yield ("weight_precision", "input", f"the weights gathered, renormalized and scaled in {dt} (the trainer's "
                   "arithmetic: Megatron-core's router keeps its probs in the logits' dtype)")
        else:
            yield "weight_precision", "fp32", "the weights renormalized and scaled in fp32"
    if c.is_grouped:
        if math.isinf(c.group_mask):
            yield "group_mask", 0.0, "the experts outside the kept groups masked with 0.0 (the model's reference code), not -inf"
        else:
            yield "group_mask", -math.inf, "the experts outside the kept groups masked with -inf (SGLang, vLLM), not 0.0"
        share = c.topk // c.topk_group
        if c.group_score != "max":
            yield "group_score", "max", "the group score as the group's largest value, not the sum of its top " + (
                "two" if c.group_score == "top2_sum" else f"topk // topk_group = {share}")
        if c.group_score != "top2_sum" and c.experts // c.n_group >= 2 and not (c.group_score == "topk_share_sum" and share == 2):
            yield "group_score", "top2_sum", "the group score as the sum of the group's top two values"
        if c.group_score != "topk_share_sum" and share != 2 and 1 <= share <= c.experts // c.n_group:
            yield ("group_score", "topk_share_sum", f"the group score as the sum of the group's top topk // topk_group = "
                   f"{share} values (Megatron-core's group_limited_topk)")
        other = "highest" if c.group_tie_rule == "lowest" else "lowest"
        yield "group_tie_rule", other, f"ties between group scores going to the {other} group index"
    if c.tie_rule == "aiter":
        yield "tie_rule", "lowest", "expert ties going to the lowest index"
    else:
        yield "tie_rule", "aiter", "expert ties in aiter's wave64 lane order"
    for rule in ("first", "last", "never"):
        if rule != c.nan_rule:
            yield "nan_rule", rule, _NAN_LABELS[rule]
    if c.floor is not None:
        yield "floor", None, f"no {_show(c.floor)} floor (every number can be selected)"
    if c.scoring == "sigmoid":
        for rule in ("raw", "eps", "guard"):
            if rule != c.renormalize:
                yield "renormalize", rule, _RENORM_LABELS[rule]
        if c.renormalize_when == "call" and c.admitted_renormalize == "any":
            yield ("renormalize_when", "always", "the weights renormalized whatever renormalize says (the trainer's "
                   "arithmetic: Megatron-core's sigmoid router always divides by sum + 1e-20)")
        other = "expf" if c.sigmoid_formula == "correctly_rounded" else "correctly_rounded"
        text = "1 / (1 + expf(-x)) in fp32" if other == "expf" else "correctly rounded"
        yield "sigmoid_formula", other, f"the sigmoid computed as {text}"
    elif c.scoring == "softmax" and c.bias == "none":  # softmax_of_topk ranks the logits: no bias to rank with
        yield "scoring", "softmax_of_topk", "the softmax taken over the k chosen logits only"
    elif c.scoring == "softmax_of_topk":
        yield "scoring", "softmax", "the softmax taken over all experts before the top-k"
    if c.output_order != "any":
        yield "output_order", "any", "the output in any order (ids compared as a set)"
    if c.bias == "ranks_only":
        yield "bias", "in_weight", "the bias added into the weights (scores + bias)"
    elif c.bias == "in_weight":
        yield "bias", "ranks_only", "the bias in the ranking only, not in the weights"


def variants(contract: Contract, *, logits_dtype: torch.dtype | None = None) -> list[Variant]:
    """The meaningful single-field variants of ``contract``.

    ``logits_dtype``: the logits the variants will route; with fp32 logits the
    precision variant changes nothing and is left out, otherwise its label
    names the dtype ("computed in bf16").
    """
    dtype_name = _SHORT_DTYPE.get(logits_dtype, str(logits_dtype)) if logits_dtype is not None else None
    out = []
    for field, value, label in _candidates(contract, dtype_name):
        name = f"{contract.name}[{field}={_show(value)}]"
        out.append(Variant(label, field, value, contract.replace(name=name, **{field: value})))
    return out
