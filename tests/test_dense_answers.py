"""Dense answers (issue 59, build item 1): ``(probs [M, E], routing_map [M, E] bool)`` read as a set of k experts.

A broken router never passes: every malformation of the dense form (tests/adversarial/dense_answers.py) FAILs
``validity``, on its row where it is a row's fault and on the case where the tensors are wrong as a whole; the oracle's
answer scattered into dense form PASSes, under a contract whose column order is fixed too, and is never blamed
``output_order``; a wrong value in a dense answer is blamed as in an ``[M, k]`` answer. The harness never raises on
one. Library calls on small cases (``CaseRunner`` + ``compare_case``, the path every command takes), then the
worker's pipe, then ``check`` itself, in process and isolated.
"""

from __future__ import annotations

import json
import pickle

import pytest
import torch

import oracle
from contracts.candidates.calling import Answer, CaseRunner, Malformed
from contracts.cases.build import build_case
from contracts.cases.spec import CaseSpec, admitted_fields
from contracts.compare import compare_case, expected_for
from contracts.compare import attribution as A
from contracts.compare.dense import FAULT_FEWER, FAULT_MORE, FAULT_OUTSIDE, DenseAnswer, read_answer
from contracts.compare.expected import agrees
from contracts.compare.verdicts import row_blame
from tests.adversarial import dense_answers as D

ROW_FAULTS = {"one_more": FAULT_MORE, "one_fewer": FAULT_FEWER, "empty_row": FAULT_FEWER, "prob_outside": FAULT_OUTSIDE,
              "nan_outside": FAULT_OUTSIDE, "inf_outside": FAULT_OUTSIDE}  # fmt: skip
WHOLE = {"probs_bf16": "torch.float32", "probs_narrow": "shapes", "probs_rows_short": "shapes", "map_int": "torch.bool",
         "map_uint8": "torch.bool", "map_meta": "meta", "probs_meta": "meta"}  # fmt: skip


def _case(contract: str, family: str = "random_fp32", rows: int = 8, seed: int = 3):
    c = oracle.get_contract(contract)
    spec = CaseSpec(family, seed, rows, c.experts, c.topk, n_group=c.n_group, topk_group=c.topk_group, bias=c.bias != "none",
                    **admitted_fields(c.admitted_options()))  # fmt: skip
    return c, build_case(spec)


def _checked(name: str, contract: str = D.CONTRACT, family: str = "random_fp32", rows: int = 8):
    """(the call's answer, the comparison) of router ``name`` on one small case, as check makes them."""
    c, case = _case(contract, family, rows)
    call = CaseRunner(D.make(name, c)).run(case)
    assert isinstance(call.result, (Answer, Malformed)), call.result  # neither raised nor fatal
    actual = call.answer if call.answer is not None else call.result.message
    return actual, compare_case(case, expected_for(case, c), (actual,) if isinstance(actual, str) else actual, c, deviations={})


@pytest.mark.parametrize("contract", ["aiter", "qwen3-moe", "kimi-k2", "deepseek-v3"])
@pytest.mark.parametrize("family", ["random_fp32", "all_equal", "nan_sparse"])
def test_the_oracle_in_dense_form_passes_every_row_exactly(contract, family):
    actual, out = _checked("right", contract, family)
    assert isinstance(actual, DenseAnswer) and int(actual.faults.count_nonzero()) == 0
    assert out.verdict_counts["exact"] == out.rows and out.verdict_counts["mismatch"] == 0, out.verdict_counts


@pytest.mark.parametrize("name,fault", sorted(ROW_FAULTS.items()))
def test_a_row_the_map_gets_wrong_is_validity_on_that_row(name, fault):
    actual, out = _checked(name)
    assert out.case_problem is None and out.clause_rows == {"validity": 1}, out.clause_rows
    assert out.verdict_counts["exact"] == out.rows - 1, out.verdict_counts  # the other rows stand
    (detail,) = [d for d in out.rows_detail if d["clause"] == "validity"]
    assert detail["row"] == 1
    text = " ".join(str(r) for r in detail.get("reasons", [])) or str(detail)
    expected_words = {FAULT_MORE: "more than topk", FAULT_FEWER: "fewer than topk", FAULT_OUTSIDE: "outside the routing_map"}[fault]
    assert expected_words in text, detail
    assert int(actual.faults[1]) == fault and int(actual.faults.count_nonzero()) == 1


