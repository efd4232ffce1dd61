"""Every field of every built-in contract, and every regime of a field that changes the answer, is reached by the
default synthetic plan (issue 55, "evidence a case never draws").

For each built-in contract and each regime (``contracts.cases.exercised.regimes``: the single-field variants of
``oracle.variants`` that change an answer, and the bias, groups, per-expert scale, scaling factor, renormalize option
and scoring a router may leave out or get wrong), some case of the default plan routes differently under the regime
than under the contract, so that the comparison FAILs a router implementing it: ``compare_case`` finds a mismatched
row. The plan is the one ``check`` runs (the contract's families, its admitted options, its pinned cases) at
``--rows 1``: the pinned cases run at every ``--rows``, and each family's first case (1 row) at every ``--rows``
too, so what is reached here is reached by every default run.
"""

from __future__ import annotations

import os

import pytest

import oracle
from contracts.cases.build import build_case
from contracts.cases.exercised import regimes
from contracts.cases.families import families_for
from contracts.cases.launch_points import switch_points
from contracts.cases.max_batch import default_max_batch
from contracts.cases.plan import iter_plan
from contracts.compare import compare_case, expected_for


def plan_specs(c, max_batch):
    groups = dict(n_group=c.n_group, topk_group=c.topk_group) if c.is_grouped else {}
    return iter_plan(families_for(c), 1, 0, c.experts, c.topk, max_batch=max_batch, bias=c.has_bias,
                     admitted=c.admitted_options(), contract=c.name, **groups)  # fmt: skip


def unreached(c, max_batch: int) -> list[str]:
    """The labels of the regimes of ``c`` no case of its plan FAILs (in the default call context: the others repeat
    the same inputs)."""
    left = {r.label: r for r in regimes(c)}
    for spec in sorted(plan_specs(c, max_batch), key=lambda s: s.rows):  # the small cases first: most regimes show there
        if not left:
            break
        if spec.in_context or spec.rows == 0:
            continue
        case = build_case(spec)
        exp = expected_for(case, c)
        for label, regime in list(left.items()):
            answer = regime.route(case)
            outcome = compare_case(case, exp, answer, c, deviations={})
            if outcome.verdict_counts.get("mismatch", 0) or outcome.case_problem:
                del left[label]
    return sorted(left)


# Known gaps, each a finding for the contract's owner (strict: one that is closed fails here until it is taken off).
KNOWN_UNREACHED: dict[str, str] = {
    # (issue 59's mcore-softmax-pre had one, score_precision='fp32': closed by an equivalence, exercised.equivalent:
    # a monotone rounding only merges values into ties, which the comparison takes as near ties)
}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_UNREACHED[n])) if n in KNOWN_UNREACHED
                                  else n for n in oracle.BUILTIN_CONTRACTS])  # fmt: skip
def test_the_plan_fails_every_regime_of_every_field(name):
    c = oracle.get_contract(name)
    assert regimes(c), name
    max_batch = int(os.environ.get("ROUTER_CONTRACTS_MAX_BATCH") or 1025)
    missing = unreached(c, max_batch)
    assert not missing, f"contract {name}: a router implementing any of these passes the default plan: {missing}"


def test_the_regimes_name_what_a_router_can_get_wrong():
    kinds = {r.field for r in regimes(oracle.get_contract("gemma4"))}
    assert {"weight_scale", "scoring", "default_renormalize"} <= kinds, kinds
    kinds = {r.field for r in regimes(oracle.get_contract("deepseek-v3"))}
    assert {"group_mask", "group_score", "n_group", "bias", "routed_scaling_factor", "renormalize", "tie_rule"} <= kinds, kinds
