"""The comparison itself, table-driven: one planted output per clause and reason (array-api-tests' meta-test style).

Each case builds inputs, takes the oracle's answer, plants one defect in it
and checks the verdict, the primary clause, every clause the row breaks and
a word of the reason. The reference inside is the oracle plus a plain edit
of its answer, so a wrong attribution cannot hide behind shared code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Callable

import pytest
import torch

import oracle
from contracts.cases.build import Case
from contracts.cases.spec import CaseSpec
from contracts.compare import compare_case, expected_for


def _case(x, bias, topk, *, renormalize=True, rsf=1.0, groups=(1, 1)) -> Case:
    spec = CaseSpec("unit", 0, x.shape[0], x.shape[1], topk, *groups)
    return Case(spec, x, bias, renormalize, rsf)


def _answer(case, contract):
    exp = expected_for(case, oracle.get_contract(contract))
    return exp, exp.weights.clone(), exp.ids.clone()


def _view(exp):
    """The oracle's answer with its values for every row, for the plants to edit."""
    v = exp.values(torch.arange(exp.ids.shape[0]))
    return SimpleNamespace(weights=exp.weights, ids=exp.ids, ranking=v.ranking, scores=v.scores, selection=v.selection)


def _random(rows=2, experts=64, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, experts, generator=g) * 2).to(dtype), torch.randn(experts, generator=g) * 0.05


@dataclass
class Plant:
    name: str
    contract: str
    make: Callable  # () -> (case, plant(w, ids, exp) -> (w, ids) or a full answer)
    verdict: str
    primary: str | None
    also: tuple[str, ...] = ()
    reason: str = ""
    declared: tuple[str, ...] = ()


def _rows_case(contract, topk=8, **kw):
    x, b = _random(**kw)
    return _case(x, b, topk)


def _swap(t, i, j):
    t = t.clone()
    t[:, [i, j]] = t[:, [j, i]]
    return t


def _scaled(factor):
    def plant(w, ids, exp):
        return w * factor, ids

    return plant


def _reversed(w, ids, exp):
    return w.flip(1), ids.flip(1)


def _replace_last(w, ids, exp):
    ids = ids.clone()
    ranking = exp.ranking.clone()
    ranking.scatter_(1, ids.long(), math.inf)
    worst = ranking.argmin(1)  # the expert ranked last of all: far below the cutoff
    ids[:, -1] = worst.to(ids.dtype)
    return w, ids


def _bias_in_weight(w, ids, exp):
    r = exp.ranking.gather(1, ids.long())
    return r / r.sum(1, keepdim=True), ids


def _unnormalized(w, ids, exp):
    return exp.scores.gather(1, ids.long()), ids


def _zero_sum_case(contract):
    experts = 64
    x = torch.full((1, experts), -120.0)  # every sigmoid exactly 0
    b = torch.randperm(experts, generator=torch.Generator().manual_seed(1)).float() / experts
    return _case(x, b, 8)


def _tiny_sum_case(contract):
    x = torch.full((1, 64), -4.0)
    x[0, :8] = -88.5 + torch.arange(8.0) * 0.1  # the eight largest ranking values: subnormal sigmoids, 3e-39 to 8e-39
    b = torch.zeros(64)
    b[:8] = 1.0
    return _case(x, b, 8)


def _epsilon_added(w, ids, exp):
    s = exp.scores.gather(1, ids.long())
    return s / (s.sum(1, keepdim=True) + 1e-20), ids


def _divide_by_zero(w, ids, exp):
    s = exp.scores.gather(1, ids.long())
    return s / s.sum(1, keepdim=True), ids


def _raw_sum_in_bf16_arithmetic(w, ids, exp):
    """A tiny sum divided without the contract's 1e-20, with the error of bf16 sigmoids and sums on top (2^-6,
    alternating), as vLLM's torch router divides."""
    w, ids = _divide_by_zero(w, ids, exp)
    wobble = 1.0 + 2.0**-6 * (1 - 2 * (torch.arange(w.shape[1]) % 2))
    return w * wobble, ids


def _all_equal_case(contract):
    return _case(torch.zeros(1, 64), torch.zeros(64), 8)


def _nan_taken_undivided(w, ids, exp):
    """NaN experts chosen first (torch.topk's order), and their weights left undivided: the sum is NaN, not > 0, and a
    guard skips the division (SGLang's Triton router under deepseek-v3)."""
    ids = torch.cat([torch.tensor([[40, 41]]), ids[:, :-2]], 1).to(ids.dtype)
    return exp.scores.gather(1, ids.long()), ids


def _other_tied(w, ids, exp):
    chosen = set(ids[0].tolist())
    spare = next(e for e in range(64) if e not in chosen)
    ids = ids.clone()
    ids[0, -1] = spare
    return _own_weights(ids, exp), ids


def _nan_case(contract):
    x = torch.full((1, 64), math.nan)
    x[0, :5] = torch.tensor([1.0, 2.0, 3.0, 0.5, -1.0])
    return _case(x, torch.zeros(64), 8)


def _nan_over_number(w, ids, exp):
    ids = ids.clone()
    ids[0, 0] = 40  # a NaN expert in the first slot, displacing the best number
    return w, ids


def _near_case(contract):
    # Two experts whose ranking values are 1 ULP apart at the cutoff: faithful sigmoids may swap them.
    x = torch.linspace(-3.0, -1.0, 64).unsqueeze(0)
    b = torch.zeros(64)
    case = _case(x, b, 8)
    exp = _view(expected_for(case, oracle.get_contract(contract)))
    cut = exp.ids[0, -1].item()
    s = exp.ranking[0, cut].item()
    nxt = torch.nextafter(torch.tensor(s), torch.tensor(-1.0)).item()
    below = [e for e in range(64) if e not in exp.ids[0].tolist()]
    neighbour = max(below, key=lambda e: exp.ranking[0, e].item())
    b[neighbour] = nxt - exp.ranking[0, neighbour].item()  # put the neighbour one ULP under the cutoff
    return _case(x, b, 8)


