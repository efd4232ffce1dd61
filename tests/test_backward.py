"""The backward check (issue 59, item 4): gradients of the routed weights against autograd of the contract in float64.

- the reference (oracle.grad) is the contract's derivative: gradcheck'd against finite differences per family;
- the oracle and torch-native PASS, under every family of score function (sigmoid + bias, softmax pre- and post-,
  grouped), at small sizes;
- each planted defect (tests/planted/backward_defects.py) FAILs with its clause, and only that clause;
- declarations excuse only their own clause, the catch-all within its bound; a check of zero rows is NOT COVERED;
  a backward that raises is the candidate's ERROR, a router without autograd NOT DIFFERENTIABLE;
- the command prints one line per candidate, writes backward.json/backward.md and replays a row.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import oracle
from contracts.backward import GRAD_CLAUSES, GradTolerance, check_backward
from contracts.candidates import Candidate
from contracts.commands import main
from contracts.compare.tolerance import Bounded
from oracle.grad import contract_weights, differentiable_route
from tests.planted import backward_defects as defects

ROOT = Path(__file__).resolve().parent.parent

# small shapes per family: (contract, experts, topk, group arguments)
SMALL = {
    "aiter": dict(experts=32, topk=4),
    "kimi-k2": dict(experts=32, topk=4),
    "deepseek-v3": dict(experts=32, topk=4, num_expert_group=4, topk_group=2),
    "qwen3-moe": dict(experts=16, topk=4),
    "mixtral": dict(experts=8, topk=2),
    "gpt-oss": dict(experts=16, topk=4),
    "mcore-sigmoid": dict(experts=32, topk=4, num_expert_group=4, topk_group=2),
    "mcore-softmax": dict(experts=16, topk=4),
}
ROWS = dict(rows=16, rows_per_case=4)  # four calls: both renormalize values, scaling factors 1.0 and 2.5


def _check(route_or_name, contract, **kw):
    candidate = route_or_name if isinstance(route_or_name, str) else Candidate(name="planted", route=route_or_name, contract=contract)
    return check_backward(candidate, contract, **ROWS, **SMALL[contract], **kw)


# ---------------------------------------------------------------- the reference


@pytest.mark.parametrize("contract", ["aiter", "deepseek-v3", "qwen3-moe", "gpt-oss", "dbrx", "llama4"])
def test_reference_is_the_contracts_derivative(contract):
    c = oracle.get_contract(contract)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 8, generator=g, dtype=torch.float64, requires_grad=True)
    ids = torch.stack([torch.randperm(8, generator=g)[:2] for _ in range(3)])
    bias = torch.randn(8, generator=g, dtype=torch.float64) if c.has_bias else None
    renormalize = c.admitted_renormalize_values[0]
    torch.autograd.gradcheck(lambda t: contract_weights(t, bias, ids, contract=c, renormalize=renormalize, routed_scaling_factor=2.5), (x,))


def test_differentiable_oracle_agrees_with_the_forward_oracle():
    x, b = torch.randn(16, 32), torch.randn(32)
    w, ids = differentiable_route(x, b, 4, True, 2.5, contract="aiter")
    we, ide = oracle.route(x, b, 4, renormalize=True, routed_scaling_factor=2.5, contract="aiter")
    assert torch.equal(ids, ide)
    assert torch.allclose(w, we, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- the oracle and torch-native pass


@pytest.mark.parametrize("contract", list(SMALL))
def test_the_oracle_passes_its_backward_check(contract):
    r = _check("oracle", contract)
    assert r.status == "PASS", (r.error, r.clauses)
    assert r.rows_checked == 16 and r.mismatched == 0 and r.skipped_selection == 0


def test_torch_native_passes_its_backward_check():
    r = _check("torch-native", "aiter")
    assert r.status == "PASS", (r.error, r.clauses)
    assert r.rows_checked == 16


# ---------------------------------------------------------------- each planted defect fails with its clause


@pytest.mark.parametrize("name", list(defects.DEFECTS))
def test_each_planted_defect_fails_with_its_clause(name):
    route, contract, clause = defects.DEFECTS[name]
    r = _check(route, contract)
    assert r.status == "FAIL", (r.status, r.error)
    assert r.rows_checked > 0
    assert {k for k, v in r.clauses.items() if v} == {clause}, r.clauses
    assert all(m.clause == clause and "--replay" in m.replay and "--row" in m.replay for m in r.mismatches)
    assert len(r.mismatches) == r.mismatched  # every mismatched row, each with its replay line


def test_grad_bias_names_the_bias_entry():
    r = _check(defects.bias_gradient, "aiter")
    assert all(m.of == "bias" and m.expected == 0.0 and m.actual != 0.0 for m in r.mismatches)


# ---------------------------------------------------------------- declarations, bounds, statuses


def test_a_declared_clause_excuses_only_itself():
    why = {"grad_renormalization": "the trainer detaches the denominator on purpose"}
    r = _check(defects.detached_renormalization, "aiter", deviations=why)
    assert r.status == "PASS" and r.declared == 8 and r.mismatched == 0
    assert all(m.declared for m in r.mismatches)
    r = _check(defects.detached_renormalization, "aiter", deviations={"grad_scaling": "not this"})
    assert r.status == "FAIL" and r.clauses["grad_renormalization"] == 8


class _Jitter(torch.autograd.Function):
    """identity forward; backward off by 2^-8 relative, up and down by turns over each row's nonzero entries (never
    one factor for the row: no clause but the catch-all explains it)."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        turn = (grad != 0).cumsum(dim=1) % 2
        return grad * (1 + 2.0**-8 * (2 * turn - 1).to(grad.dtype))


