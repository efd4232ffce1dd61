"""The one place a blame becomes text: a reason per clause of a row, for the rows a report shows."""

from __future__ import annotations

from .attribution import clauses as A

__all__ = ["generic_reason", "reason_text"]

_FIXED = {
    A.R_OUT_OF_RANGE: "row holds an expert id out of [0, E)",
    A.R_TWICE: "row holds an expert id twice",
    A.R_FALLBACK_EARLY: "expert 0 repeated as the fallback although eligible experts were left",
    A.R_ROUND_INDEX: "round index emitted as the expert id where only -inf/NaN remain",
    A.R_NAN_OVER_NUMBER: "a NaN expert was chosen over a number",
    A.R_NAN_TAKEN: "a NaN expert was chosen (the contract never takes NaN)",
    A.R_NUMBER_OVER_NAN: "a number was chosen over a NaN expert (the contract ranks NaN first)",
    A.R_NAN_GROUPS: "other groups were kept among those whose group score is NaN (NaN among a group's top experts)",
    A.R_GROUP_MASK: "experts of a group the contract drops were chosen (the group mask did not hold them back)",
    A.R_GROUP_SELECTION: "other groups were kept than the contract's group scores keep",
    A.R_GROUP_TIE: "groups whose scores tie the kept ones exactly were kept instead (group tie rule not followed)",
    A.R_GROUP_MASK_VALUE: "the output is what masking the dropped groups with the other mask value (-inf / 0.0) gives",
    A.R_TIE_SET: "equal keys at the cutoff, other experts chosen (tie priority not followed)",
    A.R_NAN_TIE: "NaN experts taken other than the tie priority gives (NaN values tie one another)",
    A.R_SIGNED_ZERO: "the output is what ranking -0.0 apart from +0.0 would give (they are equal ranking values)",
    A.R_NEAR_SET: "each differing expert is within the scores' error bounds of an expected one at the cutoff",
    A.R_NEAR_ULP: "the differing slots hold experts within the scores' error bounds of each other",
    A.R_SELECTION_FTZ: "the output is what flushing subnormal ranking values to zero would give (flush-to-zero)",
    A.R_ORDER_FTZ: "the order is what flushing subnormal ranking values to zero would give (flush-to-zero)",
    A.R_NOT_TOP_NUMBERS: "the numbers chosen are not the top numbers (the NaN rule frees where NaN ranks, not which numbers win)",
    A.R_NOT_TOP_ELIGIBLE: "the eligible experts chosen are not the top ones, or a fallback slot took an eligible expert's place",
    A.R_BIAS: "weights match sig + bias, not sig",
    A.R_NOT_RENORMALIZED: "weights were not renormalized (renormalize=True)",
    A.R_EPS_MISSING: "weights divided by the raw sum where the contract divides by the sum plus its epsilon",
    A.R_EPS_ADDED: "weights divided by the sum plus 1e-20 where the contract divides by the raw sum (a sum of underflowed scores)",
    A.R_GUARD_ADDED: "weights left undivided where their sum is not > 0 (NaN, zero): a guard where the contract divides every sum",
    A.R_RENORMALIZED: "weights were renormalized although renormalize=False",
    A.R_SOFTMAX_OF_CHOSEN: "weights are a softmax over the k chosen logits, not over all experts",
    A.R_SOFTMAX_OF_ALL: "weights are a softmax over all experts, not over the k chosen logits",
    A.R_ACCURACY: "weights differ beyond the contract's tolerance",
    A.R_CAST_BF16: "weights are the contract's rounded to bf16 (the weights were cast to bf16)",
    A.R_CAST_FP16: "weights are the contract's rounded to fp16 (the weights were cast to fp16)",
    A.R_SCALE_IGNORED: "weights are not multiplied by the chosen experts' per-expert weight scale",
    A.R_SCALE_BEFORE_RENORM: "the per-expert weight scale was applied before renormalizing, not after",
    A.R_SCALE_BY_SLOT: "the per-expert weight scale was taken by output slot, not by the chosen expert's id",
    A.R_SCALE_TWICE: "the per-expert weight scale was applied twice",
    A.R_SHARED_ID: "the last column must hold the shared expert, id E",
    A.R_SHARED_WEIGHT: "the shared expert's weight is not the routed weights' sum divided by routed_scaling_factor",
    A.R_DENSE_MORE: "dense answer: the routing_map row holds more than topk experts (shown: the top k-1 by prob, then -1)",
    A.R_DENSE_FEWER: "dense answer: the routing_map row holds fewer than topk experts (empty slots and the last shown as -1)",
    A.R_DENSE_OUTSIDE: "dense answer: probs nonzero (or NaN/inf) at an expert outside the routing_map row (last slot shown as -1)",
}


def reason_text(code: int, *, e: list[int], a: list[int], slot: int, numbers: int, valid: int, total: float, rsf: float,
                factor: float = float("nan")) -> str:
    """The reason of one aspect of one row (``e``/``a``: expected and actual ids; ``slot``: first differing slot)."""
    if code in _FIXED:
        return _FIXED[code]
    if code == A.R_NAN_ORDER:
        return f"only {numbers} non-NaN values; NaN experts fill slots {numbers}.. in tie order"
    if code == A.R_SENTINEL:
        return f"only {valid} values beat the floor; slots {valid}.. must hold expert 0"
    if code == A.R_TIE_ORDER:
        return f"same expert set, equal keys, other priority order (slot {slot}: {a[slot]} before {e[slot]})"
    if code == A.R_SELECTION:
        missing = [m for m in e if m not in a]
        extra = [x for x in a if x not in e]
        return f"expected experts {missing} are missing, {extra} chosen instead"
    if code == A.R_ORDER:
        return f"same expert set in another order (slot {slot}: expected {e[slot]}, got {a[slot]})"
    if code == A.R_GUARD_DIVIDED:
        return f"sum of weights is {total}: the guard must not divide"
    if code == A.R_SCALING:
        return f"weights scaled by routed_scaling_factor={rsf} twice or not at all"
    if code == A.R_FACTOR:
        return f"weights are off by a constant factor {factor:.6g} (routed_scaling_factor={rsf})"
    return f"reason code {code}"


_GENERIC = {
    A.R_NAN_ORDER: "fewer non-NaN values than slots; NaN experts fill the rest in tie order",
    A.R_SENTINEL: "fewer values beat the floor than slots; the rest must hold expert 0",
    A.R_TIE_ORDER: "same expert set, equal keys, other priority order",
    A.R_SELECTION: "expected experts missing, others chosen instead",
    A.R_ORDER: "same expert set in another order",
    A.R_GUARD_DIVIDED: "the sum of the weights is not > 0: the guard must not divide",
    A.R_SCALING: "weights scaled by routed_scaling_factor twice or not at all",
    A.R_FACTOR: "weights off by a constant factor (routed_scaling_factor twice or not at all, 1/k, ...)",
}


def generic_reason(code: int) -> str:
    """The reason without the row's own numbers (for mismatch cells; row examples carry the full text)."""
    return _FIXED.get(code) or _GENERIC.get(code, "")
