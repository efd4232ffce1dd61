"""Every built-in contract is checked only on the call options its model's router can be called with.

- the plan the runner makes for a contract (its coverage cases, the pinned cases, a replayed case) draws only
  the ``renormalize`` values and ``routed_scaling_factor``s the contract admits, for every built-in;
- so do the search's hypothesis strategies;
- the three older softmax contracts admit what their transformers routers take: Mixtral always renormalizes,
  gpt-oss never (a softmax over the k chosen), Qwen3-MoE either way (``norm_topk_prob``), none has a factor;
- an option a contract does not admit is bad input, never a mismatch: the oracle refuses it (so the comparison
  never sees it) and ``search --replay`` of a saved input with such options exits 2 with one line.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import oracle
from contracts.cases import Case, CaseSpec, build_case
from contracts.cases import strategies as strat
from contracts.compare.expected import expected_for
from contracts.run.planning import RunPlan

ROOT = Path(__file__).resolve().parents[1]
BUILTINS = sorted(oracle.BUILTIN_CONTRACTS)


def _drawn(spec_list) -> set[tuple[bool, float]]:
    return {(case.renormalize, float(case.routed_scaling_factor)) for case in map(build_case, spec_list)}


@pytest.mark.parametrize("name", BUILTINS)
def test_no_case_of_any_builtin_draws_an_option_it_does_not_admit(name):
    c = oracle.get_contract(name)
    # the runner's own plan: every family of the contract, the pinned cases of a small max batch, a replayed case
    specs, _ = RunPlan(None, 120, 3, 64 if c.experts > 64 and not c.is_grouped else None, None, None, None, max_batch=3).shaped(c).specs(None)
    specs = list(specs)
    assert len({s.family for s in specs}) >= 10, name
    drawn = _drawn(specs)
    replayed, _ = RunPlan(None, 120, 3, None, None, None, f"random_fp32:{specs[0].case_seed}:2", max_batch=3).shaped(c).specs(None)
    drawn |= _drawn(replayed)
    refused = {(r, f) for r, f in drawn if c.admits(renormalize=r, routed_scaling_factor=f)}
    assert not refused, (name, refused)
    if len(c.admitted_renormalize_values) == 2:  # a contract admitting both gets both, not one only
        assert {r for r, _ in drawn} == {True, False}, (name, drawn)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_the_search_strategies_draw_only_admitted_options(data):
    name = data.draw(st.sampled_from(BUILTINS))
    c = oracle.get_contract(name)
    example = data.draw(strat.routing_examples(shapes=((16, 2),), contract=name, max_rows=1, pad_rows=(0,)))
    assert c.admits(renormalize=example.renormalize, routed_scaling_factor=example.routed_scaling_factor) is None, (name, example)


def test_the_older_softmax_contracts_admit_what_their_routers_take():
    options = {name: {k: v for k, v in oracle.get_contract(name).admitted_options().items() if k != "expert_scale"}
               for name in ("mixtral", "gpt-oss", "qwen3-moe")}  # fmt: skip
    assert options == {
        "mixtral": {"renormalize": (True,), "routed_scaling_factor": (1.0,)},  # MixtralTopKRouter always divides by the sum
        "gpt-oss": {"renormalize": (False,), "routed_scaling_factor": (1.0,)},  # a softmax over the k chosen, nothing after
        "qwen3-moe": {"renormalize": (True, False), "routed_scaling_factor": (1.0,)},  # norm_topk_prob; no factor
    }


def _case(contract: str, renormalize: bool, rsf: float) -> Case:
    c = oracle.get_contract(contract)
    x = torch.randn(4, c.experts, generator=torch.Generator().manual_seed(1))
    return Case(CaseSpec("random_fp32", 0, 4, c.experts, c.topk), x, None, renormalize, rsf)


@pytest.mark.parametrize("contract, renormalize, rsf, match", [
    ("mixtral", False, 1.0, r"renormalize=False is not an option of contract 'mixtral'.*pass renormalize=True"),
    ("gpt-oss", True, 1.0, r"renormalize=True is not an option of contract 'gpt-oss'.*pass renormalize=False"),
    ("qwen3-moe", True, 2.5, r"routed_scaling_factor=2.5 is not an option of contract 'qwen3-moe'.*pass routed_scaling_factor=1"),
])  # fmt: skip
def test_an_unadmitted_option_is_bad_input_before_any_comparison(contract, renormalize, rsf, match):
    with pytest.raises(oracle.RoutingArgumentError, match=match):
        expected_for(_case(contract, renormalize, rsf), oracle.get_contract(contract))
    c = oracle.get_contract(contract)
    expected_for(_case(contract, c.default_renormalize, c.routed_scaling_factor), c)  # its own options are fine


@pytest.mark.slow  # two fresh `python -m contracts` processes (each imports torch): 10-20 s on the shared machine
def test_search_replay_of_an_input_saved_with_unadmitted_options_exits_2(tmp_path):
    path = tmp_path / "minimal.pt"
    torch.save(dict(scores=torch.randn(2, 8), bias=torch.zeros(8), topk=2, renormalize=False, routed_scaling_factor=2.5,
                    contract="mixtral", candidate="oracle"), path)  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "contracts", "search", "--replay", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 2, out
    assert "renormalize=False is not an option of contract 'mixtral'" in out and "Traceback" not in out, out
    torch.save(dict(scores=torch.randn(2, 8), bias=torch.zeros(8), topk=2, renormalize=True, routed_scaling_factor=1.0,
                    contract="mixtral", candidate="oracle"), path)  # fmt: skip
    done = subprocess.run([sys.executable, "-m", "contracts", "search", "--replay", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr  # the oracle replays its own admitted input: no failure


# ---------------------------------------------------------------- a per-expert weight scale is drawn, not left at ones


def test_the_cases_of_a_per_expert_scale_contract_draw_the_scale():
    c = oracle.get_contract("gemma4")
    specs, _ = RunPlan(["random_fp32", "nan_sparse"], 200, 5, None, None, None, None, max_batch=2).shaped(c).specs(None)
    cases = [build_case(s) for s in specs]
    for case in cases:
        s = case.expert_scale
        assert s is not None and s.shape == (c.experts,) and s.dtype == torch.float32, case.spec
        assert 0.25 <= float(s.min()) and float(s.max()) < 2.0 and s.unique().numel() == c.experts  # distinct, not ones
        assert torch.equal(build_case(case.spec).expert_scale, s)  # the spec rebuilds it bit for bit
    assert not torch.equal(cases[0].expert_scale, cases[1].expert_scale)  # each case its own
    # the other draws stay put: the same spec without the scale builds the same logits and options
    plain = build_case(dataclasses.replace(cases[0].spec, expert_scale=False))
    assert plain.expert_scale is None and torch.equal(plain.scores, cases[0].scores)
    assert (plain.renormalize, plain.routed_scaling_factor) == (cases[0].renormalize, cases[0].routed_scaling_factor)
    # contracts without a per-expert scale draw none, and the oracle's answer takes the case's scale
    kimi, _ = RunPlan(["random_fp32"], 20, 5, None, None, None, None).shaped(oracle.get_contract("kimi-k2")).specs(None)
    assert all(build_case(s).expert_scale is None for s in kimi)
    exp = expected_for(cases[0], c)
    plain_w, ids = oracle.route(cases[0].scores, None, c.topk, renormalize=cases[0].renormalize, contract=c)
    assert torch.equal(exp.ids, ids) and torch.equal(exp.weights, plain_w * cases[0].expert_scale[ids.long()])


def test_check_plan_plans_only_the_admitted_options(monkeypatch, capsys):
    # `check --plan` prints counts, not options: the specs it plans are read at iter_plan, as the run's are.
    import importlib

    from contracts.check import main

    plan_module = importlib.import_module("contracts.cases.plan")  # the package's `plan` is a function of that name

    planned = []

    def recording(*args, **kwargs):
        for spec in real(*args, **kwargs):
            planned.append(spec)
            yield spec

    real = plan_module.iter_plan_parts  # iter_plan's own source: --plan counts its bulk cases, never lists them
    monkeypatch.setattr(plan_module, "iter_plan_parts", recording)
    import contracts.run.planning as planning  # --plan walks the run's own iterator (issue 55), imported there

    monkeypatch.setattr(planning, "iter_plan_parts", recording)
    assert main(["--candidate", "oracle", "--contract", "mixtral", "--plan", "--rows", "200"]) == 0
    assert "plan: contract mixtral" in capsys.readouterr().out
    assert planned and {s.renormalize_options for s in planned} == {(True,)}  # Mixtral always renormalizes
    assert {(case.renormalize, float(case.routed_scaling_factor)) for case in map(build_case, planned[:20])} == {(True, 1.0)}


def test_the_plan_and_the_search_draw_the_oracles_scaling_factors():
    # The plan writes the drawn factors out (importing oracle there would import torch before a command checks its
    # arguments); the search's strategy reads oracle's. The pinned-only factors are none of them.
    import oracle

    from contracts.cases import pins, strategies

    assert pins.SCALING_FACTORS == oracle.SCALING_FACTORS == strategies.SCALING
    assert not set(pins.UNUSUAL_SCALING_FACTORS) & set(oracle.SCALING_FACTORS)


def test_a_replay_of_one_row_takes_the_contracts_admitted_options(capsys):
    """``--replay ID --row N`` built the case without the contract's admitted options: under a contract that always
    renormalizes (mixtral, mcore-sigmoid) a case that drew renormalize=False ended in "renormalize=False is not an
    option of contract" and exit 2, so every such replay line of a report was dead (found replaying an mcore row)."""
    from contracts.cases.build import build_case
    from contracts.cases.spec import CaseSpec
    from contracts.check import main

    seeds = [s for s in range(40) if not build_case(CaseSpec("random_fp32", s, 4, 8, 2)).renormalize][:3]
    assert seeds, "no draw of renormalize=False in 40 seeds"
    for seed in seeds:
        code = main(["--candidate", "oracle", "--contract", "mixtral", "--replay", f"random_fp32:{seed}:4", "--row", "1"])
        out = capsys.readouterr()
        assert code == 0, out.out + out.err
        assert "row 1: " in out.out and "not an option" not in out.err
