"""The weights aspect: the candidate's weights against the contract's weights *for the candidate's own experts*
(matched by expert id), so a wrong selection never hides a broken renormalization.

The contract's weights rounded to a 16-bit dtype the candidate may have cast them to are tried first (a cast,
``weight_accuracy``): bf16 top-1 weights that round to 1.0 look renormalized, bf16 top-2 ones that sum to 1/2 look
renormalized and halved. Each rule a weight can break is then tried as a counterfactual of the candidate's own
experts, as it is or rounded (``_Counterfactuals.close_to``), so a rule broken in bf16 keeps its name, the most
specific first: the division guard, the bias, the per-expert scale, the renormalization flag, the set a softmax runs
over, the division in a narrower arithmetic, then a constant factor (alone or on top of one of those);
``weight_accuracy`` keeps what none explains.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import oracle
from oracle import Contract

from ...cases.build import Case
from ..tolerance import broadcast_isclose, weights_close
from .clauses import (
    INDEX, R_ACCURACY, R_BIAS, R_CAST_BF16, R_CAST_FP16, R_EPS_ADDED, R_EPS_MISSING, R_FACTOR, R_GUARD_ADDED,
    R_GUARD_DIVIDED, R_NOT_RENORMALIZED, R_RENORMALIZED, R_SCALE_BEFORE_RENORM, R_SCALE_BY_SLOT, R_SCALE_IGNORED,
    R_SCALE_TWICE, R_SOFTMAX_OF_ALL, R_SOFTMAX_OF_CHOSEN,
)  # fmt: skip
from .rows import Assignment, BadRows, at

__all__ = ["WeightsAspect", "known_factors", "weights_aspect"]

# How far bf16 arithmetic (a sigmoid, a sum of k, a division and a scaling, each rounded to 8 bits) takes a weight: below
# 2^-5 for k up to 16; twice that.
_NARROW_ARITHMETIC = 2.0**-4
_CAST_CODE = {torch.bfloat16: R_CAST_BF16, torch.float16: R_CAST_FP16}


@dataclass(frozen=True)
class WeightsAspect:
    """The weights aspect of each row, [B] each but the last two."""

    clause: torch.Tensor  # clause index or NONE
    code: torch.Tensor
    second_clause: torch.Tensor  # a second weight rule the same row breaks, or NONE
    second_code: torch.Tensor
    factor: torch.Tensor  # the constant a ``scaling`` row's weights are off by (NaN if none)
    # [B, k] what a declared weight_accuracy's bound is measured from: the contract's weights for the candidate's own
    # experts, or the counterfactual of the rule the row also breaks in a narrower arithmetic
    reference: torch.Tensor
    ok: torch.Tensor  # [B, k] bool: each weight within the contract's tolerance of the contract's


class _WeightsAssignment(Assignment):
    """``Assignment`` with a second clause beside the first, and the factor of a ``scaling`` row."""

    def __init__(self, todo: torch.Tensor):
        super().__init__(todo)
        self.second_clause, self.second_code = self.clause.clone(), self.code.clone()
        self.factor = torch.full(todo.shape, math.nan, device=todo.device)

    def assign(self, mask: torch.Tensor, clause: str, reason: int, second: str | None = None, second_reason: int = 0,
               by: torch.Tensor | float | None = None) -> None:  # fmt: skip
        hit = self.todo & mask
        self.clause[hit] = INDEX[clause]
        self.code[hit] = reason
        if second:
            self.second_clause[hit] = INDEX[second]
            self.second_code[hit] = second_reason
        if by is not None:
            self.factor[hit] = by[hit] if isinstance(by, torch.Tensor) else by
        self.todo = self.todo & ~hit

    def aspect(self, reference: torch.Tensor, ok: torch.Tensor) -> WeightsAspect:
        return WeightsAspect(self.clause, self.code, self.second_clause, self.second_code, self.factor, reference, ok)


@dataclass(frozen=True)
class _Counterfactuals:
    """The weights a router breaking one rule gives for the candidate's own experts, and how they are compared."""

    rows: BadRows
    contract: Contract
    logits_dtype: torch.dtype
    renormalize: bool
    scaling_factor: float
    expert_scale: torch.Tensor | None  # [E] a per-expert weight scale (weight_scale="per_expert"), else None
    slot_scale: torch.Tensor | None  # [B, k] ... at the candidate's own experts
    chosen: torch.Tensor  # [B, k] the scores of the candidate's experts
    reference: torch.Tensor  # [B, k] the contract's weights for them
    casts: list[tuple[torch.dtype, torch.Tensor]]  # ``_casts``

    def formula(self, values: torch.Tensor, renormalize: bool | None = None) -> torch.Tensor:
        """The contract's weights of ``values`` [B, k], with the call's renormalize flag or ``renormalize``."""
        return self.scaled_by(values, self.slot_scale, self.renormalize if renormalize is None else renormalize)

    def scaled_by(self, values: torch.Tensor, slot_scale: torch.Tensor | None, renormalize: bool | None = None) -> torch.Tensor:
        """The contract's weights of ``values`` [B, k] with another per-slot scale (None: none)."""
        return oracle.weights_from(values, contract=self.contract, renormalize=self.renormalize if renormalize is None else renormalize,
                                   routed_scaling_factor=self.scaling_factor, logits_dtype=self.logits_dtype, slot_scale=slot_scale)  # fmt: skip

    def under(self, contract: Contract) -> torch.Tensor:
        """The weights of the chosen scores under another division rule (``contract``), renormalized."""
        return oracle.weights_from(self.chosen, contract=contract, renormalize=True, routed_scaling_factor=self.scaling_factor,
                                   logits_dtype=self.logits_dtype, slot_scale=self.slot_scale)  # fmt: skip

    def close_to(self, alternative: torch.Tensor) -> torch.Tensor:
        """bool [..., B]: the candidate's weights are ``alternative`` [..., B, k] (leading dimensions: several
        counterfactuals at once) as it is, or rounded to a dtype the row's weights may have been cast to. Rounded, only
        where it lies beyond two of that dtype's ULPs of the reference: a router computing in bf16 is that far off by
        itself, and a renormalization of a sum within bf16 rounding of 1 is no evidence of the flag."""
        actual, contract = self.rows.actual_weights, self.contract
        hit = weights_close(actual, alternative, contract).all(-1)
        for dtype, rows_cast in self.casts:
            far = ~broadcast_isclose(alternative, self.reference, rtol=2 * torch.finfo(dtype).eps, atol=contract.weight_atol,
                                     equal_nan=True).all(-1)  # fmt: skip
            hit |= rows_cast & far & weights_close(actual, alternative.to(dtype).float(), contract).all(-1)
        return hit

    def differs(self, alternative: torch.Tensor) -> torch.Tensor:
        """bool [..., B]: ``alternative`` is not the contract's weights (within its tolerance)."""
        return ~weights_close(alternative, self.reference, self.contract).all(-1)

    def explains(self, alternative: torch.Tensor) -> torch.Tensor:
        """bool [..., B]: the candidate's weights are ``alternative``, which the contract's are not."""
        return self.close_to(alternative) & self.differs(alternative)


