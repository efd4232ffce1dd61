"""Clause names (a closed vocabulary) and the statement of each clause, derived from a contract's fields.

The runner attributes every mismatched row to exactly one clause, reports
group by clause, nightly diffs compare clauses across runs: the names are
fixed. ``ClauseName`` is a ``str`` enum whose members compare, hash, format
and serialize as their plain names, so ``counts["tie_order"]`` and
``counts[ClauseName.tie_order]`` are the same entry, while
``ClauseName("tie_ordr")`` raises.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum
from typing import Any

from ._tie_priority import tie_order

# The statements read a contract's fields; ._contracts imports this module (Contract.clauses),
# so the Contract type is not imported here (no import cycle).
Contract = Any

__all__ = ["Clause", "ClauseName", "clauses_for"]


class ClauseName(str, Enum):
    """Every clause name any contract may have (member name == value)."""

    validity = "validity"
    selection = "selection"
    tie_order = "tie_order"
    nan_last = "nan_last"
    signed_zero = "signed_zero"
    output_order = "output_order"
    bias_in_weight = "bias_in_weight"
    renorm_guard = "renorm_guard"
    scaling = "scaling"
    weight_accuracy = "weight_accuracy"
    sentinel_fallback = "sentinel_fallback"
    group_selection = "group_selection"
    group_tie_order = "group_tie_order"
    group_mask = "group_mask"
    renormalization = "renormalization"
    softmax_scope = "softmax_scope"

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return repr(self.value)

    __format__ = str.__format__


@dataclass(frozen=True)
class Clause:
    name: ClauseName
    statement: str


def _number(v: float) -> str:
    return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m.group(1).replace("+", "") + m.group(2), f"{v:g}")


def _ranking_text(c: Contract) -> str:
    score = {"sigmoid": "sig(x)", "softmax": "p = softmax(x)", "softmax_of_topk": "the logit x", "sigmoid_of_topk": "the logit x",
             "sqrt_softplus": "s = sqrt(softplus(x))", "softcap_sigmoid": f"sig(tanh(x / {_number(c.softcap)}) * {_number(c.softcap)})"}[c.scoring]
    return f"{score} + bias" if c.bias != "none" else score


def _selection(c: Contract) -> str:
    text = f"The selected experts are those with the topk largest ranking values {_ranking_text(c)}"
    if c.score_precision == "input":
        text += " (scores and the ranking add rounded to the logits' dtype)"
    if c.is_grouped:
        text += ", after the group mask"
    text += "."
    if c.floor is not None:
        text += f" Only values > {_number(c.floor)} can be selected."
    return text


def _tie_order(c: Contract) -> str:
    if c.tie_rule == "lowest":
        return "Equal ranking values go to the lowest expert index."
    first = int(tie_order(c.experts, c.tie_rule)[0])
    return (
        "Equal ranking keys are broken by aiter's wave64 lane priority "
        f"(expert {first} wins an all-equal row of {c.experts})."
    )


def _nan_last(c: Contract) -> str:
    if c.nan_rule == "last":
        return "A NaN ranking value ranks below every number, -inf included; NaN experts only fill slots no number can."
    if c.nan_rule == "never":
        return "A NaN ranking value is never selected (it never beats the running best)."
    return "A NaN ranking value ranks above every number, +inf included (as torch.topk orders it)."


def _output_order(c: Contract) -> str:
    if c.output_order == "selection":
        return "Winners are output in selection order."
    rule = "tie priority" if c.tie_rule == "aiter" else "expert index"
    return f"Winners are ordered by ranking key descending, then {rule} ascending."


def _weights_from(c: Contract) -> str:
    if c.scoring == "softmax_of_topk":
        return "Weights are softmax over the k chosen logits (fp32)"
    if c.scoring == "sigmoid_of_topk":
        return "Weights are sig(x) of the k chosen logits (fp32)"
    return f"Weights are built from {_ranking_text(c.replace(bias='none'))}"


def _renorm(c: Contract) -> str:
    order = {"selection": "in selection order", "rank": "in output order", "any": "in rank order"}[c.output_order]
    if c.renormalize == "guard":
        return "With renormalize, weights are divided by their sum only when the sum is > 0 (else by 1)."
    if c.renormalize == "eps":
        rs = " * rs" if c.scaling == "after" else ""
        return f"With renormalize, weight = (w / (den + {_number(c.renorm_eps)}f)){rs}, den summed {order}."
    if c.renormalize == "lp":
        return f"With renormalize, weights are divided by their L_{_number(c.renorm_p)} norm (no guard: a zero norm gives NaN)."
    return "With renormalize, weights are divided by their raw sum (no guard: a zero sum gives NaN)."


def _renormalization(c: Contract) -> str:
    return "Weights are renormalized exactly when the call asks for it (renormalize=True), never otherwise."


def _softmax_scope(c: Contract) -> str:
    if c.scoring == "softmax_of_topk":
        return "The softmax runs over the k chosen logits only, not over all experts."
    return "The softmax runs over all experts' logits, not over the k chosen ones."


def _scaling(c: Contract) -> str:
    if c.scaling == "fused":
        return "Weights are scaled as w * (routed_scaling_factor / sum): the factor is folded into the renormalization."
    per_expert = ", then by the chosen expert's weight scale" if c.weight_scale == "per_expert" else ""
    shared = (" The shared expert's weight (the last column) is the routed weights' fp32 sum, in output order, divided by"
              " routed_scaling_factor.") if c.shared_expert_slot == "last" else ""  # fmt: skip
    return f"Weights are multiplied by routed_scaling_factor exactly once, after renormalization{per_expert}.{shared}"


def _weight_accuracy(c: Contract) -> str:
    return (
        "Each weight equals the contract's arithmetic within the contract's tolerance "
        f"(rtol {_number(c.weight_rtol)}, atol {_number(c.weight_atol)})."
    )


def _group_selection(c: Contract) -> str:
    how = "sum of its two largest" if c.group_score == "top2_sum" else "largest"
    return (
        f"Experts form n_group contiguous groups; a group's score is the {how} ranking values; "
        "the topk_group groups of largest score are kept."
    )


def _group_tie_order(c: Contract) -> str:
    return f"Equal group scores at the topk_group cutoff go to the {c.group_tie_rule} group index."


def _group_mask(c: Contract) -> str:
    value = "-inf" if math.isinf(c.group_mask) else "0.0"
    return f"Experts outside the kept groups rank with the value {value}; no other expert value changes."


def _fallback(c: Contract) -> str:
    if c.floor is None:
        left = "no non-NaN value is left"
    else:
        left = f"no value beats {_number(c.floor)}" + (" (NaN never does)" if c.nan_rule == "never" else "")
    return f"A round in which {left} emits expert 0 (again, if already taken) and counts its weight again."


def clauses_for(c: Contract) -> tuple[Clause, ...]:
    """The clauses of ``c`` in pipeline order, each only where its fields give it something to state."""
    if c.shared_expert_slot == "last":
        shape = "[M, topk + 1], the last column the shared expert (id E), the routed ids in [0, E)"
    else:
        shape = "[M, topk], ids in [0, E)"
    out = [("validity", f"Outputs are fp32 weights and int32 ids of shape {shape}, inputs left unchanged."
            + (" Repeats are allowed only as the expert-0 fallback." if c.has_fallback else " No expert appears twice in a row."))]  # fmt: skip
    if c.is_grouped:
        out += [("group_selection", _group_selection(c)), ("group_tie_order", _group_tie_order(c)),
                ("group_mask", _group_mask(c))]  # fmt: skip
    out += [
        ("selection", _selection(c)),
        ("tie_order", _tie_order(c)),
        ("nan_last", _nan_last(c)),
        ("signed_zero", "-0.0 and +0.0 ranking values are equal (they tie, and the tie rule decides)."),
    ]
    if c.output_order != "any":
        out.append(("output_order", _output_order(c)))
    if c.bias == "ranks_only":
        out.append(("bias_in_weight", "The bias takes part in ranking only: weights are built from the scores, never scores + bias."))
    out += [
        ("renorm_guard", _weights_from(c) + ". " + _renorm(c)),
        ("renormalization", _renormalization(c)),
    ]
    if c.scoring in ("softmax", "softmax_of_topk"):
        out.append(("softmax_scope", _softmax_scope(c)))
    out += [
        ("scaling", _scaling(c)),
        ("weight_accuracy", _weight_accuracy(c)),
    ]
    if c.has_fallback:
        out.append(("sentinel_fallback", _fallback(c)))
    return tuple(Clause(ClauseName(name), text) for name, text in out)
