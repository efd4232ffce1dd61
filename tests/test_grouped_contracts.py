"""Contracts as data in the harness: grouped (DeepSeek-V3) and softmax contracts, user contract files, the diagnosis.

- The oracle, as a candidate, passes every built-in contract and every
  contract file under examples/contracts/.
- A grouped router written independently of the oracle (tests/standins/grouped_router.py)
  passes deepseek-v3; its 0.0-mask version passes deepseek-v3-reference and
  fails deepseek-v3 on the negative-bias family, blamed on group_mask, with
  a diagnosis that names the mask.
- Planted defects are blamed on their clause and named by the diagnosis:
  the group score by max, the bias in the weights, bf16 scores.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import oracle
from contracts.check import main

REPO = Path(__file__).resolve().parent.parent
ROUTER = "tests.standins.grouped_router"


# QUICK (``check --quick``) in place of ``rows``: every family and every pinned dtype pair, layout, call context and call
# option once, at one launch class (a third of the cases of a --rows check of every family): for the tests whose
# assertion is about a class of behaviour (a contract passes, a planted defect is blamed on its clause). A check of a
# family or two keeps --rows: its few pinned cases cost less than the quick look's 4,096 rows.
QUICK = None


def _check(tmp_path, candidate, contract, *extra, rows=3000):
    out = tmp_path / "bundle"
    size = ["--quick"] if rows is QUICK else ["--rows", str(rows)]
    code = main(["--candidate", candidate, "--contract", str(contract), *size, "--no-isolate", "--out", str(out), "--quiet", *extra])
    return code, json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("contract", ["deepseek-v3", "deepseek-v3-reference", "qwen3-moe", "mixtral", "gpt-oss"])
def test_the_oracle_passes_every_builtin_contract(tmp_path, contract):
    code, s = _check(tmp_path, "oracle", contract, rows=QUICK)
    # every row of the quick look's 4,096 and of its pinned coverage cases checked, none skipped
    assert code == 0 and s["status"] == "pass" and s["rows_checked"] > 4000 and s["rows_skipped"] == 0, s["clauses"]
    assert s["contract"] == contract
    c = oracle.get_contract(contract)
    assert s["options"]["experts"] == c.experts and s["options"]["topk"] == c.topk
    if c.is_grouped:
        assert {"group_score_ties", "negative_bias_mask"} <= set(s["families"])
    else:
        assert not any(f.startswith("group_") for f in s["families"])


@pytest.mark.parametrize("path", sorted((REPO / "examples" / "contracts").glob("*.toml")), ids=lambda p: p.name)
def test_every_example_contract_file_passes_with_the_oracle(tmp_path, path):
    code, s = _check(tmp_path, "oracle", path, rows=QUICK)
    assert code == 0 and s["status"] == "pass", s["clauses"]
    assert s["options"]["contract_source"] == str(path)


@pytest.mark.slow  # a quick look over every deepseek-v3 family (52,861 rows at the tests' max batch)
def test_an_independent_grouped_router_passes_deepseek_v3(tmp_path):
    code, s = _check(tmp_path, f"{ROUTER}:route", "deepseek-v3", rows=QUICK)
    assert code == 0 and s["status"] == "pass" and s["mismatched_rows"] == 0


@pytest.mark.slow  # a grouped check (5 s)
def test_a_router_that_ranks_nan_first_in_the_group_scores_passes_under_its_declarations(tmp_path):
    # torch.topk ranks NaN first: a group holding NaN scores NaN and is kept first, and the router's numbers come from
    # the groups it kept. On b540d84 the row-whole check beside nan_last read them against the contract's kept groups:
    # selection, 2,805 rows of these families (SGLang's torch router failed so, with 1,596 rows of a 2,000-row check).
    families = ("--families", "nan_sparse,nan_dense,nan_neg_inf_bias,few_valid")
    code, s = _check(tmp_path, f"{ROUTER}:nan_first_declared", "deepseek-v3", *families, rows=1000)
    assert code == 0 and s["status"] == "pass" and s["expected_deviations"]["nan_last"]["rows"] > 0, s["clauses"]
    # and the same router taking the lowest numbers of its groups still fails, on selection
    code, s = _check(tmp_path, f"{ROUTER}:nan_first_lowest_numbers_declared", "deepseek-v3", *families, "--force", rows=1000)
    assert code == 1 and s["clauses"].get("selection", 0) > 0, s["clauses"]


@pytest.mark.slow  # two checks (a quick look + 2,000 rows of one family), the second failing: attribution and diagnosis run
def test_the_zero_mask_router_meets_the_reference_code_and_not_the_engines(tmp_path):
    code, s = _check(tmp_path, f"{ROUTER}:route_mask_zero", "deepseek-v3-reference", rows=QUICK)
    assert code == 0 and s["status"] == "pass"
    code, s = _check(tmp_path, f"{ROUTER}:route_mask_zero", "deepseek-v3", "--families", "negative_bias_mask", "--force", rows=2000)
    assert code == 1 and s["families"]["negative_bias_mask"]["clauses"].get("group_mask", 0) == s["mismatched_rows"] > 0
    best = s["diagnosis"][0]
    assert best["kind"] == "combination" and best["fields"] == {"group_mask": 0.0} and "masked with 0.0" in best["text"]
    assert best["matched_rows"] == best["sampled_rows"]


@pytest.mark.slow  # a failing quick look: every mismatch is attributed and the diagnosis re-routes its sample
@pytest.mark.parametrize(
    "route, clause, field",
    [
        ("route_group_max", "group_selection", "group_score"),
        ("route_bias_in_weight", "bias_in_weight", "bias"),
        ("route_bf16", None, "score_precision"),
    ],
)
def test_planted_defects_are_blamed_and_diagnosed(tmp_path, route, clause, field):
    code, s = _check(tmp_path, f"{ROUTER}:{route}", "deepseek-v3", rows=QUICK)
    assert code == 1 and s["status"] == "fail"
    if clause:
        assert max(s["clauses"], key=s["clauses"].get) == clause, s["clauses"]
    assert field in s["diagnosis"][0]["fields"], s["diagnosis"][0]


def test_a_family_that_does_not_apply_is_left_out_with_a_note(tmp_path):
    code, s = _check(tmp_path, "oracle", "aiter", "--families", "random_bf16,group_score_ties", rows=QUICK)
    assert code == 0 and list(s["families"]) == ["random_bf16"]
    assert any("group_score_ties" in n for n in s["notes"])


def test_a_bad_contract_file_is_one_line_naming_the_field(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('base = "deepseek-v3"\ngroup_mask = 1.5\n')
    code = main(["--candidate", "oracle", "--contract", str(bad), "--rows", "10", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and "group_mask" in err and "--contract" in err