def _jittered(scores, bias, topk, renormalize, rsf):
    return oracle.grad.differentiable_route(_Jitter.apply(scores.float()), bias, topk, renormalize, rsf, contract="aiter")


def test_grad_accuracy_is_the_bounded_catch_all():
    assert _check(_jittered, "aiter").clauses["grad_accuracy"] == 16
    loose = _check(_jittered, "aiter", deviations={"grad_accuracy": Bounded("fp32 backward in another order", 2.0**-7)})
    assert loose.status == "PASS" and loose.declared == 16
    tight = _check(_jittered, "aiter", deviations={"grad_accuracy": Bounded("the default bound, 2^-16")})
    assert tight.status == "FAIL" and tight.mismatched == 16


def test_a_backward_that_raises_is_the_candidates_error():
    r = _check(defects.raises_in_backward, "aiter")
    assert r.status == "ERROR" and "RuntimeError: no backward for this fused kernel" in r.error


def test_a_forward_that_raises_is_the_candidates_error():
    def broken(*args, **kwargs):
        raise ValueError("unsupported shape\nsecond line")

    r = _check(broken, "aiter")
    assert r.status == "ERROR" and r.error.startswith("the candidate's forward raised ValueError: unsupported shape")


def test_sys_exit_in_the_candidate_is_its_error_not_the_end_of_the_check():
    def exits(*args, **kwargs):
        raise SystemExit(0)

    r = _check(exits, "aiter")
    assert r.status == "ERROR" and "SystemExit" in r.error


