"""junit.xml from bundles: every row breaking a clause fails its testcase, a check that did not finish is never green.

Bundles are written through ``contracts.reports.bundle`` from records, as the check writes them.
"""

from __future__ import annotations

import contextlib
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from contracts import check
from contracts.candidates import get_candidate
from contracts.cases import iter_plan
from contracts.cases.plan import pinned_rows
from contracts.reports.bundle import write_check_bundle
from contracts.reports.json_records import to_json
from contracts.reports.junit import entries_for_bundle, first_mismatch, write_junit
from contracts.reports.schema import CheckResult, Determinism, FamilyCounts, RowDetail, Status, Summary
from contracts.run.candidate_check import check_candidate
from tests.aiter_model_families import PASSING_AITER_MODEL_FAMILIES


def _junit(bundle: Path, tmp_path: Path) -> ET.Element:
    entries, tools = entries_for_bundle(bundle)
    return ET.parse(write_junit(tmp_path / "junit.xml", entries, tools)).getroot()


def _cases(root: ET.Element) -> dict[tuple[str, str], ET.Element]:
    return {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}


def _bundle(tmp_path: Path, summary: Summary, details: list[RowDetail] = ()) -> Path:
    return write_check_bundle(tmp_path / "bundle", CheckResult(summary, None, list(details)))


def _summary(**fields) -> Summary:
    base = dict(candidate="mine", contract="aiter", device="cpu", status=Status.FAIL, command="python -m contracts.check --candidate mine")
    return Summary(**{**base, **fields})


SECONDARY = RowDetail(
    row=3, clause="selection", clauses=["selection", "weight_accuracy"], verdict="mismatch", reason="id 7 instead of 9",
    family="random_fp32", case="random_fp32:5:8", expected_ids=[9], actual_ids=[7], replay="python -m contracts.check --replay random_fp32:5:8 --row 3",
)  # fmt: skip


def test_a_clause_broken_by_rows_with_another_primary_clause_fails(tmp_path):
    fam = FamilyCounts(rows=8, mismatched_rows=2, clauses={"selection": 2}, clauses_broken={"selection": 2, "weight_accuracy": 3})
    summary = _summary(rows_checked=8, mismatched_rows=2, clauses={"selection": 2, "weight_accuracy": 1, "tie_order": 0},
                       clauses_broken={"selection": 2, "weight_accuracy": 3}, families={"random_fp32": fam})  # fmt: skip
    cases = _cases(_junit(_bundle(tmp_path, summary, [SECONDARY]), tmp_path))
    failure = cases[("contracts.mine.random_fp32", "weight_accuracy")].find("failure")
    assert failure.get("message") == "3 of 8 rows of family random_fp32 break clause weight_accuracy"
    assert "(0 with it as the primary clause)" in failure.text and "replay: python -m contracts.check --replay random_fp32:5:8 --row 3" in failure.text
    assert cases[("contracts.mine.random_fp32", "selection")].find("failure").get("message").startswith("2 of 8 rows")
    assert cases[("contracts.mine.random_fp32", "tie_order")].find("failure") is None


def test_a_version_1_family_falls_back_to_the_primary_clause(tmp_path):
    fam = FamilyCounts(rows=8, mismatched_rows=2, clauses={"selection": 2})
    summary = _summary(schema_version=1, rows_checked=8, mismatched_rows=2, clauses={"selection": 2, "tie_order": 0}, families={"f": fam})
    cases = _cases(_junit(_bundle(tmp_path, summary), tmp_path))
    assert cases[("contracts.mine.f", "selection")].find("failure").get("message") == "2 of 8 rows of family f break clause selection"
    assert "no example recorded" in cases[("contracts.mine.f", "selection")].find("failure").text


def test_first_mismatch_takes_a_summary_or_its_json(tmp_path):
    summary = _summary(rows_checked=8, mismatched_rows=1, clauses={"selection": 1}, families={"random_fp32": FamilyCounts(rows=8)})
    bundle = _bundle(tmp_path, summary, [SECONDARY])
    as_record = first_mismatch(bundle, summary, "random_fp32", "weight_accuracy")
    assert as_record == first_mismatch(bundle, to_json(summary), "random_fp32", "weight_accuracy")
    assert as_record.startswith("case random_fp32:5:8, row 3: id 7 instead of 9") and "primary: selection" in as_record


def test_an_interrupted_check_is_an_error_not_a_pass(tmp_path):
    pulled = []

    def stop():
        return "SIGINT" if len(pulled) >= 2 else None

    def specs():
        for spec in iter_plan(["random_fp32", "all_equal"], 400, 0, 896, 16):
            pulled.append(spec)
            yield spec

    result = check_candidate(get_candidate("oracle"), specs(), contract="aiter", device="cpu", should_stop=stop)
    assert result.summary.status is Status.INTERRUPTED and result.summary.mismatched_rows == 0
    root = _junit(write_check_bundle(tmp_path / "bundle", result), tmp_path)
    error = _cases(root)[("contracts.oracle", "complete")].find("error")
    assert error.get("message").startswith("interrupted (SIGINT) after") and int(root.get("errors")) >= 1