def _swap_cutoff_neighbour(w, ids, exp):
    chosen = ids[0].tolist()
    below = [e for e in range(exp.ranking.shape[1]) if e not in chosen]
    neighbour = max(below, key=lambda e: exp.ranking[0, e].item())
    ids = ids.clone()
    ids[0, -1] = neighbour
    return _own_weights(ids, exp), ids


def _own_weights(ids, exp, contract="aiter", renormalize=True, rsf=1.0):
    """What a faithful router gives for its own choice of experts."""
    chosen = exp.scores.gather(1, ids.long())
    return oracle.weights_from(chosen, contract=contract, renormalize=renormalize, routed_scaling_factor=rsf)


def _signed_zero_tie_case(contract):
    # Issue 23 item 3: equal logits, biases -0.0 and +0.0: one exact tie, whatever the sign of the zero.
    x = torch.full((1, 64), -3.0)
    x[0, 10] = x[0, 20] = 1.0
    x[0, :7] = 4.0
    b = torch.zeros(64)
    b[20] = -0.0
    return _case(x, b, 8)


def _lower_index_of_the_tie(w, ids, exp):
    ids = ids.clone()
    tied = [10, 20]
    slot = next(j for j in range(ids.shape[1]) if ids[0, j].item() in tied)
    ids[0, slot] = 10 if ids[0, slot].item() == 20 else 20
    return _own_weights(ids, exp), ids


def _signed_zero_apart_case(contract):
    # gpt-oss ranks the logits themselves: every logit a zero, the even experts' -0.0, one 64-way exact tie
    x = torch.zeros(1, 64)
    x[0, ::2] = -0.0
    return _case(x, None, 8, renormalize=False)  # gpt-oss never renormalizes (its only admitted option)


def _minus_zero_ranked_lower(w, ids, exp):
    below = torch.nextafter(torch.tensor(0.0), torch.tensor(-1.0))
    negative = torch.zeros(1, 64, dtype=torch.bool)
    negative[0, ::2] = True  # the -0.0 logits
    ids = oracle.select_ids(torch.where(negative, below, exp.selection), ids.shape[1], contract="gpt-oss")
    return _own_weights(ids, exp, contract="gpt-oss"), ids


def _all_zeros_chosen_case(contract):
    x = torch.zeros(1, 16)
    x[0, ::2] = -0.0
    return _case(x, None, 16, renormalize=False)  # every expert chosen: only the order can tell the signs apart


def _plus_zeros_first(w, ids, exp):
    order = sorted(range(16), key=lambda j: (ids[0, j].item() % 2 == 0, j))  # the odd experts hold +0.0
    ids = ids[:, order]
    return _own_weights(ids, exp, contract="gpt-oss"), ids


def _sigmoid_of_zeros_case(contract):
    # Found by the search: sigmoid(0) + (-0.0) and sigmoid(0) + (+0.0) are both 0.5, the same bits: a tie
    # that any tie rule may break (torch.topk took four +0.0-bias experts), never a sign
    b = torch.zeros(16)
    b[[0, 1, 2, 3, 4, 13, 14, 15]] = -0.0
    return _case(torch.zeros(1, 16).to(torch.bfloat16), b, 4, renormalize=False)


def _plus_zero_bias_first(w, ids, exp):
    ids = torch.tensor([[10, 11, 12, 9]])
    return _own_weights(ids, exp, renormalize=False), ids


def _moved_past_an_exact_tie_case(contract):
    # Found on the H200 (strided, 20M rows): experts 5 and 9 tie exactly (same logit, same bias); expert 2's
    # sigmoid(1) + bias equals their value in the oracle's arithmetic, a near tie. radix4 put expert 2 after
    # the two, which kept their order: a near tie, not a tie broken against the rule.
    x = torch.full((1, 64), -3.0)
    b = torch.zeros(64)
    x[0, [5, 9]] = 0.0
    b[[5, 9]] = 0.25
    x[0, 2] = 1.0
    b[2] = 0.75 - oracle.route_trace(torch.ones(1, 1), torch.zeros(1), 1, contract="aiter").expert_scores[0, 0]
    return _case(x, b, 8)


def _third_after_the_pair(w, ids, exp):
    order = ids[0].tolist()
    tied = [e for e in order if e in (2, 5, 9)]
    assert exp.ranking[0, 2] == exp.ranking[0, 5] == 0.75, exp.ranking[0, [2, 5, 9]]
    moved = [e for e in tied if e != 2] + [2]
    assert moved != tied, tied  # the aiter priority puts expert 2 first among the three
    slots = [j for j, e in enumerate(order) if e in (2, 5, 9)]
    for j, e in zip(slots, moved):
        order[j] = e
    ids = torch.tensor([order])
    return _own_weights(ids, exp), ids


def _sum_meets_a_zero_case(contract):
    # Found by the search: expert 8's sigmoid(1) + bias lands exactly on 0.5, the value of the zero-logit
    # experts; a faithful sigmoid(1) may round another way, so taking expert 8 instead is a near tie.
    x = torch.zeros(1, 16)
    x[0, [0, 3, 6, 8, 10, 11, 13, 14]] = torch.tensor([-1.3515625, 0.7890625, -1.0703125, 1.0, 3.546875, -2.140625, 1.8203125, -0.90625])
    x[0, [1, 2, 4, 5, 7, 9, 12, 15]] = -0.0
    b = torch.zeros(16)
    b[4:10] = 0.5 - oracle.route_trace(torch.ones(1, 1), torch.zeros(1), 1, contract="aiter").expert_scores[0, 0]
    return _case(x.to(torch.bfloat16), b, 4, renormalize=False)