@pytest.mark.parametrize("name,words", sorted(WHOLE.items()))
def test_dense_tensors_wrong_as_a_whole_are_validity_on_the_case(name, words):
    actual, out = _checked(name)
    assert isinstance(actual, str) and words in actual and "dense answer" in actual, actual
    assert out.clause_rows == {"validity": out.rows}, out.clause_rows


def test_a_map_not_bool_is_refused_on_an_empty_batch_too():
    """No row to carry it: the case's problem (the tally makes it the candidate's error)."""
    c = oracle.get_contract(D.CONTRACT)
    actual = read_answer((torch.zeros(0, c.experts), torch.zeros(0, c.experts)), rows=0, experts=c.experts, topk=c.topk,
                         device=torch.device("cpu"))  # fmt: skip
    assert isinstance(actual, str) and "torch.bool" in actual


def test_a_nan_weight_at_a_mapped_expert_is_blamed_as_in_an_m_by_k_answer():
    """A value, not a malformed map: the clause an [M, k] answer with the same NaN weight gets (the contract's weight
    there may itself be NaN, where a NaN prob is right)."""
    actual, dense = _checked("nan_mapped")
    assert int(actual.faults.count_nonzero()) == 0
    c, case = _case(D.CONTRACT)
    exp = expected_for(case, c)
    w, ids = exp.weights.clone(), exp.ids.clone()
    w[1, 0] = float("nan")
    plain = compare_case(case, exp, (w, ids), c, deviations={})
    assert dense.clause_rows == plain.clause_rows and dense.clause_rows and "validity" not in dense.clause_rows, (dense.clause_rows, plain.clause_rows)


@pytest.mark.parametrize("contract", ["aiter", "qwen3-moe"])  # both fix the column order
def test_a_wrong_set_is_blamed_for_the_set_never_the_order(contract):
    _, out = _checked("selection", contract)
    assert out.verdict_counts["mismatch"] == 1, out.verdict_counts
    assert "output_order" not in out.clauses_broken and "tie_order" not in out.clauses_broken, out.clauses_broken
    assert set(out.clause_rows) <= {"selection", "weight_accuracy", "renormalization"} and "selection" in out.clauses_broken, out.clauses_broken
    assert all(d.get("output_order") == "any" for d in out.rows_detail)  # shown as sets


def test_row_blame_and_agrees_read_a_dense_answer_as_a_set():
    """The diagnosis (row_blame) and --against (agrees) compare a dense answer as the comparison does."""
    c, case = _case("aiter")
    exp = expected_for(case, c)
    right = CaseRunner(D.make("right", c)).run(case).answer
    assert not bool(row_blame(case, exp, right, c).any())
    assert bool(agrees(exp, right, c).all())
    more = CaseRunner(D.make("one_more", c)).run(case).answer
    broken = row_blame(case, exp, more, c)
    assert broken[:, A.INDEX["validity"]].nonzero().squeeze(1).tolist() == [1]


def test_a_dense_answer_crosses_the_workers_pipe_with_its_faults():
    from contracts.candidates.worker import _decode_answer, _encode_answer

    c, case = _case(D.CONTRACT)
    actual = CaseRunner(D.make("one_fewer", c)).run(case).answer
    back = _decode_answer(pickle.loads(pickle.dumps(_encode_answer(actual, case.scores.device))), "cpu")
    assert isinstance(back, DenseAnswer) and torch.equal(back.faults, actual.faults)
    assert torch.equal(back[0], actual[0]) and torch.equal(back[1], actual[1])
    assert torch.equal(pickle.loads(pickle.dumps(actual)).faults, actual.faults)


def test_repeated_calls_of_a_dense_router_agree():
    c, case = _case(D.CONTRACT)
    call = CaseRunner(D.make("right", c), repeat=2).run(case)
    assert call.differing_rows == 0 and isinstance(call.answer, DenseAnswer)