def weights_aspect(rows: BadRows, contract: Contract, case: Case, ids_equal: torch.Tensor, same_set: torch.Tensor,
                   invalid: torch.Tensor) -> WeightsAspect:  # fmt: skip
    """The weights aspect of every row; ``ids_equal``, ``same_set``, ``invalid`` [B] bool: the ids are the expected ones
    slot by slot, as a set, or invalid (no weight clause then)."""
    scaling_factor = float(case.routed_scaling_factor)
    expert_scale = case.expert_scale if contract.weight_scale == "per_expert" else None
    slot_scale = None if expert_scale is None else expert_scale.to(rows.actual_ids.device).float()[rows.actual_ids]
    chosen = at(rows.scores, rows.actual_ids)
    reference = oracle.weights_from(chosen, contract=contract, renormalize=case.renormalize, routed_scaling_factor=scaling_factor,
                                    logits_dtype=case.scores.dtype, slot_scale=slot_scale)  # fmt: skip
    # Where the ids are right (in any order), the expected weights matched by expert id are the reference.
    position = (rows.actual_ids.unsqueeze(2) == rows.expected_ids.unsqueeze(1)).float().argmax(2)
    reference = torch.where((ids_equal | same_set).unsqueeze(1), rows.expected_weights.gather(1, position), reference)
    ok = weights_close(rows.actual_weights, reference, contract)
    bad = ~ok.all(1) & ~invalid
    assignment = _WeightsAssignment(bad.clone())
    if not bool(bad.any()):
        return assignment.aspect(reference, ok)
    alternatives = _Counterfactuals(rows, contract, case.scores.dtype, case.renormalize, scaling_factor, expert_scale, slot_scale,
                                    chosen, reference, _casts(rows.actual_weights, case.scores.dtype))  # fmt: skip
    _read_casts(alternatives, assignment)
    guards = _read_division_guards(alternatives, assignment)
    if contract.has_bias:
        _read_bias_in_weight(alternatives, assignment)
    if slot_scale is not None:
        _read_per_expert_scale(alternatives, assignment)
    rules = _weight_rules(alternatives)
    _read_rules(alternatives, assignment, rules)
    bounded_against = _read_division_in_narrow_arithmetic(alternatives, assignment, guards)
    _read_known_factors(alternatives, assignment, rules)
    _read_any_constant(alternatives, assignment)
    assignment.assign(torch.ones_like(assignment.todo), "weight_accuracy", R_ACCURACY)
    return assignment.aspect(bounded_against, ok)