def _expert_8_for_the_zero(w, ids, exp):
    ids = ids.clone()
    assert ids[0, 3].item() == 1, ids
    ids[0, 3] = 8
    return _own_weights(ids, exp, renormalize=False), ids


def _subnormal_case(contract):
    x = torch.full((1, 64), -200.0)  # sigmoid exactly 0: the subnormal biases alone rank
    b = torch.randperm(64, generator=torch.Generator().manual_seed(3)).float().add(1) * 2.0**-149
    return _case(x, b, 8)


def _flushed(w, ids, exp):
    ftz = exp.selection.masked_fill(exp.selection.abs() < 2.0**-126, 0.0)
    ids = oracle.select_ids(ftz, ids.shape[1], contract="aiter")
    return _own_weights(ids, exp), ids


def _out_of_range(w, ids, exp):
    ids = ids.clone()
    ids[0, 3] = 10_000
    return w, ids


def _twice(w, ids, exp):
    ids = ids.clone()
    ids[0, 2] = ids[0, 1]
    return w, ids


def _few_valid_case(contract):
    b = torch.full((64,), -math.inf)
    b[[3, 9]] = torch.tensor([0.1, 0.2])
    return _case(torch.zeros(1, 64), b, 8)


def _garbage_beyond_valid(w, ids, exp):
    ids = ids.clone()
    ids[0, 5] = 33
    return w, ids


def _vllm_like(w, ids, exp):
    # an unsorted top-k and a raw division by a zero sum (vLLM's torch paths, docs/contracts.md#how-other-routers-differ)
    s = exp.scores.gather(1, ids.long())
    return (s / s.sum(1, keepdim=True)).flip(1), ids.flip(1)


def _one_above_a_tie_case(contract):
    x = torch.zeros(1, 64)
    x[0, 40] = 1.0  # expert 40 is the top-1; the other 63 tie
    return _case(x, torch.zeros(64), 8)


def _lowest_ties_without_the_top1(w, ids, exp):
    ids = torch.arange(8, dtype=ids.dtype).unsqueeze(0)  # ties to the lowest index, and expert 40 dropped
    return _own_weights(ids, exp), ids


def _serial_zero_again(w, ids, exp):
    ids = ids.clone()
    assert 0 in ids[0].tolist() and ids[0, 1].item() != 0, ids
    ids[0, 1] = 0  # expert 0 written again in place of a chosen expert
    return w, ids


def _zero_chosen_case(contract):
    x, b = _random(rows=1)
    x[0, 0] = 9.0  # expert 0 is the top-1
    return _case(x, b, 8)


def _scaled_case(contract):
    """Gemma 4's contract with a per-expert weight scale drawn as the cases draw it (distinct, in [0.25, 2))."""
    c = oracle.get_contract(contract)
    x, _ = _random(rows=3, experts=c.experts, seed=4)
    scale = 0.25 + 1.75 * torch.rand(c.experts, generator=torch.Generator().manual_seed(5))
    return Case(CaseSpec("unit", 0, 3, c.experts, c.topk, expert_scale=True), x, None, True, 1.0, scale)


def _scale_plant(how):
    """(case, plant): the contract's answer with the case's per-expert scale misapplied ``how``."""
    case = _scaled_case("gemma4")
    s = case.expert_scale

    def plant(w, ids, exp):
        own = s[ids.long()]
        if how == "ignored":
            return w / own, ids
        if how == "twice":
            return w * own, ids
        if how == "by_slot":
            return w / own * s[: ids.shape[1]], ids
        chosen = torch.softmax(case.scores.float(), 1).gather(1, ids.long()) * own  # before the renormalization
        return chosen / chosen.sum(1, keepdim=True), ids

    return case, plant


