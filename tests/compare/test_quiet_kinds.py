"""Rows of a kind the run already has its sample of are counted, never recorded again; mismatches always are."""

from __future__ import annotations

import oracle
from contracts.cases.build import build_case
from contracts.cases.plan import plan
from contracts.cases.spec import CaseSpec
from contracts.compare import compare_case, expected_for
from contracts.reports.cells import SAMPLE_CELLS_PER_FAMILY
from contracts.reports.json_records import to_json
from contracts.run.candidate_check import check_candidate

AITER = oracle.get_contract("aiter")


def _reversed_answer():
    case = build_case(CaseSpec("random_fp32", 5, 512, 64, 8))
    exp = expected_for(case, AITER)
    return case, exp, (exp.weights.flip(1).contiguous(), exp.ids.flip(1).contiguous())


def test_quiet_expected_rows_are_counted_but_not_recorded():
    case, exp, actual = _reversed_answer()
    declared = {"output_order": "returns its top-k in reverse"}
    loud = compare_case(case, exp, actual, AITER, deviations=declared)
    quiet = compare_case(case, exp, actual, AITER, deviations=declared, quiet=frozenset({"expected", "near_tie"}))
    assert loud.verdict_counts == quiet.verdict_counts and loud.verdict_counts["expected"] == 512
    assert loud.expected_rows == quiet.expected_rows == {"output_order": 512}
    assert loud.cells_total == quiet.cells_total > 0
    assert loud.rows_detail and loud.cells_rows > 0
    assert quiet.rows_detail == [] and quiet.cells_rows == 0


def test_quiet_never_silences_a_mismatch():
    case, exp, actual = _reversed_answer()
    out = compare_case(case, exp, actual, AITER, deviations={}, quiet=frozenset({"expected", "near_tie"}))
    assert out.verdict_counts["mismatch"] == 512 and out.clause_rows == {"output_order": 512}
    assert out.rows_detail and out.cells_rows > 0


def _reversing(scores, bias, topk, renormalize, rsf):
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf)
    return w.flip(1).contiguous(), ids.flip(1).contiguous()


def test_a_long_run_keeps_its_sample_and_exact_counts_once_the_kind_goes_quiet(monkeypatch):
    from contracts.candidates import Candidate
    from contracts.compare import verdicts

    recorded = []
    add_cells = verdicts._add_cells
    monkeypatch.setattr(verdicts, "_add_cells", lambda *a, **k: recorded.append(1) or add_cells(*a, **k))
    cand = Candidate("reverser", _reversing, expected_deviations={"aiter": {"output_order": "reverses"}})
    specs = plan(["random_fp32"], 6000, 0, 64, 8)
    result = check_candidate(cand, specs, contract="aiter", device="cpu")
    s = to_json(result.summary)
    assert s["status"] == "pass" and s["rows_checked"] == 6000
    assert s["expected_deviations"]["output_order"]["rows"] == 6000 and s["cells_total"] == 6000 * 8
    assert len(result.cells) == SAMPLE_CELLS_PER_FAMILY and set(result.cells.verdict) == {"expected"}
    assert len(result.details) == 5
    # once the sample was full the later cases recorded nothing (they were counted above)
    assert 0 < len(recorded) < len(specs)


def _reversing_and_dropping_nan(scores, bias, topk, renormalize, rsf):
    """Declares output_order (every row) and nan_last, which only rows with NaN logits meet: a rare clause."""
    return _reversing(scores, bias, topk, renormalize, rsf)


def test_a_clause_with_its_examples_goes_quiet_alone_and_the_examples_kept_are_the_same(monkeypatch):
    # A router declaring a clause it rarely meets kept every declared row of every case recorded, until that clause had
    # its examples. Now each declared clause whose examples no later row can replace goes quiet on its own: the run's
    # details, cells and counts are those of a run with no quieting at all.
    from contracts.candidates import Candidate
    from contracts.run import tally as tally_module

    cand = Candidate("reverser", _reversing_and_dropping_nan,
                     expected_deviations={"aiter": {"output_order": "reverses", "nan_last": "never met here"}})  # fmt: skip
    specs = plan(["random_fp32", "tie_pool_straddle"], 6000, 0, 64, 8)
    seen = []
    quiet_kinds = tally_module.Tally.quiet_kinds
    monkeypatch.setattr(tally_module.Tally, "quiet_kinds", lambda self, spec: seen.append(q := quiet_kinds(self, spec)) or q)
    quieted = check_candidate(cand, specs, contract="aiter", device="cpu")
    assert any(k.startswith("expected:") for q in seen for k in q), seen[-3:]  # the per-clause quiet was taken
    monkeypatch.setattr(tally_module.Tally, "quiet_kinds", lambda self, spec: frozenset())
    loud = check_candidate(cand, specs, contract="aiter", device="cpu")
    assert to_json(quieted.summary)["expected_deviations"] == to_json(loud.summary)["expected_deviations"]
    assert [to_json(d) for d in quieted.details] == [to_json(d) for d in loud.details]
    assert quieted.cells.equals(loud.cells) and quieted.summary.cells_total == loud.summary.cells_total