@pytest.mark.slow  # two fresh interpreters importing torch (about 6 s on the 2-core machine)
def test_os_exit_in_the_candidate_is_no_pass_on_the_command_line(tmp_path):
    import subprocess
    import sys

    (tmp_path / "exiting_router.py").write_text("import os\ndef route(*args, **kwargs):\n    os._exit(0)\n")
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    proc = subprocess.run([sys.executable, "-m", "contracts", "backward", "--candidate", "exiting_router:route", "--experts", "16",
                           "--topk", "2", "--rows", "8", "--no-bundle"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 1 and "ended without finishing" in proc.stderr, (proc.returncode, proc.stderr)


def test_a_router_without_autograd_is_not_differentiable():
    r = _check(defects.no_gradient, "aiter")
    assert r.status == "NOT DIFFERENTIABLE" and r.rows_checked == 0


def test_zero_rows_compared_is_not_a_pass():
    def lowest(scores, bias, topk, renormalize, rsf):  # differentiable, but never the contract's selection
        sig = torch.sigmoid(scores.float())
        ids = torch.topk(-(sig + bias), topk, dim=1).indices
        return sig.gather(1, ids) * rsf, ids.to(torch.int32)

    r = _check(lowest, "aiter")
    assert r.status == "NOT COVERED" and r.rows_checked == 0 and r.skipped_selection == 16


def test_a_dense_answer_is_read_as_a_set():
    def dense(scores, bias, topk, renormalize, rsf, detach=False):
        sig = torch.sigmoid(scores.float())
        ids = torch.topk(sig.detach() + bias, topk, dim=1).indices
        mask = torch.zeros_like(sig, dtype=torch.bool).scatter_(1, ids, True)
        probs = torch.where(mask, sig, torch.zeros_like(sig))
        if renormalize:
            total = probs.sum(dim=1, keepdim=True)
            probs = probs / (total.detach() if detach else total)
        return probs * rsf, mask

    assert _check(dense, "aiter").status == "PASS"
    r = _check(lambda *a: dense(*a, detach=True), "aiter")
    assert r.status == "FAIL" and {k for k, v in r.clauses.items() if v} == {"grad_renormalization"}


def test_the_tolerance_is_bounded_data():
    assert GradTolerance().rtol == 2.0**-12
    for bad in (dict(rtol=1.0), dict(atol=float("nan")), dict(rtol=True), dict(atol=-1e-9)):
        with pytest.raises(ValueError, match="GradTolerance"):
            GradTolerance(**bad)
    assert GRAD_CLAUSES[-1] == "grad_accuracy"


def test_an_unknown_declared_clause_is_refused():
    candidate = Candidate(name="declares", route=defects.missing_scaling, contract="aiter")
    candidate.backward_deviations = {"aiter": {"weight_accuracy": "a forward clause"}}
    with pytest.raises(ValueError, match="backward clauses are"):
        check_backward(candidate, "aiter", **ROWS, **SMALL["aiter"])


# ---------------------------------------------------------------- the command


def test_the_command_passes_torch_native(capsys):
    assert main(["backward", "--candidate", "torch-native", "--contract", "aiter", "--experts", "32", "--topk", "4",
                 "--rows", "16", "--no-bundle"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "torch-native" in out and "PASS" in out


def test_the_command_fails_a_defect_writes_its_bundle_and_replays_a_row(capsys, tmp_path):
    spec = "tests.planted.backward_defects:missing_scaling"
    code = main(["backward", "--candidate", spec, "--contract", "aiter", "--experts", "32", "--topk", "4", "--rows", "16",
                 "--rows-per-case", "4", "--out", str(tmp_path / "b")])  # fmt: skip
    assert code == 1
    out = capsys.readouterr().out
    assert "note: grad_scaling:8" in out and "replay: python -m contracts backward" in out
    saved = json.loads((tmp_path / "b" / "backward.json").read_text())
    assert saved["status"] == "FAIL" and saved["clauses"]["grad_scaling"] == 8
    assert "grad_scaling" in (tmp_path / "b" / "backward.md").read_text()
    replay = saved["mismatches"][0]["replay"].split()[3:]  # past "python -m contracts"
    assert main(replay + ["--no-bundle"]) == 1
    out = capsys.readouterr().out
    assert "note: grad_scaling:" in out and "<- differs" in out


def test_the_command_refuses_row_without_replay(capsys):
    assert main(["backward", "--candidate", "oracle", "--row", "3"]) == 2
    assert "--row needs --replay" in capsys.readouterr().err


# ---------------------------------------------------------------- the models' and the trainers' routers


@pytest.mark.slow  # builds a transformers router (about 3 s on the 2-core machine, the first time in a process)
def test_hf_routers_pass_their_backward_check():
    from tests._requires import transformers_for_models

    transformers_for_models()
    for name, contract in (("hf-deepseek-v3", "deepseek-v3"), ("hf-qwen3-moe", "qwen3-moe")):
        r = check_backward(name, contract, **ROWS, **SMALL[contract])
        assert r.status == "PASS", (name, r.error, r.clauses)


@pytest.mark.slow  # imports megatron-core (about 4 s on the 2-core machine)
def test_mcore_routers_pass_their_backward_check():
    pytest.importorskip("megatron.core", reason="megatron-core is not installed (pip install --no-deps 'megatron-core==0.16.1')")
    for name, contract in (("mcore-deepseek-v3", "mcore-sigmoid"), ("mcore-qwen3-moe", "mcore-softmax")):
        r = check_backward(name, contract, **ROWS, **SMALL[contract])
        assert r.status == "PASS", (name, r.error, r.clauses)


# ---------------------------------------------------------------- check --backward (the spelling of the command)


def test_check_backward_runs_the_backward_check_of_each_candidate_and_gives_the_worst_exit(tmp_path, capsys):
    out = tmp_path / "b"
    code = main(["check", "--candidate", "oracle,tests.planted.backward_defects:missing_scaling", "--backward",
                 "--contract", "aiter", "--experts", "64", "--topk", "8", "--out", str(out)])  # fmt: skip
    printed = capsys.readouterr().out
    assert code == 1, printed  # one PASS and one FAIL: the FAIL's exit
    assert "PASS" in printed and "FAIL" in printed and "grad_scaling" in printed
    assert (out / "oracle" / "backward.json").exists()
    assert (out / "tests.planted.backward_defects_missing_scaling" / "backward.json").exists()
    assert main(["check", "--candidate", "oracle", "--backward", "--experts", "64", "--topk", "8", "--out", str(tmp_path / "o")]) == 0


@pytest.mark.parametrize("extra", [["--quick"], ["--repeat", "2"], ["--families", "random_bf16"], ["--against", "oracle"],
                                   ["--exact"], ["--plan"]])  # fmt: skip
def test_check_backward_refuses_the_forward_options_in_one_line(capsys, extra):
    assert main(["check", "--candidate", "oracle", "--backward", *extra]) == 2
    err = capsys.readouterr().err
    assert extra[0] in err and "--backward" in err and len(err.strip().splitlines()) == 1, err