def _library_check(name: str):
    """``check_candidate`` (run/candidate_check.py: the call, the comparison, the tally and the diagnosis) on two small cases."""
    from contracts.candidates import Candidate
    from contracts.cases import iter_plan
    from contracts.run.candidate_check import check_candidate

    c = oracle.get_contract(D.CONTRACT)
    specs = list(iter_plan(["random_fp32"], 32, 0, c.experts, c.topk))
    return check_candidate(Candidate(name=name, route=D.make(name)), specs, contract=D.CONTRACT, device="cpu",
                           command="python -m contracts check --candidate X").summary  # fmt: skip


@pytest.mark.parametrize("name", ["right", "one_more", "prob_outside", "selection"])
def test_a_check_of_a_dense_router(name):
    s = _library_check(name)
    clauses = {k for k, n in s.clauses.items() if n}
    if name == "right":
        assert s.status.value == "pass" and s.mismatched_rows == 0 and s.rows_checked > 0, s.clauses
        return
    assert s.status.value == "fail" and "output_order" not in clauses, s.clauses
    assert clauses == ({"validity"} if name != "selection" else clauses - {"validity"}), s.clauses
    # the diagnosis never reads a dense answer's malformed rows or its column order as "the output in any order"
    texts = " ".join(d.get("text", "") for d in (s.diagnosis or []))
    assert "any order" not in texts, texts


def _check_cli(tmp_path, name, *extra):
    from contracts.commands import main

    out = tmp_path / name
    code = main(["check", "--candidate", f"tests.adversarial.dense_answers:{name}", "--contract", D.CONTRACT, "--rows", "16",
                 "--families", "random_fp32", "--max-batch", "1", "--out", str(out), "--quiet", *extra])  # fmt: skip
    (summary,) = out.rglob("summary.json")
    return code, json.loads(summary.read_text())


@pytest.mark.slow  # the whole command, pinned cases and bundle included: 5-10 s each on the 2-core CPU
@pytest.mark.parametrize("name,status", [("right", "pass"), ("one_more", "fail"), ("map_int", "fail")])
def test_check_takes_a_dense_answer(tmp_path, name, status):
    code, s = _check_cli(tmp_path, name)
    assert s["status"] == status, s
    assert code == (0 if status == "pass" else 1)
    if status == "fail":
        assert {k for k, n in s["clauses"].items() if n} == {"validity"}, s["clauses"]


@pytest.mark.slow  # starts a worker process (it imports torch): ~5-10 s on the 2-core CPU
def test_check_isolated_takes_a_dense_answer_through_the_worker(tmp_path):
    code, s = _check_cli(tmp_path, "one_fewer", "--isolate")
    assert s["status"] == "fail" and {k for k, n in s["clauses"].items() if n} == {"validity"}, s
    code, s = _check_cli(tmp_path, "right", "--isolate")
    assert s["status"] == "pass", s


@pytest.mark.parametrize("name,ok", [("right", True), ("one_more", True), ("map_int", False), ("probs_bf16", False)])
def test_bench_times_a_dense_answer_a_check_takes(name, ok):
    """bench asks what a check asks of the answer as a whole (a row's fault is the check's finding, not bench's)."""
    from contracts.run.bench_point import answer_problem

    c, case = _case(D.CONTRACT)
    value = D.make(name, c)(case.scores, case.bias, case.topk, case.renormalize, case.routed_scaling_factor)
    problem = answer_problem(value, rows=case.spec.rows, topk=case.topk, scores=case.scores)
    assert (problem is None) == ok, problem


@pytest.mark.slow  # run_checks on a captured file, pinned contexts and bundle included: 8-15 s on the 2-core CPU
@pytest.mark.parametrize("name,status", [("right", "not_covered"), ("prob_outside", "fail")])
def test_check_logits_takes_a_dense_answer(tmp_path, name, status):
    """``check --logits``: a captured file's rows, routed by a dense router, go the same way (the right one's every row
    matches; a file alone is not the evidence a PASS needs: not_covered, docs/robustness.md)."""
    from safetensors.torch import save_file

    from contracts.run.checks import run_checks

    c = oracle.get_contract(D.CONTRACT)
    path = tmp_path / "logits.safetensors"
    save_file({"logits": torch.randn(1, 24, c.experts, generator=torch.Generator().manual_seed(5))}, str(path))
    run = run_checks([f"tests.adversarial.dense_answers:{name}"], contract=D.CONTRACT, logits=str(path), isolate=False, progress=False,
                     out=tmp_path / "bundle", force=True)  # fmt: skip
    s = run.results[0].summary
    assert s.status.value == status and s.rows_checked > 0, (s.status, s.clauses)
    assert (s.mismatched_rows == 0) == (status != "fail"), s.clauses
    if status == "fail":
        assert {k for k, n in s.clauses.items() if n} == {"validity"}, s.clauses


