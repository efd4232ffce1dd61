"""No false green from one call of a candidate (issue 22, item 1).

The candidates live in ``tests/adversarial``. Each test's docstring says what
the harness did before the fix, so a reader can see the test fails there.
"""

import json

from contracts.candidates import Candidate
from contracts.cases import iter_plan
from contracts.check import main
from contracts.reports.schema import Status
from contracts.run.check import check_candidate

import tests.adversarial.static_buffers as static


def _specs(families=("all_equal", "random_fp32"), rows=200, experts=896, topk=16):
    return list(iter_plan(list(families), rows, 0, experts, topk))


def _check(route_or_candidate, specs, **kw):
    cand = route_or_candidate if isinstance(route_or_candidate, Candidate) else Candidate(name=route_or_candidate.__name__, route=route_or_candidate)
    return check_candidate(cand, specs, contract="aiter", device="cpu", **kw).summary


# ---------------------------------------------------------------- item 1: output-buffer reuse


def test_static_output_buffers_wrong_on_every_other_call_fail_with_a_determinism_finding():
    """Before: call 2 overwrote call 1's (wrong) answer in the shared buffer, so the run compared the right
    answer with itself: PASS, "determinism: all identical"."""
    s = _check(static.wrong_every_other_call, _specs(), repeat=2)
    assert s.status is Status.FAIL
    assert s.mismatched_rows == s.rows_checked > 0  # the answer of call 1, as it was given, is wrong
    assert s.determinism.rows_differing == s.rows_checked and s.determinism.cases > 0


def test_nondeterminism_behind_a_reused_buffer_shows_in_a_worker_too(tmp_path):
    """Before: every repeat returned the same buffer, the repeats compared it with itself and the declared
    tie order hid the rest: PASS. The worker runs the same CaseRunner; this goes through it."""
    out = tmp_path / "racy"
    code = main(["--candidate", "tests.adversarial.static_buffers:racy_ties_declared", "--families", "all_equal", "--rows", "40",
                 "--repeat", "2", "--isolate", "--out", str(out), "--quiet"])  # fmt: skip
    s = json.loads((out / "summary.json").read_text())
    assert code == 1 and s["status"] == "fail" and s["isolated"]
    assert s["mismatched_rows"] == 0 and s["expected_deviation_rows"] > 0  # only the repeats catch it
    assert s["determinism"]["rows_differing"] > 0


def test_a_deterministic_static_buffer_candidate_still_passes():
    """The copy does not make a correct static-output kernel look nondeterministic."""

    def correct_into_static(scores, bias, topk, renormalize, rsf):
        w, ids = static.correct(scores, bias, topk, renormalize, rsf)
        out_w, out_ids = static._static(scores.shape[0], topk, scores.device)
        out_w.copy_(w)
        out_ids.copy_(ids)
        return out_w, out_ids

    s = _check(correct_into_static, _specs(), repeat=3)
    assert s.status is Status.PASS and s.determinism.rows_differing == 0