def test_undeclared_nondeterminism_fails_and_declared_is_noted(tmp_path):
    det = Determinism(repeat=2, rows_differing=5, cases=1, examples=[{"replay": "python -m contracts.check --replay f:1:4 --repeat 2"}])
    summary = _summary(rows_checked=8, clauses={"selection": 0}, families={"f": FamilyCounts(rows=8)}, determinism=det)
    cases = _cases(_junit(_bundle(tmp_path, summary), tmp_path))
    failure = cases[("contracts.mine", "determinism")].find("failure")
    assert failure.get("message") == "5 rows differed between calls in 1 cases" and "--replay f:1:4 --repeat 2" in failure.text

    declared = Determinism(repeat=2, rows_differing=5, cases=1, declared="atomics")
    summary = _summary(status=Status.PASS, rows_checked=8, families={"f": FamilyCounts(rows=8)}, determinism=declared)
    root = _junit(write_check_bundle(tmp_path / "declared", CheckResult(summary)), tmp_path)
    assert _cases(root)[("contracts.mine", "determinism")].find("system-out").text.startswith("declared nondeterminism: atomics")
    assert root.get("failures") == "0"


def test_a_failing_status_no_testcase_explains_still_fails(tmp_path):
    summary = _summary(rows_checked=8, mismatched_rows=1, clauses={"selection": 0})  # e.g. counts lost in a merge
    root = _junit(_bundle(tmp_path, summary), tmp_path)
    assert _cases(root)[("contracts.mine", "status")].find("failure").get("message").startswith("status fail")
    assert root.get("failures") == "1"


def test_skips_carry_their_reasons(tmp_path):
    families = {
        "strided": FamilyCounts(rows_skipped=64, skip_reasons={"bias dtype must equal the logits dtype": 64}),
        "random_bf16": FamilyCounts(rows=10, rows_skipped=6, skip_reasons={"M > 4096": 6}),
    }
    summary = _summary(status=Status.PASS, rows_checked=10, rows_skipped=70, clauses={"selection": 0}, families=families)
    root = _junit(_bundle(tmp_path, summary), tmp_path)
    skipped = _cases(root)[("contracts.mine.strided", "selection")].find("skipped").get("message")
    assert skipped == "64 rows skipped, not covered (64 rows: bias dtype must equal the logits dtype)"
    assert "random_bf16: 6 rows skipped, not covered (6 rows: M > 4096)" in root.find("testsuite/system-out").text


@pytest.mark.slow  # a check written as JUnit (5 s)
def test_a_real_bundle_with_skips_and_declared_deviations(tmp_path):
    out = tmp_path / "aiter-model"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        # at 1,000 rows nan_sparse can draw no case whose bias dtype aiter's gate takes: not covered
        assert check.main(["--candidate", "aiter-model", "--rows", "2000", "--device", "cpu", "--out", str(out), "--quiet",
                           "--families", PASSING_AITER_MODEL_FAMILIES]) == 0  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    root = _junit(out, tmp_path)
    cases = _cases(root)
    assert root.get("failures") == "0" and root.get("errors") == "0"
    for family, fam in summary["families"].items():
        for clause, rows in fam["expected_clauses"].items():
            note = cases[(f"contracts.aiter-model.{family}", clause)].find("system-out").text
            assert f"({rows:,} rows in this family, reported as expected)" in note
        if fam["rows"] == 0 and fam["rows_skipped"]:
            reason = next(iter(fam["skip_reasons"]))
            assert reason in cases[(f"contracts.aiter-model.{family}", "selection")].find("skipped").get("message")


@pytest.mark.parametrize("status", ["error", "interrupted"])
def test_a_nightly_check_that_wrote_no_bundle_is_an_error(tmp_path, status):
    bundle = tmp_path / "nightly"
    bundle.mkdir()
    (bundle / "nightly.json").write_text(json.dumps({"candidates": {"c": {"status": status, "reason": f"c was {status}"}}}))
    root = _junit(bundle, tmp_path)
    assert _cases(root)[("contracts.c", "run")].find("error").get("message") == f"c was {status}"


def test_a_candidate_that_raised_is_an_error_and_its_rows_are_not_passes(tmp_path):
    out = tmp_path / "raises"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        code = check.main(["--candidate", "tests.broken_candidates:raises", "--families", "random_bf16", "--rows", "100",
                           "--device", "cpu", "--no-isolate", "--out", str(out), "--quiet"])  # fmt: skip
    assert code == 1
    root = _junit(out, tmp_path)
    cases = _cases(root)
    label = "contracts.tests_broken_candidates_raises"
    error = cases[(label, "run")].find("error")
    assert error.get("message").startswith("the candidate raised in case random_bf16:") and "planted failure" in error.text
    skipped = cases[(f"{label}.random_bf16", "selection")].find("skipped")
    raised = 100 + pinned_rows("random_bf16", 1025, experts=896, topk=16, contract="aiter")  # the budget's rows and random_bf16's pinned cases
    assert skipped.get("message") == f"not compared: the candidate raised on all {raised:,} rows (see the testcase 'run')"
    assert root.get("errors") == "1" and root.get("failures") == "0"