PLANTS = [
    Plant("per_expert_scale_ignored", "gemma4", lambda: _scale_plant("ignored"), "mismatch", "scaling", reason="per-expert weight scale"),
    Plant("per_expert_scale_twice", "gemma4", lambda: _scale_plant("twice"), "mismatch", "scaling", reason="applied twice"),
    Plant("per_expert_scale_by_slot", "gemma4", lambda: _scale_plant("by_slot"), "mismatch", "scaling", reason="by output slot"),
    Plant("per_expert_scale_before_renorm", "gemma4", lambda: _scale_plant("before"), "mismatch", "scaling", reason="before renormalizing"),
    Plant("exact", "aiter", lambda: (_rows_case("aiter"), lambda w, i, e: (w, i)), "exact", None),
    Plant("within_tolerance", "aiter", lambda: (_rows_case("aiter"), _scaled(1 + 2e-6)), "within_tolerance", None),
    Plant("out_of_range", "aiter", lambda: (_rows_case("aiter", rows=1), _out_of_range), "mismatch", "validity", reason="out of [0, E)"),
    Plant("twice", "aiter", lambda: (_rows_case("aiter", rows=1), _twice), "mismatch", "validity", reason="twice"),
    Plant("selection", "aiter", lambda: (_rows_case("aiter"), _replace_last), "mismatch", "selection", ("weight_accuracy",), "missing"),
    Plant("output_order", "aiter", lambda: (_rows_case("aiter"), _reversed), "mismatch", "output_order", reason="another order"),
    Plant("tie_order_set", "aiter", lambda: (_all_equal_case("aiter"), _other_tied), "mismatch", "tie_order", reason="tie priority"),
    Plant("tie_order_slots", "aiter", lambda: (_all_equal_case("aiter"), lambda w, i, e: (w, _swap(i, 0, 1))), "mismatch", "tie_order",
          reason="other priority order"),
    Plant("signed_zero_is_a_tie", "aiter", lambda: (_signed_zero_tie_case("aiter"), _lower_index_of_the_tie), "mismatch", "tie_order"),
    Plant("signed_zero_declared_tie", "aiter", lambda: (_signed_zero_tie_case("aiter"), _lower_index_of_the_tie), "expected", "tie_order",
          declared=("tie_order",)),
    Plant("signed_zero_ranked_apart", "gpt-oss", lambda: (_signed_zero_apart_case("gpt-oss"), _minus_zero_ranked_lower), "mismatch",
          "signed_zero", reason="-0.0 apart from +0.0"),
    Plant("signed_zero_behind_a_declared_tie_order", "gpt-oss", lambda: (_signed_zero_apart_case("gpt-oss"), _minus_zero_ranked_lower),
          "mismatch", "signed_zero", declared=("tie_order",)),
    Plant("signed_zero_in_the_order", "gpt-oss", lambda: (_all_zeros_chosen_case("gpt-oss"), _plus_zeros_first), "mismatch", "signed_zero"),
    Plant("equal_sigmoids_of_signed_zeros_are_a_tie", "aiter", lambda: (_sigmoid_of_zeros_case("aiter"), _plus_zero_bias_first), "mismatch",
          "tie_order"),
    Plant("moved_past_an_exact_tie_is_a_near_tie", "aiter", lambda: (_moved_past_an_exact_tie_case("aiter"), _third_after_the_pair),
          "near_tie", None),
    Plant("a_sum_equal_to_a_zero_is_no_sign", "aiter", lambda: (_sum_meets_a_zero_case("aiter"), _expert_8_for_the_zero), "near_tie", None),
    Plant("nan_over_number", "aiter", lambda: (_nan_case("aiter"), _nan_over_number), "mismatch", "nan_last", reason="NaN expert"),
    Plant("near_tie", "aiter", lambda: (_near_case("aiter"), _swap_cutoff_neighbour), "near_tie", None),
    Plant("flush_to_zero", "aiter", lambda: (_subnormal_case("aiter"), _flushed), "mismatch", "selection", reason="flush-to-zero"),
    Plant("bias_in_weight", "aiter", lambda: (_rows_case("aiter"), _bias_in_weight), "mismatch", "bias_in_weight", reason="sig + bias"),
    Plant("not_renormalized", "aiter", lambda: (_rows_case("aiter"), _unnormalized), "mismatch", "renormalization", reason="not renormalized"),
    Plant("zero_sum_divided", "aiter", lambda: (_zero_sum_case("aiter"), _divide_by_zero), "mismatch", "renorm_guard", reason="must not divide"),
    Plant("epsilon_added_to_a_tiny_sum", "aiter", lambda: (_tiny_sum_case("aiter"), _epsilon_added), "mismatch", "renorm_guard",
          reason="plus 1e-20"),
    # A tiny sum divided without the contract's 1e-20 in bf16 arithmetic: 2^-6 off the division's counterfactual, which
    # lies 1e19 off the contract's weights. It was blamed on scaling (a constant factor of 1e19, as vllm-torch under
    # deepseek-v3 on 7834d12); the division is the rule to fix, and the arithmetic breaks weight_accuracy beside it,
    # which a declared guard does not excuse.
    Plant("raw_sum_in_bf16_arithmetic", "serial", lambda: (_tiny_sum_case("serial"), _raw_sum_in_bf16_arithmetic), "mismatch",
          "renorm_guard", ("weight_accuracy",), reason="raw sum"),
    Plant("declared_guard_hides_no_arithmetic", "serial", lambda: (_tiny_sum_case("serial"), _raw_sum_in_bf16_arithmetic),
          "mismatch", "weight_accuracy", ("renorm_guard",), declared=("renorm_guard",)),
    # The sum of a row with NaN chosen left undivided where the contract divides it (to NaN weights): the guard, not the
    # renormalization flag, which every other row follows (it was blamed on renormalization on 7834d12).
    Plant("nan_sum_left_undivided", "serial", lambda: (_nan_case("serial"), _nan_taken_undivided), "mismatch", "nan_last",
          ("renorm_guard",)),
    Plant("nan_sum_left_undivided_nan_rule_declared", "serial", lambda: (_nan_case("serial"), _nan_taken_undivided), "mismatch",
          "renorm_guard", ("nan_last",), reason="not > 0", declared=("nan_last", "tie_order")),
    Plant("accuracy", "aiter", lambda: (_rows_case("aiter"), _scaled(1.01)), "mismatch", "weight_accuracy"),
    Plant("serial_zero_sum", "serial", lambda: (_zero_sum_case("serial"), _divide_by_zero), "mismatch", "renorm_guard", reason="must not divide"),
    Plant("serial_sentinel", "serial", lambda: (_few_valid_case("serial"), _garbage_beyond_valid), "mismatch", "sentinel_fallback",
          reason="beat the floor"),
    Plant("declared_tie_order_hides_no_dropped_top1", "aiter", lambda: (_one_above_a_tie_case("aiter"), _lowest_ties_without_the_top1),
          "mismatch", "selection", declared=("tie_order",)),
    Plant("serial_repeat_of_expert_0_is_invalid", "serial", lambda: (_zero_chosen_case("serial"), _serial_zero_again), "mismatch",
          "validity", reason="fallback"),
    Plant("unsorted_and_zero_sum", "aiter", lambda: (_zero_sum_case("aiter"), _vllm_like), "mismatch", "output_order", ("renorm_guard",)),
    Plant("declared_order_hides_no_guard", "aiter", lambda: (_zero_sum_case("aiter"), _vllm_like), "mismatch", "renorm_guard",
          ("output_order",), declared=("output_order",)),
]


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
def test_planted_defect_is_blamed_on_its_clause(plant: Plant):
    c = oracle.get_contract(plant.contract)
    case, edit = plant.make()
    exp, w, ids = _answer(case, c)
    w2, ids2 = edit(w, ids, _view(exp))
    out = compare_case(case, exp, (w2.float(), ids2.to(torch.int32)), c, deviations={d: "declared" for d in plant.declared})
    bad = {v: n for v, n in out.verdict_counts.items() if n}
    assert plant.verdict in bad, (bad, out.rows_detail)
    if plant.primary is None:
        assert set(bad) == {plant.verdict}, (bad, out.rows_detail)
        return
    detail = next(d for d in out.rows_detail if d["verdict"] == plant.verdict)
    assert detail["clause"] == plant.primary, detail
    assert set(plant.also) <= set(detail["clauses"] or ()), detail
    assert plant.reason in detail["reason"], detail
    counts = out.clause_rows if plant.verdict == "mismatch" else out.expected_rows
    assert counts.get(plant.primary, 0) >= 1
    for clause in (plant.primary, *plant.also):
        into = out.expected_clauses if clause in plant.declared else out.clauses_broken
        assert into.get(clause, 0) >= 1, (clause, out.clauses_broken, out.expected_clauses)


