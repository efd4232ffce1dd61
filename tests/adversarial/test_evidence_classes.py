"""Issue 55, "evidence a case never draws": no PASS on evidence that was never drawn.

Each adversary in ``tests/adversarial/evidence_fields.py`` is right wherever the plan of c7e47c9 looked, and passed
there (PASS, exit 0); here it must FAIL, or be NOT COVERED with the field named:

- a per-expert scale never exercised by captured logits (always ones: gemma4's scale left out passed 3,172 rows);
- a regime the default plan never reached (the model's own routed_scaling_factor of deepseek-v4 and longcat-flash:
  the plan drew 1.0, 2.5, 2.827 and pinned 0.375 and 16);
- batch sizes ``--plan`` listed that no call had (a bulk case's rows, sliced into calls of 16,384 on a CPU), and
  families whose largest call stayed below ``--max-batch``.
"""

from __future__ import annotations

import re

import pytest
import torch
from safetensors.torch import save_file

from contracts.cases.families import FAMILIES
from contracts.cases.plan import CPU_BULK_ROWS, call_sizes, iter_plan, planned_rows
from contracts.commands import main as contracts_main
from contracts.run.checks import run_checks
from tests.adversarial import evidence_fields

ADV = "tests.adversarial.evidence_fields"


def _check(tmp_path, candidate, **kw):
    run = run_checks([candidate], isolate=False, progress=False, out=tmp_path / "bundle", force=True, **kw)
    return run.results[0].summary


# ---------------------------------------------------------------- captured logits: fields they never exercise


@pytest.fixture(scope="module")
def gemma4_logits(tmp_path_factory):
    path = tmp_path_factory.mktemp("gemma4") / "gemma4.safetensors"
    save_file({"logits": torch.randn(2, 300, 128, generator=torch.Generator().manual_seed(5)).to(torch.bfloat16)}, str(path))
    return path


def test_a_router_ignoring_the_per_expert_scale_is_not_covered_on_captured_logits(tmp_path, gemma4_logits):
    s = _check(tmp_path, f"{ADV}:gemma4_scale_ignored", contract="gemma4", logits=gemma4_logits)
    assert s.status.value == "not_covered" and s.mismatched_rows == 0, s  # was PASS: the file's scale is all ones
    assert s.unexercised == ["per-expert scale"] and "not exercised: per-expert scale" in s.reason, s.reason


def test_the_console_names_the_field_and_exits_5(tmp_path, gemma4_logits, capsys):
    # so is a correct router: nothing told it from one that drops the scale
    code = contracts_main(["check", "--candidate", "oracle", "--contract", "gemma4", "--logits", str(gemma4_logits),
                           "--no-isolate", "--quiet", "--out", str(tmp_path / "o")])  # fmt: skip
    out = capsys.readouterr()
    assert code == 5, out
    assert "NOT COVERED" in out.out and "not exercised: per-expert scale" in out.out + out.err, out
    assert contracts_main(["check", "--candidate", "oracle", "--contract", "gemma4", "--logits", str(gemma4_logits), "--no-isolate",
                           "--quiet", "--allow-not-covered", "--out", str(tmp_path / "p")]) == 0  # accepted on request


def test_captured_cases_run_the_call_options_the_model_leaves_out(tmp_path):
    # aiter admits renormalize on and off and any factor; the file's walk runs the defaults (on, 1.0): the first rows
    # again with the others, so a router wrong only with renormalize off fails on captured logits too
    path = tmp_path / "k.safetensors"
    save_file({"logits": torch.randn(200, 64, generator=torch.Generator().manual_seed(1)), "bias": torch.randn(64) * 0.1}, str(path))
    s = _check(tmp_path, "oracle", contract="aiter", logits=path, topk=4)
    assert s.status.value == "pass" and s.unexercised == [], (s.status, s.reason)
    assert {"renormalize=False", "routed_scaling_factor=2.5"} <= {f"{k}={v}" for k, vs in s.by_option.items() for v in vs}, s.by_option
    zero = _check(tmp_path, "oracle", contract="aiter", logits=_without_bias(path), topk=4)  # no bias anywhere: the bias is never drawn
    assert zero.status.value == "not_covered" and zero.unexercised == ["correction bias"], zero.reason
    flat = path.with_name("flat.safetensors")  # one value for every expert: adding it never changes a ranking
    save_file({"logits": torch.randn(200, 64, generator=torch.Generator().manual_seed(1)), "bias": torch.full((64,), 0.5)}, str(flat))
    assert _check(tmp_path, "oracle", contract="aiter", logits=flat, topk=4).unexercised == ["correction bias"]