def _casts(weights: torch.Tensor, logits_dtype: torch.dtype) -> list[tuple[torch.dtype, torch.Tensor]]:
    """(dtype, bool [B]) for each 16-bit dtype the rows' weights may have been cast to: the logits' own (a model's
    code casts back to it), and any other whose values hold every weight of the row exactly (the trace a cast
    leaves); with fp32 logits, only rows whose weights all lie in the dtype."""
    out = []
    for dtype in sorted(_CAST_CODE, key=lambda d: d != logits_dtype):
        rows_cast = (weights.to(dtype).float() == weights).all(1)  # NaN rows: not a cast (NaN != NaN), left to the rules
        if dtype == logits_dtype:
            rows_cast = torch.ones_like(rows_cast)
        out.append((dtype, rows_cast))
    return out


def _read_casts(alternatives: _Counterfactuals, assignment: _WeightsAssignment) -> None:
    """The contract's own weights, cast: first, so no rule claims a row only because rounding made it look broken
    (bf16 top-1 weights round to the 1.0 a renormalized one has, hf-llama4; bf16 top-2 ones can sum to exactly 1/2,
    hf-jamba's row 460: ``tests/compare/test_attribution.py::test_weights_rounded_to_the_logits_dtype_are_a_cast``)."""
    for dtype, rows_cast in alternatives.casts:
        cast = weights_close(alternatives.rows.actual_weights, alternatives.reference.to(dtype).float(), alternatives.contract).all(1)
        assignment.assign(rows_cast & cast, "weight_accuracy", _CAST_CODE[dtype])


