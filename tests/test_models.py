"""The released models' own routers (kernels.models, candidates hf-<family>) against their families' contracts.

- every family has a built-in contract, a router in kernels.models and a registered hf-<family> candidate;
- a faithful wrapper of each transformers router passes its family's contract, breaking only the clauses its own
  code breaks (declared), and never `scaling` or `renorm_guard` on options its model does not have (the plan draws
  only admitted options; the oracle refuses the others);
- planted defects in those routers each fail with the clause a kernel engineer would fix.

Skipped as a whole without transformers (the `models` extra): CI installs it.
"""

from __future__ import annotations

import json

import pytest
import torch

import oracle
from tests._requires import transformers_for_models

transformers_for_models()

from contracts.candidates import all_candidates  # noqa: E402
from contracts.check import main  # noqa: E402
from kernels.models import ROUTERS, available, route_for  # noqa: E402

PLANTED = "tests.standins.hf_routers"
FAMILIES = sorted(ROUTERS)
# Small, so that all families together stay within CI's budget for this file (docs/models.md has the figures
# at 20,000 rows); the families that show ties, NaN, scaling and renormalization are kept.
ROWS = 120
FAMILY_SET = "random_fp32,random_bf16,all_equal,nan_sparse"


# QUICK (``check --quick``) in place of ``rows``: every pinned dtype pair, layout, call context and call option of the
# families once, at one launch class, not in each (random_fp32's and random_bf16's pins are most of a check's cases at
# ROWS), for the tests whose assertion is about a class of behaviour. A check of few pinned cases keeps --rows.
QUICK = None


def _check(tmp_path, candidate, *extra, rows=ROWS):
    out = tmp_path / "bundle"
    size = ["--quick"] if rows is QUICK else ["--rows", str(rows)]
    code = main(["--candidate", candidate, *size, "--no-isolate", "--out", str(out), "--quiet", "--force", *extra])
    return code, json.loads((out / "summary.json").read_text())


def test_every_family_has_a_contract_a_router_and_a_candidate():
    # every released family's router is a candidate (deepseek-v4-flash is deepseek-v4's contract under its checkpoint's name)
    assert {c.name for c in oracle.MODEL_CONTRACTS} - {"deepseek-v4-flash"} <= set(ROUTERS)
    assert set(ROUTERS) <= set(oracle.BUILTIN_CONTRACTS)  # ... and so are qwen3-moe, mixtral and gpt-oss's
    known = all_candidates()
    for family, router in ROUTERS.items():
        c = oracle.get_contract(family)
        assert (router.experts, router.topk) == (c.experts, c.topk), family
        assert "transformers 5.24" in c.source and router.cls in c.source, c.source
        cand = known[f"hf-{family}"]
        assert cand.contract == family and cand.third_party
        assert "validity" not in cand.deviations(family) and "scaling" not in cand.deviations(family)
        assert available(family)[0], available(family)[1]


@pytest.mark.parametrize("family", FAMILIES)
def test_each_router_agrees_with_its_contract_on_random_rows(family):
    c = oracle.get_contract(family)
    gen = torch.Generator().manual_seed(len(family))
    x = torch.randn(256, c.experts, generator=gen) * 2
    bias = torch.randn(c.experts, generator=gen) * 0.05 if c.has_bias else None
    groups = dict(num_expert_group=c.n_group, topk_group=c.topk_group) if c.is_grouped else {}
    if c.weight_scale == "per_expert":  # Gemma 4: a per-expert weight scale other than its initial ones
        groups["expert_scale"] = 0.25 + 1.75 * torch.rand(c.experts, generator=gen)
    for renormalize in c.admitted_renormalize_values:
        for rsf in c.admitted_scaling_factors or (1.0, 2.5):
            w, ids = route_for(family)(x, bias, c.topk, renormalize, rsf, **groups)
            ew, eids = oracle.route(x, bias, c.topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=c, **groups)
            if c.output_order == "any":  # the model's torch.topk(sorted=False): compare as sets, weights by expert
                order, eorder = ids.long().sort(1), eids.long().sort(1)
                ids, eids = order.values, eorder.values
                w, ew = w.gather(1, order.indices), ew.gather(1, eorder.indices)
            assert torch.equal(ids.long(), eids.long()), (family, renormalize, rsf)
            torch.testing.assert_close(w, ew, rtol=c.weight_rtol, atol=c.weight_atol)


@pytest.mark.slow  # a check per model family (19 families, 3-13 s each on the 2-core host)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_faithful_router_passes_its_contract_but_for_what_its_code_breaks(tmp_path, family):
    code, s = _check(tmp_path, f"hf-{family}", "--families", FAMILY_SET, rows=QUICK)
    assert code == 0 and s["status"] == "pass", (s["status"], s["clauses"], s.get("error"))
    assert s["rows_checked"] > 0 and s["contract"] == family
    declared = set(all_candidates()[f"hf-{family}"].deviations(family))
    broken = {clause for clause, rows in s["clauses"].items() if rows}
    assert broken <= declared, s["clauses"]
    assert not {"scaling", "validity"} & broken, s["clauses"]  # renorm_guard only where declared (measured)