@pytest.mark.parametrize("bound, verdict", [(2.0**-4, "expected"), (2.0**-7, "mismatch")])
def test_a_declared_guard_and_accuracy_bound_the_weights_from_the_guards_counterfactual(bound, verdict):
    # Both declared (vllm-torch's divide by the raw sum, its bf16 arithmetic): the row is excused when its weights lie
    # within the declared bound of what the declared division gives, 2^-6 here, not of the contract's (1e19 away).
    from contracts.compare.tolerance import Bounded

    case = _tiny_sum_case("serial")
    c = oracle.get_contract("serial")
    exp, w, ids = _answer(case, c)
    w2, ids2 = _raw_sum_in_bf16_arithmetic(w, ids, _view(exp))
    declared = {"renorm_guard": "divides by the raw sum", "weight_accuracy": Bounded("bf16 arithmetic", bound)}
    out = compare_case(case, exp, (w2.float(), ids2.to(torch.int32)), c, deviations=declared)
    assert {v for v, n in out.verdict_counts.items() if n} == {verdict}, (out.verdict_counts, out.rows_detail)


def test_a_flushed_subnormal_is_no_near_tie():
    """Issue 22 item 4: near ties near a sigmoid of 0 are bounded by what real sigmoids can differ by."""
    case = _subnormal_case("aiter")
    c = oracle.get_contract("aiter")
    exp, w, ids = _answer(case, c)
    _, flushed = _flushed(w, ids, _view(exp))
    assert not torch.equal(flushed, ids)  # the plant does change the answer
    out = compare_case(case, exp, (w, flushed), c, deviations={})
    assert out.verdict_counts["near_tie"] == 0 and out.verdict_counts["mismatch"] == 1


def test_a_tensor_subclass_that_lies_is_compared_as_a_plain_tensor():
    """Issue 22 item 5: outputs are compared as plain tensors, whatever their ``==`` says."""

    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.Tensor.__eq__, torch.isclose, torch.eq, torch.equal):
                shape = args[0].shape
                return torch.ones(shape, dtype=torch.bool)
            return super().__torch_function__(func, types, args, kwargs or {})

    case = _rows_case("aiter")
    c = oracle.get_contract("aiter")
    exp, w, ids = _answer(case, c)
    wrong = (w.flip(1) * 3).as_subclass(Liar), ids.flip(1).as_subclass(Liar)
    out = compare_case(case, exp, wrong, c, deviations={})
    assert out.verdict_counts["mismatch"] == case.spec.rows


def test_bias_all_zero_is_never_bias_in_weight():
    """Issue 22 item 17: with a zero bias sig and sig + bias give the same weights; no bias_in_weight blame."""
    x, _ = _random()
    case = _case(x, torch.zeros(64), 8)
    c = oracle.get_contract("aiter")
    exp, w, ids = _answer(case, c)
    out = compare_case(case, exp, (w * 1.01, ids), c, deviations={})
    assert "bias_in_weight" not in out.clause_rows and out.clause_rows.get("weight_accuracy") == case.spec.rows


# ---------------------------------------------------------------- the shared expert slot (issue 35)

SHARED = oracle.get_contract("kimi-k2").replace(name="kimi-k2-shared", shared_expert_slot="last")


@pytest.mark.parametrize("edit, clause, reason", [
    (lambda w, ids: (w, ids), None, ""),
    (lambda w, ids: (w, ids.index_fill(1, torch.tensor([8]), 383)), "validity", "shared expert, id E"),
    (lambda w, ids: (w.index_fill(1, torch.tensor([8]), 0.0), ids), "weight_accuracy", "shared expert's weight"),
    (lambda w, ids: (torch.cat((w[:, :8], w[:, 8:] * 2.5), 1), ids), "scaling", "shared expert's weight"),
    # routed weights not renormalized, the shared weight their own sum / rsf: the routed clause, nothing of the slot
    (None, "renormalization", "not renormalized"),
])  # fmt: skip
def test_the_shared_slot_is_compared(edit, clause, reason):
    x, b = _random(rows=3, experts=384, seed=9)
    case = Case(CaseSpec("unit", 0, 3, 384, 8), x, b, True, 2.5)
    exp = expected_for(case, SHARED)
    w, ids = exp.weights.clone(), exp.ids.clone()
    assert w.shape == (3, 9) and (ids[:, 8] == 384).all()
    if edit is None:
        routed, _ = oracle.route(x, b, 8, renormalize=False, routed_scaling_factor=2.5, contract="kimi-k2")
        w = torch.cat((routed, (routed.sum(1, keepdim=True) / 2.5)), 1)
    else:
        w, ids = edit(w, ids)
    out = compare_case(case, exp, (w, ids), SHARED, deviations={})
    if clause is None:
        assert out.verdict_counts["exact"] == 3, out.verdict_counts
        return
    assert out.verdict_counts["mismatch"] == 3 and set(out.clause_rows) == {clause}, (out.clause_rows, out.rows_detail)
    assert reason in out.rows_detail[0]["reason"], out.rows_detail[0]
    assert compare_case(case, exp, (w[:, :8], ids[:, :8]), SHARED, deviations={}).clause_rows == {"validity": 3}  # no slot at all