def _read_division_guards(alternatives: _Counterfactuals, assignment: _WeightsAssignment) -> list[tuple[torch.Tensor, int]]:
    """``renorm_guard``: the division rule broken (a sum divided that the contract does not divide, the epsilon missing
    or added, a guard where the contract has none). Returns the division rule's counterfactuals, (weights, code), for
    ``_read_division_in_narrow_arithmetic``."""
    if not alternatives.renormalize:
        return []
    contract, total = alternatives.contract, alternatives.chosen.sum(1)
    guards = []
    if contract.renormalize != "raw":
        raw = alternatives.under(contract.replace(renormalize="raw"))
        _read_guard_ignored(alternatives, assignment, raw, total)
        guards.append((raw, R_EPS_MISSING))
    if contract.renormalize != "eps":
        eps = alternatives.under(contract.replace(renormalize="eps", renorm_eps=1e-20))
        _read_epsilon_added(alternatives, assignment, eps)
        guards.append((eps, R_EPS_ADDED))
    if contract.renormalize in ("eps", "raw"):
        _read_guard_added(alternatives, assignment, total)
    return guards


def _read_guard_ignored(alternatives: _Counterfactuals, assignment: _WeightsAssignment, raw: torch.Tensor, total: torch.Tensor) -> None:
    """A sum the contract's guard (or epsilon) does not divide by, divided anyway: NaN or inf weights
    (``tests/compare/test_attribution.py`` plants ``zero_sum_divided``, ``serial_zero_sum``, vLLM's torch paths in
    ``unsorted_and_zero_sum`` and ``declared_order_hides_no_guard``); the raw sum where the contract adds its epsilon
    (a tiny sum) is the division rule, not a factor."""
    unguarded = ~(total > 0) & alternatives.close_to(raw) & ~weights_close(raw, alternatives.reference, alternatives.contract).all(1)
    assignment.assign(unguarded, "renorm_guard", R_GUARD_DIVIDED)
    assignment.assign(alternatives.explains(raw) & torch.isfinite(raw).all(1), "renorm_guard", R_EPS_MISSING)
    not_finite = ~torch.isfinite(alternatives.rows.actual_weights).all(1) & torch.isfinite(alternatives.reference).all(1)
    assignment.assign(~(total > 0) & not_finite, "renorm_guard", R_GUARD_DIVIDED)


def _read_epsilon_added(alternatives: _Counterfactuals, assignment: _WeightsAssignment, eps: torch.Tensor) -> None:
    """The sum plus the engines' epsilon (1e-20) where the contract divides by the raw sum: a sum of underflowed
    sigmoids then divides to nearly nothing. Before the renormalization flag, whose counterfactual (the raw sigmoids)
    lies within atol of such weights too (``tests/compare/test_attribution.py`` plant ``epsilon_added_to_a_tiny_sum``)."""
    assignment.assign(alternatives.explains(eps) & torch.isfinite(eps).all(1), "renorm_guard", R_EPS_ADDED)


def _read_guard_added(alternatives: _Counterfactuals, assignment: _WeightsAssignment, total: torch.Tensor) -> None:
    """A guard where the contract has none: a sum that is not > 0 (NaN, zero, negative) left undivided where the
    contract divides it, as SGLang's Triton router does on a row with NaN chosen (its weights then are the sigmoids
    themselves, not the contract's NaN). Before the renormalization flag, whose counterfactual is the same weights:
    the flag holds on every other row, and the guard is what to fix (``tests/compare/test_attribution.py`` plants
    ``nan_sum_left_undivided``, ``nan_sum_left_undivided_nan_rule_declared``)."""
    undivided = alternatives.formula(alternatives.chosen, renormalize=False)
    assignment.assign(~(total > 0) & alternatives.explains(undivided), "renorm_guard", R_GUARD_ADDED)


def _read_bias_in_weight(alternatives: _Counterfactuals, assignment: _WeightsAssignment) -> None:
    """The weights built from sig + bias. An all-zero bias gives the same weights; NaN or infinite biases make both
    formulas NaN: that coincidence is not evidence of the bias in the weights."""
    with_bias = alternatives.formula(at(alternatives.rows.ranking, alternatives.rows.actual_ids))
    assignment.assign(alternatives.explains(with_bias) & torch.isfinite(with_bias).all(1), "bias_in_weight", R_BIAS)