@pytest.mark.parametrize("family", ["mixtral", "gpt-oss", "qwen3-moe"])
def test_the_older_contracts_admit_the_options_their_router_code_reads(family):
    # read from the installed router's own code: an option it never reads is one it cannot be called with
    import inspect

    from kernels.models._hf import _modeling

    source = inspect.getsource(getattr(_modeling(ROUTERS[family]), ROUTERS[family].cls).forward)
    c = oracle.get_contract(family)
    assert ("routed_scaling_factor" in source) == (c.admitted_scaling_factors is None), source
    divides = "/=" in source or "sum(" in source
    assert (len(c.admitted_renormalize_values) == 2) == ("norm_topk_prob" in source), source
    if "norm_topk_prob" not in source:  # a fixed choice: divides always (Mixtral) or never (gpt-oss)
        assert c.default_renormalize == divides, source


def test_the_plan_draws_only_admitted_options():
    from contracts.cases import iter_plan
    from contracts.cases.build import build_case
    from contracts.cases.spec import admitted_fields

    for name in ("llama4", "jamba", "hunyuan-moe", "qwen3-next", "deepseek-v2"):
        c = oracle.get_contract(name)
        specs = list(iter_plan(["random_fp32", "batch_sizes"], 300, 1, c.experts, c.topk, bulk_rows=None,
                               bias=c.has_bias, admitted=c.admitted_options()))  # fmt: skip
        cases = [build_case(s) for s in specs[:40]]
        assert {case.renormalize for case in cases} <= set(c.admitted_renormalize_values), name
        if c.admitted_scaling_factors is not None:
            assert {case.routed_scaling_factor for case in cases} == set(c.admitted_scaling_factors), name
    assert admitted_fields(oracle.get_contract("aiter").admitted_options()) == {}  # admits all: its plan is unchanged


def test_options_a_contract_does_not_admit_are_bad_input_not_a_mismatch():
    x = torch.randn(4, 16)
    with pytest.raises(oracle.RoutingArgumentError, match=r"renormalize=True is not an option of contract 'llama4'"):
        oracle.route(x, None, 1, renormalize=True, contract="llama4")
    with pytest.raises(oracle.RoutingArgumentError, match=r"routed_scaling_factor=2.5 is not an option of contract 'jamba'.*pass routed_scaling_factor=1"):
        oracle.route(x, None, 2, routed_scaling_factor=2.5, contract="jamba")
    oracle.route(x, None, 1, contract="llama4")  # the defaults are admitted


# The planted defects (renormalization dropped, softmax over the wrong set, bias in the weights, scaling
# before renormalization, weights divided by k; group score by max below) and a per-expert scale dropped, each in
# a transformers router, each blamed on the clause issue 32's right-clause work names for it.
@pytest.mark.slow  # each check mismatches on nearly every row, and attributing a row costs: 3-40 s each on the CPU
@pytest.mark.parametrize("route, contract, clause, rows", [
    ("renorm_dropped", "qwen3-next", "renormalization", 200),
    ("softmax_over_all", "granite-moe", "softmax_scope", 200),
    ("bias_in_weight", "glm4-moe", "bias_in_weight", 200),
    ("scaled_before_renorm", "dots1", "scaling", QUICK),  # a call with renormalize on and a factor other than 1 (600 rows did)
    ("divided_by_k", "qwen3-next", "scaling", 200),
    ("expert_scale_ignored", "gemma4", "scaling", 200),  # the cases draw a per-expert scale; the router drops it
])  # fmt: skip
def test_planted_defects_in_the_models_routers_fail_with_their_clause(tmp_path, route, contract, clause, rows):
    # fp32 logits: several of these routers cast their weights to bf16 logits' dtype, which is a clause of its own
    code, s = _check(tmp_path, f"{PLANTED}:{route}", "--contract", contract, "--families", "random_fp32", rows=rows)
    assert code == 1 and s["status"] == "fail", s["clauses"]
    assert max(s["clauses"], key=s["clauses"].get) == clause, s["clauses"]


@pytest.mark.slow  # a check mismatching on nearly every row: 2-5 s on the CPU
def test_a_router_dividing_its_bf16_weights_by_k_fails_scaling(tmp_path):
    # Qwen3-MoE's router casts its weights back to the bf16 logits' dtype (weight_accuracy, declared by hf-qwen3-moe);
    # dividing them by k too is scaling, never hidden as that cast.
    code, s = _check(tmp_path, f"{PLANTED}:bf16_divided_by_k", "--contract", "qwen3-moe", "--families", "random_bf16", rows=200)
    assert code == 1 and s["status"] == "fail", s["clauses"]
    assert max(s["clauses"], key=s["clauses"].get) == "scaling", s["clauses"]
    assert s["clauses_broken"].get("weight_accuracy", 0) == 0, s["clauses_broken"]


@pytest.mark.slow  # a grouped check failing on most rows, and their attribution: 5-10 s on the CPU
def test_a_group_score_by_max_fails_group_selection(tmp_path):
    # DeepSeek-V2's router (group max) checked under its own contract with the DeepSeek-V3 group score. Rank order:
    # under output_order "any" the attribution compares a leaked row's ids in order and blames group_mask instead
    # (reported to the verdict work: contracts/compare/attribution.py _group_aspect's `consistent`).
    path = tmp_path / "dsv2-top2.toml"
    path.write_text('base = "deepseek-v2"\nname = "deepseek-v2-top2"\ngroup_score = "top2_sum"\noutput_order = "rank"\n')
    code, s = _check(tmp_path, f"{PLANTED}:group_max", "--contract", str(path), "--families", "random_fp32,random_bf16", rows=QUICK)
    assert code == 1 and s["status"] == "fail", s["clauses"]
    assert max(s["clauses"], key=s["clauses"].get) == "group_selection", s["clauses"]
