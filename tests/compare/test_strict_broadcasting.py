"""Issue 55, the crash: the comparison may not rely on ``torch.isclose`` broadcasting its first argument.

On torch 2.11 (the GPU host's) ``torch.isclose(a, e, equal_nan=True)`` raises when ``a`` is smaller than the
broadcast shape; the weights aspect's stacked factor loop (``[F, 1 + rules, B, k]`` counterfactuals against the
row's ``[B, k]`` weights) did exactly that, so ``check --candidate aiter-model --families sigmoid_underflow`` ended
in a traceback there. These tests run the comparison under ``tests/compare/strict_torch.py``'s emulation of 2.11,
so the class fails on this machine's torch too. Each failed before the fix (``StrictBroadcastError`` from
``tolerance.weights_close`` inside ``attribution._weights_aspect``).
"""

from __future__ import annotations

import pytest
import torch

import oracle
from contracts.cases.build import build_case
from contracts.cases.spec import CaseSpec, admitted_fields
from contracts.compare import compare_case, expected_for
from tests.compare.strict_torch import StrictBroadcastError, strict_broadcasting


def _case(contract: str, family: str, rows: int = 27, seed: int = 1):
    c = oracle.get_contract(contract)
    groups = {"n_group": c.n_group, "topk_group": c.topk_group} if c.is_grouped else {}
    spec = CaseSpec(family, seed, rows, c.experts, c.topk, bias=c.has_bias, **groups, **admitted_fields(c.admitted_options()))
    case = build_case(spec)
    return c, case, expected_for(case, c)


def test_the_emulation_raises_where_torch_2_11_does():
    """The guard of the guard: a smaller first argument raises, a full one (or a smaller second) does not."""
    small, big = torch.zeros(27, 16), torch.zeros(10, 2, 27, 16)
    with strict_broadcasting():
        with pytest.raises(StrictBroadcastError, match=r"\[27, 16\] doesn't match the broadcast shape \[10, 2, 27, 16\]"):
            torch.isclose(small, big, equal_nan=True)
        with pytest.raises(StrictBroadcastError):
            small.isclose(big)
        with pytest.raises(StrictBroadcastError):
            torch.allclose(small, big)
        assert torch.isclose(big, small, equal_nan=True).shape == big.shape
    assert torch.isclose(small, big).shape == big.shape  # restored: this machine's torch broadcasts


@pytest.mark.parametrize("factor", [3.0, 2.0, 0.5, 1 / 16])
@pytest.mark.parametrize("contract, family", [("aiter", "sigmoid_underflow"), ("deepseek-v3", "random_fp32"), ("qwen3-moe", "random_bf16")])
def test_weights_off_by_a_factor_are_blamed_not_raised(strict_torch, contract, family, factor):
    """The reduced repro of the GPU traceback (aiter, sigmoid_underflow): weights off by a constant go through the
    factor loop. (deepseek-v3's sigmoid_underflow weights lie within atol of 0: no factor shows there.)"""
    c, case, exp = _case(contract, family)
    out = compare_case(case, exp, (exp.weights * factor, exp.ids.clone()), c, deviations={})
    differing = int((~torch.isclose(exp.weights * factor, exp.weights, rtol=c.weight_rtol, atol=c.weight_atol, equal_nan=True)).any(1).sum())
    assert differing > 0
    assert out.verdict_counts["mismatch"] == differing, out.verdict_counts
    assert set(out.clause_rows) <= {"scaling", "weight_accuracy", "renormalization", "renorm_guard"}, out.clause_rows


def test_weights_off_per_row_are_blamed_not_raised(strict_torch):
    c, case, exp = _case("aiter", "sigmoid_underflow", rows=64)
    per_row = torch.linspace(0.25, 4.0, exp.weights.shape[0]).unsqueeze(1)
    out = compare_case(case, exp, (exp.weights * per_row, exp.ids.clone()), c, deviations={})
    assert out.verdict_counts["mismatch"] > 0 and not out.case_problem
