"""Issue 55's comparison classes: routers whose rows the comparison blamed on a clause no kernel engineer would fix.

A row that breaks a group tie and an expert tie at once. DeepSeek-V3's ``all_equal`` rows tie every group score and
every expert: a router that resolves the group tie another way (the highest-numbered groups) and the expert tie
another way (aiter's lane order) chose groups the contract could have kept and experts that tie the contract's. On
c7e47c9 every such row was blamed on ``group_mask`` ("experts of a group the contract drops were chosen"), so
``pytest -k tie_order`` with the plugin passed ``test_tie_order[all_equal]`` for it (2,332 rows in the issue's
run). The row breaks the group tie rule and the expert tie rule: ``group_tie_order`` and ``tie_order``. A router that
really uses a group it may not (more groups than the contract keeps, or one that scores below the kept ones) is
still ``group_mask`` or ``group_selection``.

The routers are module attributes so the check and the plugin load them as ``module:attr`` candidates.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import oracle
from contracts.cases.build import build_case
from contracts.cases.spec import CaseSpec, admitted_fields
from contracts.compare import compare_case, expected_for
from contracts.run.checks import run_checks

ROOT = Path(__file__).resolve().parents[2]
HERE = "tests.adversarial.test_compare_classes"
DEEPSEEK_V3 = oracle.get_contract("deepseek-v3")


def _route_as(contract, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=None, topk_group=None):
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor,
                        contract=contract, num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip


def breaks_group_and_expert_ties(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=None, topk_group=None):
    """DeepSeek-V3, but group-score ties go to the highest group and expert ties follow aiter's lane order."""
    broken = DEEPSEEK_V3.replace(name="ties-broken", group_tie_rule="highest", tie_rule="aiter")
    return _route_as(broken, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group)


def breaks_expert_ties_only(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=None, topk_group=None):
    """DeepSeek-V3 with the contract's groups, expert ties in aiter's lane order (tie_order before the fix too)."""
    broken = DEEPSEEK_V3.replace(name="expert-ties-broken", tie_rule="aiter")
    return _route_as(broken, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group)


def keeps_one_group_too_many(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=None, topk_group=None):
    """Ties broken as above, and five groups kept where the contract keeps four: a mask that lets a group through."""
    broken = DEEPSEEK_V3.replace(name="five-groups", group_tie_rule="highest", tie_rule="aiter")
    return _route_as(broken, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, 5)


def leaks_the_lowest_group(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=None, topk_group=None):
    """DeepSeek-V3, but the last expert is the best one of the lowest-scoring group, where that group scores below
    every kept one (a mask that leaks), weighted as the contract weighs its own experts (only the ids are wrong)."""
    c = DEEPSEEK_V3
    trace = oracle.route_trace(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract=c,
                               num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    rows, experts = trace.ranking.shape
    group_scores, kept = torch.nan_to_num(trace.group_scores, nan=torch.inf), trace.kept_group_mask
    size = experts // group_scores.shape[1]
    lowest_score, lowest = group_scores.min(1, keepdim=True)
    below = lowest_score.squeeze(1) < torch.where(kept, group_scores, torch.inf).amin(1)
    inside = torch.arange(experts).view(1, -1) // size == lowest
    best = torch.where(inside, torch.nan_to_num(trace.ranking, nan=-torch.inf), -torch.inf).argmax(1)
    ids = trace.ids.long().clone()
    ids[:, -1] = torch.where(below, best, ids[:, -1])
    w = oracle.weights_from(trace.expert_scores.gather(1, ids), contract=c, renormalize=renormalize,
                            routed_scaling_factor=routed_scaling_factor, logits_dtype=scores.dtype)  # fmt: skip
    return w, ids.int()


def _outcome(route, family: str, rows: int = 64, seed: int = 3):
    c = DEEPSEEK_V3
    spec = CaseSpec(family, seed, rows, c.experts, c.topk, n_group=c.n_group, topk_group=c.topk_group,
                    **admitted_fields(c.admitted_options()))  # fmt: skip
    case = build_case(spec)
    exp = expected_for(case, c)
    answer = route(case.scores, case.bias, case.topk, case.renormalize, case.routed_scaling_factor, **case.group_args)
    return compare_case(case, exp, answer, c, deviations={})


def test_group_and_expert_ties_broken_at_once_are_the_tie_clauses():
    out = _outcome(breaks_group_and_expert_ties, "all_equal")
    rows = out.verdict_counts["mismatch"]
    assert rows == 64, out.verdict_counts
    assert out.clauses_broken == {"group_tie_order": rows, "tie_order": rows}, out.clauses_broken
    assert out.clause_rows == {"group_tie_order": rows}, out.clause_rows
    reasons = {d["reason"] for d in out.rows_detail}
    assert all("tie" in r and "also tie_order" in r for r in reasons), reasons


def test_expert_ties_broken_in_the_contracts_groups_stay_tie_order():
    out = _outcome(breaks_expert_ties_only, "all_equal")
    assert out.clauses_broken == {"tie_order": 64}, out.clauses_broken


@pytest.mark.parametrize("family", ["random_fp32", "group_split_pool", "negative_bias_mask"])
def test_an_expert_of_a_group_below_the_cutoff_is_still_the_mask(family):
    out = _outcome(leaks_the_lowest_group, family)
    assert out.verdict_counts["mismatch"] > 32, out.verdict_counts
    assert set(out.clauses_broken) <= {"group_mask", "group_selection"}, out.clauses_broken


def test_more_groups_than_kept_is_still_the_mask():
    """(Not in all_equal, nor wherever the five groups tie: eight experts of at most four tied groups are a choice
    the contract's own rule gives from some four of them, whatever the router kept.)"""
    out = _outcome(keeps_one_group_too_many, "random_fp32")
    assert out.verdict_counts["mismatch"] > 0, out.verdict_counts
    assert set(out.clauses_broken) <= {"group_mask", "group_selection"}, out.clauses_broken


def test_the_check_counts_tie_order_broken_in_all_equal(tmp_path):
    """What the plugin's ``test_tie_order[all_equal]`` reads: the family's rows breaking tie_order, unexpectedly."""
    run = run_checks([f"{HERE}:breaks_group_and_expert_ties"], contract="deepseek-v3", families=["all_equal"], rows=40,
                     max_batch=2, isolate=False, out=tmp_path / "check", progress=False)  # fmt: skip
    fam = run.summaries[0].families["all_equal"]
    assert fam.rows > 0 and fam.clauses_broken.get("tie_order", 0) == fam.mismatched_rows > 0, fam.clauses_broken
    assert "group_mask" not in fam.clauses_broken and "group_selection" not in fam.clauses_broken, fam.clauses_broken


def _pytest(cwd, *args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow  # the plugin's suite in a pytest subprocess, its check in-process: ~15 s on the 2-core machine
def test_the_plugins_tie_order_test_fails_for_it(tmp_path):
    code, out = _pytest(tmp_path, "-p", "contracts.pytest_plugin", "--pyargs", "contracts.conformance", "--candidate",
                        f"{HERE}:breaks_group_and_expert_ties", "--contract", "deepseek-v3", "--rows", "40", "--max-batch", "2",
                        "--no-isolate", "-n", "0", "-q", "-rf", "-k", "all_equal and (tie_order or group_mask)")  # fmt: skip
    assert code == 1, out
    failed = re.findall(r"^FAILED (\S+)", out, flags=re.M)
    assert any("test_tie_order[all_equal]" in f for f in failed), out
    assert not any("test_group_mask[" in f for f in failed), failed