def _read_per_expert_scale(alternatives: _Counterfactuals, assignment: _WeightsAssignment) -> None:
    """The per-expert scale is the last multiplication of the scaling step: left out, folded in before the
    renormalization (which then divides part of it away), taken by output slot instead of by expert id, or twice."""
    k, scale, slot_scale = alternatives.chosen.shape[1], alternatives.expert_scale, alternatives.slot_scale
    by_slot = scale.to(alternatives.rows.actual_ids.device).float()[:k].expand_as(slot_scale) if k <= scale.numel() else slot_scale
    for alternative, why in ((alternatives.scaled_by(alternatives.chosen, None), R_SCALE_IGNORED),
                             (alternatives.scaled_by(alternatives.chosen * slot_scale, None), R_SCALE_BEFORE_RENORM),
                             (alternatives.scaled_by(alternatives.chosen, by_slot), R_SCALE_BY_SLOT),
                             (alternatives.scaled_by(alternatives.chosen, slot_scale * slot_scale), R_SCALE_TWICE)):  # fmt: skip
        assignment.assign(alternatives.explains(alternative), "scaling", why)


def _weight_rules(alternatives: _Counterfactuals) -> list[tuple[torch.Tensor, str, int]]:
    """The rules, each as the weights a router breaking only it gives (with the contract's scaling): the
    renormalization flag not followed, the set a softmax runs over."""
    flipped = alternatives.formula(alternatives.chosen, renormalize=not alternatives.renormalize)
    rules = [(flipped, "renormalization", R_NOT_RENORMALIZED if alternatives.renormalize else R_RENORMALIZED)]
    logits, actual = alternatives.rows.logits, alternatives.rows.actual_ids
    if alternatives.contract.scoring == "softmax":  # a softmax over the k chosen logits (with renormalize, the same as the contract's)
        rules.append((alternatives.formula(torch.softmax(at(logits, actual), dim=1)), "softmax_scope", R_SOFTMAX_OF_CHOSEN))
    elif alternatives.contract.scoring == "softmax_of_topk":  # a softmax over all E logits, taken at the chosen ones
        full = torch.softmax(torch.nan_to_num(logits, nan=-math.inf), dim=1).gather(1, actual)
        if alternatives.renormalize:
            full = full / full.sum(1, keepdim=True)
        rules.append((full * alternatives.scaling_factor, "softmax_scope", R_SOFTMAX_OF_ALL))
    return rules


def _read_rules(alternatives: _Counterfactuals, assignment: _WeightsAssignment, rules: list[tuple[torch.Tensor, str, int]]) -> None:
    """Each rule alone, or two at once: with softmax scores and renormalize off, renormalizing is a softmax over the k
    chosen, and both are named."""
    matches = [(alternatives.explains(alternative), name, why) for alternative, name, why in rules]
    for i, (hit, name, why) in enumerate(matches):
        for hit2, name2, why2 in matches[i + 1 :]:
            assignment.assign(hit & hit2, name, why, name2, why2)
        assignment.assign(hit, name, why)