@pytest.mark.slow  # the matrix command over three candidates, pinned cases included: ~12 s on the 2-core CPU
def test_matrix_takes_a_dense_answer(tmp_path):
    """A dense router routes as torch-native does (0 rows apart, under a contract that fixes the column order); a dense
    router with a wrong set is apart from both and FAILs on selection."""
    from contracts.commands import main

    right, wrong = "tests.adversarial.dense_answers:right", "tests.adversarial.dense_answers:selection"
    code = main(["matrix", "--candidate", f"{right},{wrong},torch-native", "--contract", D.CONTRACT, "--rows", "16", "--families",
                 "random_fp32", "--max-batch", "1", "--out", str(tmp_path / "m"), "--quiet"])  # fmt: skip
    assert code == 1
    (found,) = (tmp_path / "m").rglob("matrix.json")
    m = json.loads(found.read_text())
    pairs = {(p["a"], p["b"]): p for p in m["pairs"] + m["oracle"]}
    assert pairs[(right, "torch-native")]["rows_differing"] == 0 and pairs[(right, "oracle")]["rows_differing"] == 0, pairs
    broken = pairs[(wrong, "oracle")]
    assert broken["rows_differing"] > 0 and set(broken["causes"]) == {"selection"}, broken
    assert not any("output_order" in p["clauses_broken"] for p in pairs.values()), pairs


# ---------------------------------------------------------------- trace-diff: a trace holding probs and routing_map


def _traces(tmp_path, contract: str, attack: str = "right", fmt: str = "safetensors", layers: int = 2, tokens: int = 24):
    """(a dense trace of router ``attack``, an [M, k] trace of the oracle) of the same logits and bias."""
    from safetensors.torch import save_file

    c = oracle.get_contract(contract)
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(layers, tokens, c.experts, generator=gen)
    bias = torch.randn(layers, c.experts, generator=gen) * 0.1 if c.has_bias else None
    dense, plain = {"probs": [], "routing_map": []}, {"ids": [], "weights": []}
    for i in range(layers):
        b = None if bias is None else bias[i]
        w, ids = oracle.route(logits[i], b, c.topk, renormalize=c.default_renormalize, routed_scaling_factor=c.routed_scaling_factor, contract=c)
        p, m = D.make(attack, c)(logits[i], b, c.topk, c.default_renormalize, c.routed_scaling_factor)
        dense["probs"].append(p.bfloat16() if fmt == "pt" else p)  # a trainer's probs in bf16: read as floats
        dense["routing_map"].append(m)
        plain["ids"].append(ids)
        plain["weights"].append(w)
    extra = {"logits": logits, **({"bias": bias} if bias is not None else {})}
    out = []
    for name, tensors in (("dense", dense), ("plain", plain)):
        stacked = {k: torch.stack(v).contiguous() for k, v in tensors.items()} | extra
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "safetensors":
            save_file(stacked, str(path))
        else:
            torch.save(stacked, path)
        out.append(path)
    return out


@pytest.mark.parametrize("contract,fmt", [("aiter", "safetensors"), ("qwen3-moe", "pt")])  # aiter: probs' order is not rank order
def test_trace_diff_reads_a_dense_trace_as_a_set(tmp_path, contract, fmt):
    from contracts.run.trace_diff import diff_traces

    dense, plain = _traces(tmp_path, contract, fmt=fmt)
    d = diff_traces(dense, plain, contract)
    assert d.flips == 0 and d.rows > 0, d.to_json()
    assert any("dense trace has no column order" in n for n in d.notes), d.notes