def _without_bias(path):
    from safetensors.torch import load_file

    out = path.with_name("nobias.safetensors")
    save_file({"logits": load_file(str(path))["logits"]}, str(out))
    return out


# ---------------------------------------------------------------- regimes the default plan never reached


@pytest.mark.parametrize("router, contract", [("deepseek_v4_wrong_at_1_5", "deepseek-v4"), ("longcat_wrong_at_6", "longcat-flash")])
def test_a_router_wrong_only_at_its_models_own_scaling_factor_fails(tmp_path, router, contract):
    s = _check(tmp_path, f"{ADV}:{router}", contract=contract, families=["batch_sizes"], rows=1, max_batch=2)
    assert s.status.value == "fail" and s.mismatched_rows > 0, s  # was PASS on the whole default plan
    assert any(v not in ("1", "2.5", "2.827", "0.375", "16") for v in s.by_option.get("routed_scaling_factor", {})), s.by_option


# ---------------------------------------------------------------- the call sizes --plan lists and the run makes


def test_plan_lists_the_call_sizes_not_the_cases_rows(capsys):
    code = contracts_main(["check", "--candidate", "oracle", "--plan", "--rows", "100000", "--families", "random_fp32,random_bf16",
                           "--max-batch", "16385"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    sizes = {int(n.replace(",", "")) for n in out.split("batch sizes of the calls")[1].split("):", 1)[1].split("\n")[0].split(", ")}
    assert max(sizes) == 16_385 and not sizes - {n for n in sizes if n <= 16_385}, sizes
    assert not {29_630, 49_630} & sizes, sizes  # a bulk case's rows (the old listing), not a call's


def test_the_plan_listing_is_the_runs_calls(tmp_path, capsys):
    evidence_fields.CALLS.clear()
    args = ["--families", "random_fp32", "--rows", "30000", "--experts", "64", "--topk", "4", "--contract", "aiter"]
    s = _check(tmp_path, f"{ADV}:spy", families=["random_fp32"], rows=30_000, experts=64, topk=4, contract="aiter")
    assert s.status.value == "pass", s.reason
    seen = set(evidence_fields.CALLS)
    assert contracts_main(["check", "--candidate", f"{ADV}:spy", "--plan", *args]) == 0
    out = capsys.readouterr().out
    listed = {int(n.replace(",", "")) for n in out.split("batch sizes of the calls")[1].split("):", 1)[1].split("\n")[0].split(", ")}
    assert listed == seen, (sorted(listed ^ seen), out)
    assert {1025, 1000} <= seen and not {n for n in seen if 1025 < n < 4096}  # max batch in one call; bulk in calls of 1,000
    assert re.search(r"calls of at most 1,000 rows", out), out


@pytest.mark.parametrize("rows", [1, 2_000, 100_000, 250_000])
def test_every_family_reaches_max_batch_where_it_can_and_every_run_does(rows):
    names = [n for n in FAMILIES if not FAMILIES[n].needs or n in ("nan_neg_inf_bias", "few_valid", "subnormal", "sigmoid_underflow", "zero_sum")]
    for families in (names, ["random_fp32", "random_bf16"], ["nan_sparse"], ["nan_sparse", "strided"]):
        specs = list(iter_plan(families, rows, 0, 896, 16, bulk_rows=CPU_BULK_ROWS, max_batch=16_385, contract="aiter"))
        assert sum(s.rows for s in specs) == planned_rows(families, rows, max_batch=16_385, experts=896, topk=16, contract="aiter")
        largest = {f: max(n for s in specs if s.family == f for n in call_sizes(s, CPU_BULK_ROWS)) for f in families}
        assert max(largest.values()) == 16_385, (families, rows, largest)  # every run reaches --max-batch
        for f in set(families) & {"batch_sizes", "random_fp32", "random_bf16"}:
            assert largest[f] == 16_385, (f, rows, largest)  # these at every --rows


def test_the_default_main_job_rows_did_not_grow():
    # every family whose budget holds a max-batch case runs it out of its budget: the CPU main job under aiter is
    # still 250,000 rows and 343,024 pinned ones
    import oracle
    from contracts.cases.families import families_for

    c = oracle.get_contract("aiter")
    names = families_for(c)
    assert planned_rows(names, 250_000, max_batch=16_385, experts=896, topk=16, contract="aiter", admitted=c.admitted_options()) == 593_024
    specs = list(iter_plan(names, 250_000, 0, 896, 16, bulk_rows=CPU_BULK_ROWS, max_batch=16_385, contract="aiter", admitted=c.admitted_options()))
    reached = {s.family for s in specs if s.rows == 16_385}
    assert {"batch_sizes", "random_fp32", "random_bf16", "bf16_near_ties"} <= reached, reached


def test_a_router_wrong_only_at_max_batch_fails_in_a_family_without_the_sweep(tmp_path):
    # nan_sparse alone: its cases were 1, 64 and 1,024 rows and its pinned ones 1, 2 and 64, so a router wrong from
    # 1,025 rows (the tests' --max-batch) passed; the run's max-batch case is now its
    s = _check(tmp_path, f"{ADV}:wrong_at_max_batch", families=["nan_sparse"], rows=2_000)
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s


@pytest.mark.slow  # 40,000 rows and random_fp32's pinned cases at 896 experts with the product's sweep: ~30 s
@pytest.mark.usefixtures("default_sweep")
def test_a_router_wrong_above_16384_rows_fails_on_the_random_families_alone(tmp_path):
    s = _check(tmp_path, f"{ADV}:wrong_above_16384_rows", families=["random_fp32"], rows=40_000)
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s  # was PASS: its largest call was 16,384 rows


@pytest.mark.slow  # two candidates and the oracle over a capture and its 34 call contexts' cases: ~10-17 s on the loaded 2-core machine
def test_matrix_on_captured_logits_says_not_exercised_too(tmp_path, gemma4_logits):
    from contracts.run.matrix import run_matrix

    run = run_matrix(["oracle", f"{ADV}:gemma4_scale_ignored"], contract="gemma4", logits=gemma4_logits, isolate=False, progress=False,
                     out=tmp_path / "m")  # fmt: skip
    for member in run.report.candidates:  # was PASS for both
        assert member.status.value == "not_covered" and "not exercised: per-expert scale" in member.reason, member


@pytest.mark.slow  # a pytest session in a subprocess importing torch and the harness: ~20 s on the loaded 2-core machine
def test_the_plugins_clause_tests_say_not_exercised(tmp_path, gemma4_logits):
    # the plugin's 34 tests passed the router that drops the scale on c7e47c9; now the verdict and test_scaling fail
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "contracts.pytest_plugin", "--pyargs",
                           "contracts.conformance", "-q", "-n", "0", "--candidate", f"{ADV}:gemma4_scale_ignored", "--contract", "gemma4",
                           "--logits", str(gemma4_logits), "--no-isolate"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(root)})  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED" in out and "test_scaling[captured.L0]" in out and "not exercised: per-expert scale" in out, out


@pytest.mark.parametrize("device, expected", [(None, "cuda"), ("cpu", "cpu")])
def test_the_plan_lists_the_device_the_check_would_take(monkeypatch, capsys, device, expected):
    # seen on the GPU host: --plan listed a CPU plan (CPU call sizes) while the check ran the candidate on cuda
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    args = ["check", "--candidate", f"{ADV}:spy", "--plan", "--families", "random_fp32", "--rows", "3000", "--experts", "64",
            "--topk", "4", "--contract", "aiter", *(["--device", device] if device else [])]  # fmt: skip
    assert contracts_main(args) == 0
    assert f"device {expected}," in capsys.readouterr().out