# ---------------------------------------------------------------- weights cast to a 16-bit dtype (issue 35's hf-jamba)
# A model's code that casts the weights back to the logits' bf16 gives the contract's weights rounded: that is a
# cast (weight_accuracy, which such a candidate declares), even on rows where the rounding makes them look like
# another rule. The other way stays closed: a rule really broken keeps its name with bf16 weights too.


def _jamba_row_460():
    """hf-jamba's row 460 of random_bf16:845177620:1024: its bf16 top-2 weights sum to exactly 1/2."""
    from contracts.cases import build_case
    from contracts.cases.spec import admitted_fields

    c = oracle.get_contract("jamba")
    whole = build_case(CaseSpec("random_bf16", 845177620, 1024, c.experts, c.topk, bias=False, **admitted_fields(c.admitted_options())))
    return Case(CaseSpec("unit", 0, 1, c.experts, c.topk), whole.scores[460:461], None, whole.renormalize, whole.routed_scaling_factor)


def _llama4_near_one():
    """bf16 top-1 logits whose sigmoid is above 1 - 2^-9: cast to bf16, the weight is exactly 1.0."""
    x = torch.full((4, 16), -1.0)
    x[:, 3] = torch.tensor([6.5, 7.0, 8.0, 12.0])
    return _case(x.to(torch.bfloat16), None, 1, renormalize=False)


def _bf16_case(contract, rows=64, renormalize=True, rsf=1.0):
    c = oracle.get_contract(contract)
    x, b = _random(rows=rows, experts=c.experts, seed=11)
    return _case(x.to(torch.bfloat16), b if c.has_bias else None, c.topk, renormalize=renormalize, rsf=rsf,
                 groups=(c.n_group, c.topk_group) if c.is_grouped else (1, 1))  # fmt: skip


def _bf16(w):
    return w.to(torch.bfloat16).float()


@pytest.mark.parametrize("contract, make", [
    ("jamba", _jamba_row_460),
    ("llama4", _llama4_near_one),
    ("qwen3-moe", lambda: _bf16_case("qwen3-moe")),
    ("deepseek-v3", lambda: _bf16_case("deepseek-v3", rsf=2.5)),
    # fp32 logits, weights that all lie in bf16: the candidate's own dtype
    ("qwen3-moe", lambda: _case(_random(rows=64, experts=128, seed=12)[0], None, 8)),
])  # fmt: skip
def test_weights_rounded_to_the_logits_dtype_are_a_cast(contract, make):
    c = oracle.get_contract(contract)
    case = make()
    exp, w, ids = _answer(case, contract)
    if contract == "jamba":  # the row the attribution once named renormalized, then divided by k
        assert _bf16(w).sum().item() == 0.5 and not torch.equal(_bf16(w), w)
    if contract == "llama4":
        assert (_bf16(w) == 1.0).all() and (w < 1.0).all()
    out = compare_case(case, exp, (_bf16(w), ids), c, deviations={})
    assert out.verdict_counts["mismatch"] >= 1 and set(out.clauses_broken) == {"weight_accuracy"}, (out.clauses_broken, out.rows_detail)
    assert all("rounded to bf16" in d["reason"] for d in out.rows_detail), out.rows_detail
    # declared, the cast passes (hf-jamba and hf-llama4 declare weight_accuracy and nothing of renormalization)
    declared = compare_case(case, exp, (_bf16(w), ids), c, deviations={"weight_accuracy": "cast"})
    assert declared.verdict_counts["mismatch"] == 0, declared.clauses_broken


def _own(contract, case, ids, renormalize, rsf):
    """The contract's weights of ``ids`` with another renormalize flag or factor (fp32)."""
    scores = expected_for(case, oracle.get_contract(contract)).values(torch.arange(case.spec.rows)).scores
    return oracle.weights_from(scores.gather(1, ids.long()), contract=contract, renormalize=renormalize,
                               routed_scaling_factor=rsf, logits_dtype=case.scores.dtype)  # fmt: skip