@pytest.mark.parametrize("attack", ["one_more", "one_fewer", "prob_outside"])
def test_trace_diff_blames_a_malformed_dense_row_on_validity(tmp_path, attack):
    from contracts.run.trace_diff import diff_traces

    dense, plain = _traces(tmp_path, "qwen3-moe", attack)
    d = diff_traces(dense, plain, "qwen3-moe")
    assert d.flips == 2 and d.causes["router"] == 2 and d.router_clauses == {"validity": 2}, d.to_json()  # row 1 of each layer
    assert d.router_sides == {"a": 2, "b": 0, "both": 0}, d.router_sides


def test_a_dense_trace_with_a_map_not_bool_is_one_line(tmp_path):
    from safetensors.torch import save_file

    from contracts.run.trace_diff import TraceError, open_trace

    path = tmp_path / "t.safetensors"
    save_file({"probs": torch.zeros(4, 8), "routing_map": torch.zeros(4, 8, dtype=torch.uint8), "logits": torch.zeros(4, 8)}, str(path))
    with pytest.raises(TraceError, match="routing_map in uint8"):
        open_trace(path)


# ---------------------------------------------------------------- the mcore candidates answer dense


@pytest.mark.slow  # imports megatron-core: ~4 s on the 2-core CPU
@pytest.mark.parametrize("family", ["kimi-k2", "deepseek-v3"])
def test_the_mcore_candidates_answer_megatrons_dense_form(family):
    """mcore-<family> returns Megatron's (probs, routing_map), probs as fp32, and the harness reads it with no fault
    (check --candidate mcore-kimi-k2 --contract kimi-k2 --rows 2000: the same verdict and mismatched rows as the
    [M, k] conversion it replaced)."""
    pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install --no-deps 'megatron-core==0.16.1')")
    from contracts.candidates import get_candidate

    c, case = _case(family, "random_bf16", rows=16)
    call = CaseRunner(get_candidate(f"mcore-{family}").route).run(case)
    assert isinstance(call.answer, DenseAnswer) and int(call.answer.faults.count_nonzero()) == 0, call.result


@pytest.mark.slow  # a pytest run in a subprocess with its check: ~10 s on the 2-core CPU
def test_the_pytest_plugin_fails_only_the_validity_tests_of_a_malformed_dense_router(tmp_path):
    import re

    from tests.test_pytest_plugin import SUITE, _pytest

    code, out = _pytest(tmp_path, *SUITE, "--candidate", "tests.adversarial.dense_answers:one_more", "--contract", D.CONTRACT,
                        "--rows", "16", "--max-batch", "1", "--no-isolate", "-q", "-rf")  # fmt: skip
    assert code == 1, out
    failed = re.findall(r"^FAILED (\S+)", out, flags=re.M)
    assert failed and all("test_validity[" in f or "test_check_verdict" in f for f in failed), failed


def test_search_reads_a_dense_answer_through_call_once():
    """``search`` makes its own calls (``call_once``): the same reading."""
    from contracts.candidates.fenced_call import call_once

    c, case = _case(D.CONTRACT)
    answer, exc, changed = call_once(D.make("one_fewer", c), case)
    assert exc is None and not changed and isinstance(answer, DenseAnswer) and int(answer.faults[1]) == FAULT_FEWER


def test_against_a_dense_reference():
    """``--against`` a dense router: the right one stands in for the oracle (compared as a set: the candidate in the
    contract's order agrees on every row); a malformed one is no reference (the check ends, against_failed)."""
    from contracts.candidates import Candidate
    from contracts.cases import iter_plan
    from contracts.run.candidate_check import check_candidate

    c = oracle.get_contract(D.CONTRACT)
    specs = list(iter_plan(["random_fp32"], 32, 0, c.experts, c.topk))
    plain = Candidate(name="oracle-plain", route=lambda s, b, k, r, f, **kw: oracle.route(s, b, k, renormalize=r, routed_scaling_factor=f, contract=c))

    def against(name):
        return check_candidate(plain, specs, contract=D.CONTRACT, device="cpu", against=Candidate(name=name, route=D.make(name))).summary

    s = against("right")
    assert s.status.value == "pass" and s.mismatched_rows == 0, s.clauses
    s = against("one_more")
    assert s.status.value == "error" and "malformed" in s.error.message, s.error