def _read_division_in_narrow_arithmetic(alternatives: _Counterfactuals, assignment: _WeightsAssignment,
                                        guards: list[tuple[torch.Tensor, int]]) -> torch.Tensor:  # fmt: skip
    """The division rule in a narrower arithmetic: weights within 2^-4 of a guard's counterfactual that lies far from
    the contract's weights (a tiny sum, which the epsilon dwarfs or does not), as a router that takes its sigmoids and
    their sum in bf16 and divides by the raw sum gives (vLLM's torch router, vllm-torch under deepseek-v3). Otherwise
    the "any other constant" rule names scaling, a factor of about 1e16 that no kernel engineer would look for. The
    division is the rule to fix; the rest is the arithmetic's, so the row breaks weight_accuracy too, bounded against
    the counterfactual: a declared weight_accuracy may excuse the arithmetic, never the division
    (``tests/compare/test_attribution.py`` plants ``raw_sum_in_bf16_arithmetic``, ``declared_guard_hides_no_arithmetic``
    and ``test_a_declared_guard_and_accuracy_bound_the_weights_from_the_guards_counterfactual``). Returns what a
    declared weight_accuracy's bound is measured from, per row."""
    bounded_against = alternatives.reference
    for alternative, why in guards:
        far = ~broadcast_isclose(alternative, alternatives.reference, rtol=0.5, atol=alternatives.contract.weight_atol, equal_nan=True).all(1)
        near = broadcast_isclose(alternatives.rows.actual_weights, alternative, rtol=_NARROW_ARITHMETIC, atol=alternatives.contract.weight_atol).all(1)
        hit = assignment.todo & far & near & torch.isfinite(alternative).all(1)
        assignment.assign(hit, "renorm_guard", why, "weight_accuracy", R_ACCURACY)
        bounded_against = torch.where(hit.unsqueeze(1), alternative, bounded_against)
    return bounded_against


def known_factors(k: int, scaling_factor: float) -> list[float]:
    """The constants a weight is known to be off by: the scaling factor once too often or too few, 1/k, k."""
    rsf = scaling_factor
    out = {rsf, 1 / rsf, rsf * rsf, 1 / (rsf * rsf), float(k), 1 / k, rsf / k, k / rsf, rsf * k, 1 / (rsf * k)}
    return sorted(f for f in out if abs(f - 1.0) > 1e-6)


def _read_known_factors(alternatives: _Counterfactuals, assignment: _WeightsAssignment, rules: list[tuple[torch.Tensor, str, int]]) -> None:
    """A constant factor: the scaling factor applied twice or not at all, 1/k, ... alone or beside a rule. Every factor
    and rule at once, [F, 1 + rules, B] (one at a time, these compares were most of a failing row's blame), then
    assigned in the order of the factors, each alone before each rule beside it."""
    factors = known_factors(alternatives.chosen.shape[1], alternatives.scaling_factor)
    if not factors or not bool(assignment.todo.any()):
        return
    reference = alternatives.reference
    by_factor = torch.tensor(factors, dtype=reference.dtype, device=reference.device).view(-1, 1, 1, 1)
    scaled = torch.stack([reference, *(alternative for alternative, _, _ in rules)]) * by_factor
    hits = alternatives.close_to(scaled)
    hits[:, 1:] &= alternatives.differs(scaled[:, 1:])
    for i, factor in enumerate(factors):
        assignment.assign(hits[i, 0], "scaling", R_FACTOR, by=factor)
        for j, (_, name, why) in enumerate(rules, start=1):
            assignment.assign(hits[i, j], name, why, "scaling", R_FACTOR, by=factor)


def _read_any_constant(alternatives: _Counterfactuals, assignment: _WeightsAssignment) -> None:
    """Any other constant, the same for every weight of the row (at least two of them nonzero), at least 10 % off:
    closer to 1 it is more likely an accuracy problem (a sum rounded in bf16, say) than a factor applied."""
    reference, actual = alternatives.reference, alternatives.rows.actual_weights
    usable = torch.isfinite(reference) & (reference.abs() > 1e-30) & torch.isfinite(actual)
    ratio = torch.where(usable, actual / torch.where(usable, reference, torch.ones_like(reference)), torch.zeros_like(reference))
    several = usable.sum(1) >= 2
    mean = ratio.sum(1) / usable.sum(1).clamp(min=1)
    constant = several & torch.isfinite(mean) & ((mean.log().abs()) > math.log(1.1)) & alternatives.close_to(reference * mean.unsqueeze(1))
    assignment.assign(constant, "scaling", R_FACTOR, by=mean)