@pytest.mark.parametrize("contract, rsf, broken, clause", [
    ("qwen3-moe", 1.0, lambda w, ids, case: _bf16(w) / ids.shape[1], "scaling"),  # cast, then divided by k
    ("qwen3-moe", 1.0, lambda w, ids, case: _bf16(w / ids.shape[1]), "scaling"),  # divided by k, then cast
    ("jamba", 1.0, lambda w, ids, case: _bf16(w) / ids.shape[1], "scaling"),
    ("deepseek-v3", 2.5, lambda w, ids, case: _bf16(w * 2.5), "scaling"),  # the factor twice
    ("deepseek-v3", 2.5, lambda w, ids, case: _bf16(w / 2.5), "scaling"),  # no factor
    ("qwen3-moe", 1.0, lambda w, ids, case: _bf16(_own("qwen3-moe", case, ids, False, 1.0)), "renormalization"),
    ("deepseek-v3", 2.5, lambda w, ids, case: _bf16(_own("deepseek-v3", case, ids, False, 2.5)), "renormalization"),
    ("llama4", 1.0, lambda w, ids, case: _bf16(_own("llama4", case, ids, True, 1.0)), "renormalization"),  # top-1: all 1.0
])  # fmt: skip
def test_a_weight_rule_broken_in_bf16_keeps_its_name(contract, rsf, broken, clause):
    c = oracle.get_contract(contract)
    renormalize = contract != "llama4" and contract != "jamba"
    case = _bf16_case(contract, renormalize=renormalize, rsf=rsf) if contract != "llama4" else _case(
        _random(rows=64, experts=16, seed=3)[0].to(torch.bfloat16), None, 1, renormalize=False)
    exp, w, ids = _answer(case, contract)
    out = compare_case(case, exp, (broken(w, ids, case), ids), c, deviations={"weight_accuracy": "a bf16 cast"})
    assert out.verdict_counts["mismatch"] >= case.spec.rows // 2, (out.verdict_counts, out.clauses_broken)
    assert max(out.clause_rows, key=out.clause_rows.get) == clause, (out.clause_rows, out.rows_detail[:2])


def _one_group_short_case(second: tuple[float, float]):
    """mistral4 (softmax, 4 groups of 32, 2 kept, mask 0.0, top-4): group 2 holds four large probabilities, group 0
    the best of the rest (0.0429, its top-2 sum 0.0517 just above group 1's ``second``), group 1 ``second``."""
    p = torch.full((1, 128), 1e-9)
    p[0, 64:68] = torch.tensor([0.06, 0.055, 0.05, 0.036])
    p[0, 0:2] = torch.tensor([0.0429, 0.0088])
    p[0, 32:34] = torch.tensor(second)
    return _case(p.log(), None, 4, groups=(4, 2))


def _top_four_of_group_2(w, ids, exp):
    ids = torch.tensor([[64, 65, 66, 67]], dtype=ids.dtype)
    return _own_weights(ids, exp, "mistral4"), ids


@pytest.mark.parametrize("second, clause", [((0.031, 0.0205), "group_selection"), ((0.001, 0.001), "selection")])
def test_a_group_kept_in_place_of_a_near_tied_one_is_group_selection(second, clause):
    # Keeping group 1 for group 0 (top-2 sums 0.0515 and 0.0517, a bf16 flip) takes no expert of a dropped group: the
    # four best of group 2 beat group 1's. It was blamed on selection (hf-mistral4, a random_bf16 row, 2^-2.55 past
    # the cutoff); with group 1 far below group 0 the same answer is no group rule's.
    c = oracle.get_contract("mistral4")
    case = _one_group_short_case(second)
    exp, w, ids = _answer(case, c)
    assert exp.ids[0].sort().values.tolist() == [0, 64, 65, 66]
    w2, ids2 = _top_four_of_group_2(w, ids, _view(exp))
    out = compare_case(case, exp, (w2.float(), ids2.to(torch.int32)), c, deviations={})
    detail = next(d for d in out.rows_detail if d["verdict"] == "mismatch")
    assert detail["clause"] == clause, detail


@pytest.mark.parametrize("bound, verdict", [(2.0**-6, "expected"), (2.0**-10, "mismatch")])
def test_a_declared_group_selection_excuses_groups_only_within_its_bound(bound, verdict):
    # The bf16 flip above (group sums 0.0515 and 0.0517, 2^-8 apart relative): excused by a declaration bounded at
    # 2^-6, not at 2^-10. Before, a declared group_selection or group_mask excused groups of any score.
    from contracts.compare.tolerance import Bounded

    c = oracle.get_contract("mistral4")
    case = _one_group_short_case((0.031, 0.0205))
    exp, w, ids = _answer(case, c)
    w2, ids2 = _top_four_of_group_2(w, ids, _view(exp))
    declared = {"group_selection": Bounded("bf16 group sums", bound)}
    out = compare_case(case, exp, (w2.float(), ids2.to(torch.int32)), c, deviations=declared)
    assert {v for v, n in out.verdict_counts.items() if n} == {verdict}, (out.verdict_counts, out.rows_detail)


def _one_finite_expert_groups_case(second_of_group_1: float):
    """deepseek-v3 (8 groups of 32, 4 kept, top-8): six finite experts, the rest biased to -inf. Groups 2 and 5 hold
    two each (finite scores); groups 1 and 7 one (score -inf, as every empty group's) unless group 1 gets a second
    finite expert, ``second_of_group_1`` (None: none)."""
    x = torch.zeros(1, 256)
    b = torch.full((256,), -math.inf)
    for expert, logit in ((56, 2.8), (73, 0.2), (67, -0.8), (162, 1.6), (187, 0.3), (228, 0.25)):
        x[0, expert], b[expert] = logit, 0.0
    if second_of_group_1 is not None:
        x[0, 57], b[57] = second_of_group_1, 0.0
    return _case(x, b, 8, groups=(8, 4))


@pytest.mark.parametrize("second, clause", [(None, "group_tie_order"), (2.5, "selection")])
def test_a_group_of_minus_inf_score_kept_in_place_of_a_tied_one_is_group_tie_order(second, clause):
    # sglang-torch under deepseek-v3, few_valid: groups 0, 1, 3, 4, 6, 7 all score -inf; the contract keeps 0 and 1
    # (lowest index) and takes expert 56 of group 1, torch.topk kept two others and took -inf experts of group 5. It
    # was blamed on selection (38 rows of a 3,000-row check, declared group_tie_order and tie_order). With group 1
    # scoring a number, the same answer drops a group above the others: selection.
    c = oracle.get_contract("deepseek-v3")
    case = _one_finite_expert_groups_case(second)
    exp, w, ids = _answer(case, c)
    assert 56 in exp.ids[0].tolist()
    ids2 = torch.tensor([[162, 73, 187, 67, 160, 161, 163, 164]])
    w2 = _own_weights(ids2, _view(exp), "deepseek-v3")
    out = compare_case(case, exp, (w2.float(), ids2.to(torch.int32)), c, deviations={})
    detail = next(d for d in out.rows_detail if d["verdict"] == "mismatch")
    assert detail["clause"] == clause, detail


