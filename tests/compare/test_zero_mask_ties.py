"""A 0.0 group mask: a dropped group's zero taken in a tie with the kept groups' zeros is no leak; a real leak is.

Under the contracts that mask dropped groups with 0.0 (deepseek-v2, deepseek-v3-reference, mistral4), a dropped expert
ranked at or below 0.0 before the mask is what the mask makes of any dropped expert: where the kept groups' own
experts underflowed to 0.0 too, which zero a router takes is its expert tie rule (test_held_out_55's zero-mask tie
router: ``saturated`` rows were blamed on group_mask, "more groups used than kept", until such picks stopped counting
as a group used). These are the controls: an expert of a dropped group taken over a kept expert that outranks it
stays ``group_mask``, whether it outranks that kept expert before the mask (a positive value: the mask did not hold it
back) or is itself a zero the mask would make of it (taken over a kept positive value, which no tie explains).
"""

from __future__ import annotations

import pytest
import torch

import oracle
from contracts.cases.build import Case
from contracts.cases.spec import CaseSpec
from contracts.compare import compare_case, expected_for

ZERO_MASK = ("deepseek-v2", "deepseek-v3-reference", "mistral4")


def _case(c, x: torch.Tensor, bias: torch.Tensor | None) -> Case:
    spec = CaseSpec("unit", 0, x.shape[0], c.experts, c.topk, c.n_group, c.topk_group, bias=bias is not None)
    return Case(spec, x, bias, c.default_renormalize, c.routed_scaling_factor)


def _inputs(c, rows: int, seed: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, c.experts, generator=g) * 2
    bias = (torch.randn(c.experts, generator=g) * 0.05) if c.has_bias else None
    return x, bias


def _ranking(c, case: Case) -> torch.Tensor:
    return expected_for(case, c).values(torch.arange(case.scores.shape[0])).ranking


def _lowest_pick_replaced(c, case: Case, choose) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """The contract's answer with, in each row where ``choose(row, lowest_value, dropped_ranking)`` names an expert of
    a dropped group, its lowest-ranked pick replaced by that expert (the slot's weight left as it was): the rows
    planted. Only rows where the contract takes experts from every kept group and another pick from the lowest
    pick's group: the router then takes experts from more groups than the contract keeps (else it may read as keeping
    the dropped group in place of a kept one, the group_selection a router scoring groups otherwise gives)."""
    exp = expected_for(case, c)
    v = exp.values(torch.arange(case.scores.shape[0]))
    ids, w = exp.ids.clone(), exp.weights.clone()
    size = c.experts // c.n_group
    planted = []
    for row in range(ids.shape[0]):
        picked = v.ranking[row, ids[row].long()]
        slot = int(picked.argmin())
        groups = ids[row].long() // size
        if int((groups == int(groups[slot])).sum()) < 2 or groups.unique().numel() < c.topk_group:
            continue
        dropped = ~v.kept[row].repeat_interleave(size)
        only_dropped = torch.where(dropped, v.ranking[row], torch.full_like(v.ranking[row], torch.nan))
        expert = choose(row, float(picked[slot]), only_dropped)
        if expert is None:
            continue
        assert not bool(v.kept[row, expert // size])
        ids[row, slot] = expert
        planted.append(row)
    return w, ids, planted


def _assert_group_mask(c, case: Case, answer, planted: list[int]) -> None:
    from contracts.compare.attribution import INDEX

    out = compare_case(case, expected_for(case, c), answer, c, deviations={})
    assert planted and out.verdict_counts["mismatch"] == len(planted), (out.verdict_counts, planted)
    assert sorted(out.mismatched.tolist()) == planted
    assert (out.mismatched_primary == INDEX["group_mask"]).all(), (out.clauses_broken, out.mismatched_primary)
    assert out.clauses_broken["group_mask"] == len(planted), out.clauses_broken
    # the weight kept in the planted slot is another expert's (weight clauses); no other clause of the ids
    assert not set(out.clauses_broken) & set(_IDS_CLAUSES), out.clauses_broken


_IDS_CLAUSES = ("validity", "group_selection", "group_tie_order", "nan_last", "tie_order", "signed_zero", "selection",
                "output_order")  # fmt: skip


@pytest.mark.parametrize("name", [*ZERO_MASK, "deepseek-v3"])
def test_a_dropped_expert_outranking_a_kept_one_before_the_mask_is_group_mask(name):
    # the mask did not hold it back: the best expert of a dropped group, where it outranks the contract's lowest pick
    c = oracle.get_contract(name)
    case = _case(c, *_inputs(c, 32, 1))

    def best_dropped_above(row, lowest, dropped):
        best = torch.nan_to_num(dropped, nan=-torch.inf).argmax()
        return int(best) if float(dropped[best]) > lowest else None

    w, ids, planted = _lowest_pick_replaced(c, case, best_dropped_above)
    assert len(planted) >= 8, planted
    _assert_group_mask(c, case, (w, ids), planted)


@pytest.mark.parametrize("name", [*ZERO_MASK, "deepseek-v3"])
def test_a_dropped_zero_over_a_kept_positive_expert_is_group_mask(name):
    # a dropped expert whose ranking value underflows to 0.0 (or, with its bias, below it) before the mask: what a
    # 0.0 mask makes of it anyway, but every expert the contract picks ranks above 0, so no tie with a kept zero
    # explains it. (The pick no longer counts as a group used; the leak is still the dropped group's.)
    c = oracle.get_contract(name)
    x, bias = _inputs(c, 32, 2)
    x = x.abs() + 0.5  # every expert ranks well above 0 ...
    if bias is not None:
        bias = bias.abs()
    size = c.experts // c.n_group
    case = _case(c, x, bias)
    kept = expected_for(case, c).values(torch.arange(x.shape[0])).kept
    zero_of = {}
    for row in range(x.shape[0]):  # ... but one expert of a dropped group, at the end of it
        group = int((~kept[row]).nonzero()[-1])
        expert = group * size + size - 1
        x[row, expert] = -1000.0  # sigmoid 0.0; softmax exp 0.0
        if bias is not None:
            bias[expert] = -0.0 if row % 2 else -0.25
        zero_of[row] = expert
    case = _case(c, x, bias)
    ranking = _ranking(c, case)
    assert all(float(ranking[row, e]) <= 0.0 for row, e in zero_of.items())
    w, ids, planted = _lowest_pick_replaced(c, case, lambda row, lowest, dropped: zero_of[row] if lowest > 0 else None)
    assert len(planted) >= 8, planted
    _assert_group_mask(c, case, (w, ids), planted)
