"""The runner catches planted defects, names the right clause, and passes correct routers."""

import json

import pytest

from contracts.cases.plan import pinned_rows
from contracts.check import main

PLANTED = "tests.broken_candidates:"


# QUICK (``check --quick``) in place of ``rows``: every pinned dtype pair, layout, call context and call option of the
# families once, at one launch class, not in each: a quarter of the cases of random_bf16's and random_fp32's pins (their
# --rows checks are nearly all pinned cases). The families with few pinned cases keep --rows: there the quick look's
# 4,096 rows cost more than it drops.
QUICK = None
QUICK_FAMILIES = ("random_bf16", "random_fp32")  # the families whose pinned cases are most of a check's


def _check(tmp_path, candidate, families, rows=3000, extra=()):
    out = tmp_path / "bundle"
    size = ["--quick"] if rows is QUICK else ["--rows", str(rows)]
    # In process: these planted routers misbehave only in their answers (tests/test_isolation.py covers crashes).
    code = main(["--candidate", candidate, "--families", families, *size, "--out", str(out), "--quiet", "--no-isolate", *extra])
    summary = json.loads((out / "summary.json").read_text())
    return code, summary, out


def _worst_clause(summary):
    return max(summary["clauses"], key=lambda c: summary["clauses"][c])


@pytest.mark.parametrize("candidate", ["oracle", PLANTED + "correct_argsort"])
def test_correct_routers_pass_every_family(tmp_path, candidate):
    code, s, out = _check(tmp_path, candidate, ",".join(__import__("contracts.cases").cases.FAMILIES), rows=QUICK)
    assert code == 0, (out / "report.md").read_text()
    # the quick look's 4,096 rows over the families and its pinned cases (7,193 rows at the tests' max batch)
    assert s["status"] == "pass" and s["mismatched_rows"] == 0 and s["rows_checked"] > 4096 and s["quick"]


@pytest.mark.slow  # a failing check with its diagnosis per planted defect (4-6 s each)
@pytest.mark.parametrize(
    "name, families, clause",
    [
        ("wrong_tie_order", "all_equal,tie_pool_straddle", "tie_order"),
        ("nan_like_neg_inf", "nan_neg_inf_bias,nan_dense", "nan_last"),
        ("bias_in_weights", "random_bf16", "bias_in_weight"),
        ("no_renorm_guard", "zero_sum", "renorm_guard"),
        ("scaled_twice", "random_fp32", "scaling"),
        ("scale_over_sum", "sigmoid_underflow", "weight_accuracy"),  # passed every family before the lone-subnormal rows
        ("output_in_id_order", "random_bf16", "output_order"),
        ("duplicate_ids", "random_bf16", "validity"),
        ("writes_its_input", "random_bf16", "validity"),
        ("int64_ids", "random_bf16", "validity"),
    ],
)
def test_planted_defect_is_caught_with_its_clause(tmp_path, name, families, clause):
    code, s, out = _check(tmp_path, PLANTED + name, families, rows=QUICK if families in QUICK_FAMILIES else 3000)
    assert code == 1
    # A router that writes into its logits raises where they require grad (torch refuses an in-place write to a view
    # of a leaf that requires grad): those cases are its errors, the rest validity mismatches.
    assert s["status"] == ("error" if name == "writes_its_input" else "fail")
    assert _worst_clause(s) == clause, s["clauses"]
    report = (out / "report.md").read_text()
    assert f"`{clause}`" in report and "Replay: `python -m contracts.check" in report


def test_tie_order_rule_that_changes_above_1024_rows_is_caught_only_there(tmp_path):
    code, s, out = _check(tmp_path, PLANTED + "other_tie_rule_above_1024_rows", "all_equal", rows=4000)
    assert code == 1 and _worst_clause(s) == "tie_order"
    import pandas as pd

    cells = pd.read_csv(out / "mismatches.csv")
    rows_per_case = cells["case"].str.split(":").str[2].astype(int)
    assert (rows_per_case > 1024).all()


def test_tie_order_mismatch_replays_to_the_same_row(tmp_path, capsys):
    code, s, out = _check(tmp_path, PLANTED + "wrong_tie_order", "all_equal", rows=300)
    details = json.loads((out / "details.json").read_text())
    replay = details[0]["replay"].split()
    argv = replay[3:] + ["--out", str(tmp_path / "replay"), "--quiet", "--no-isolate"]
    assert main(argv) == 1
    printed = capsys.readouterr().out
    assert f"row {details[0]['row']}: tie_order" in printed


def test_candidate_that_raises_is_reported_not_fatal(tmp_path):
    # Issue 22 item 14: an exception is an error of the candidate (status error, its message and
    # replay line), no longer a validity mismatch on every row.
    code, s, out = _check(tmp_path, PLANTED + "raises", "random_bf16", rows=200)
    # the 200 rows of the budget and random_bf16's pinned cases (a bf16, an fp16 and an fp32 bias)
    assert code == 1 and s["status"] == "error" and s["raised_rows"] == s["rows_checked"] == 200 + pinned_rows("random_bf16", 1025, experts=896, topk=16, contract="aiter")
    assert s["clauses"]["validity"] == 0 and s["mismatched_rows"] == 0
    assert s["error"]["kind"] == "exception" and "planted failure" in s["error"]["message"]
    assert "--replay " + s["error"]["case"] in s["error"]["replay"]
    assert "planted failure" in (out / "report.md").read_text()


def test_torch_native_shows_declared_tie_order_deviation(tmp_path):
    code, s, _ = _check(tmp_path, "torch-native", "all_equal,tie_pool_straddle", rows=2000, extra=["--contract", "aiter"])
    assert s["expected_deviations"]["tie_order"]["observed"]
    assert s["expected_deviations"]["tie_order"]["rows"] > 0
    assert code == 0 and s["mismatched_rows"] == 0