def _lmdeploy_nan_row():
    """deepseek-v3, row 2 of the nan_sparse case of lmdeploy-torch's failing rows: every group holds NaN (seven of
    them at the top of their group); the contract (NaN last) keeps groups 0, 2, 3, 7 by their numbers and takes eight
    numbers."""
    import dataclasses

    from contracts.cases.build import build_case
    from contracts.run.options import parse_replay

    spec = dataclasses.replace(parse_replay("nan_sparse:1513419790:64", 256, 8), n_group=8, topk_group=4)
    case = build_case(spec)
    return Case(dataclasses.replace(spec, rows=1), case.scores[2:3], case.bias, case.renormalize, case.routed_scaling_factor)


@pytest.mark.parametrize("last, verdict", [(237, "expected"), ("lowest", "mismatch")])
def test_numbers_of_groups_kept_by_nan_first_are_measured_against_those_groups(last, verdict):
    # lmdeploy-torch under deepseek-v3: torch.topk ranks NaN first, so every group scores NaN (a tie) and it kept
    # groups 4..7, took seven NaN experts of those, then 237, a bf16 flip of 238 (2^-12.9 apart), the top number of
    # those groups. That was measured against the contract's cutoff among its own eight numbers, far below the
    # numbers it left out (2^-3.5: 8 such rows of a 700-row check failed with selection declared at 2^-4). Against the
    # top number of the groups the router kept it is 2^-12.9; the lowest number of those groups is not near.
    from contracts.compare.tolerance import Bounded

    c = oracle.get_contract("deepseek-v3")
    case = _lmdeploy_nan_row()
    exp, w, ids = _answer(case, c)
    assert sorted(exp.ids[0].tolist()) == [24, 26, 65, 91, 101, 112, 237, 238]
    if last == "lowest":
        ranking = _view(exp).ranking[0, 128:].clone()
        last = 128 + int(torch.where(torch.isfinite(ranking), ranking, torch.full_like(ranking, math.inf)).argmin())
    ids2 = torch.tensor([[134, 160, 196, 206, 209, 215, 236, last]])
    w2 = _own_weights(ids2, _view(exp), "deepseek-v3", renormalize=case.renormalize, rsf=case.routed_scaling_factor)
    # lmdeploy-torch's declarations, selection bounded at 2^-8 (its own bound is 2^-4)
    from contracts.candidates.engines import ENGINE_DEVIATIONS

    declared = {**ENGINE_DEVIATIONS["lmdeploy-torch"]["deepseek-v3"], "selection": Bounded("bf16 sigmoids", 2.0**-8)}
    out = compare_case(case, exp, (w2.float(), ids2.to(torch.int32)), c, deviations=declared)
    assert {v for v, n in out.verdict_counts.items() if n} == {verdict}, (out.verdict_counts, out.rows_detail)


def _sglang_triton_nan_groups_row():
    """deepseek-v3, row 39 of a nan_dense case: groups 0-3 hold NaN only, groups 4, 6 and 7 one number each and group 5
    three, so every group but 5 scores NaN; the contract keeps 5 and then 0, 1, 2 (NaN scores last, ties to the lowest
    group)."""
    import dataclasses

    from contracts.cases.build import build_case
    from contracts.run.options import parse_replay

    spec = dataclasses.replace(parse_replay("nan_dense:971986271:64", 256, 8), n_group=8, topk_group=4)
    case = build_case(spec)
    return Case(dataclasses.replace(spec, rows=1), case.scores[39:40], case.bias, case.renormalize, case.routed_scaling_factor)


@pytest.mark.parametrize("numbers, clause", [("top", "nan_last"), ("one_left_out", "group_mask")])
def test_groups_kept_among_nan_scores_are_the_nan_rules(numbers, clause):
    # SGLang's Triton moe_fused_gate on the H200 and under Triton's interpreter (44 nan_dense rows of a 20,000-row
    # check): it keeps the groups holding a number (4, 6, 7, each scoring NaN in the contract) over those of NaN only
    # (0, 1, 2) and takes the top numbers of its groups, then two NaN experts. Blamed on group_mask ("the group mask
    # did not hold them back") before; what differs is where NaN group scores rank: nan_last. Leaving out one of
    # those numbers for a NaN expert is no NaN rule, and stays the groups' failure.
    c = oracle.get_contract("deepseek-v3")
    case = _sglang_triton_nan_groups_row()
    exp, _, _ = _answer(case, c)
    assert sorted(exp.ids[0].tolist()) == [96, 97, 98, 99, 100, 178, 182, 183]
    assert exp.values(torch.tensor([0])).kept[0].tolist() == [True, True, True, False, False, True, False, False]
    mine = [182, 183, 236, 198, 178, 151, 128, 129] if numbers == "top" else [182, 183, 236, 198, 178, 130, 128, 129]
    ids = torch.tensor([mine])
    w = _own_weights(ids, _view(exp), "deepseek-v3", renormalize=case.renormalize, rsf=case.routed_scaling_factor)
    out = compare_case(case, exp, (w.float(), ids.to(torch.int32)), c, deviations={})
    assert set(out.clause_rows) == {clause}, (out.clause_rows, out.rows_detail)
