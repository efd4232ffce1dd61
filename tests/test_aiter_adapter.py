"""kernels.adapters.aiter: argument handling, gates, lazy import, and the --against plumbing.

Real aiter needs ROCm and an MI300/MI350 GPU, so these tests drive the
adapter through ``tests.standins.aiter_standin`` (aiter's signature on top of
the behavioural model; NOT aiter) via the adapter's test seam
``$ROUTER_AITER_MODULE``. They prove what the adapter passes and returns,
not that aiter agrees with the model: that is the nightly's
``--candidate aiter --against aiter-model`` on an AMD host (docs/aiter.md).
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
import torch

from contracts.check import main
from contracts.candidates import get_candidate
from kernels.adapters import aiter as adapter
from kernels.adapters import aiter_model
from tests.standins import aiter_standin

ROOT = Path(__file__).resolve().parents[1]
STANDIN = "tests.standins.aiter_standin"
DRIFTED = "tests.standins.aiter_lowest_ties"
ON_CPU = "tests.standins.candidates:aiter_on_cpu"
E, K = 896, 16
# These expect this machine's answer (no ROCm torch); on an AMD host the gates may pass.
not_rocm = pytest.mark.skipif(bool(torch.version.hip), reason="expects a host without ROCm torch")


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.setenv(adapter.ENV_MODULE, STANDIN)
    aiter_standin.calls.clear()
    return aiter_standin


def _inputs(rows=5, dtype=torch.bfloat16, bias_dtype=None, seed=0):
    gen = torch.Generator().manual_seed(seed)
    scores = (torch.randn(rows, E, generator=gen) * 2).to(dtype)
    bias = (torch.randn(E, generator=gen) * 0.05).to(bias_dtype or dtype)
    return scores, bias


# ---------------------------------------------------------------- what route passes to aiter


def test_route_passes_the_kimi_arguments(standin):
    scores, bias = _inputs()
    adapter.route(scores, bias, K, False, 2.5)
    (call,) = standin.calls
    assert (call["num_expert_group"], call["topk_group"]) == (1, 1)
    assert call["need_renorm"] is False and call["routed_scaling_factor"] == 2.5
    assert call["gating_ptr"] == scores.data_ptr() and call["gating_dtype"] == torch.bfloat16


def test_route_returns_the_tensors_aiter_filled_fp32_and_int32_with_one_row_stride(standin):
    scores, bias = _inputs(rows=7)
    weights, ids = adapter.route(scores, bias, K, True, 1.0)
    (call,) = standin.calls
    assert (call["weights_ptr"], call["ids_ptr"]) == (weights.data_ptr(), ids.data_ptr())
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    assert tuple(weights.shape) == tuple(ids.shape) == (7, K)
    assert call["weights_stride"] == call["ids_stride"] == (K, 1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_bias_is_converted_to_the_logits_dtype_before_the_call(standin, dtype):
    scores, bias = _inputs(dtype=dtype, bias_dtype=torch.float32)
    adapter.route(scores, bias, K, True, 1.0)
    (call,) = standin.calls
    assert call["bias_dtype"] == dtype
    assert torch.equal(call["bias"], bias.to(dtype))
    assert bias.dtype == torch.float32  # the caller's bias is left alone


def test_results_are_the_standins_and_inputs_are_unchanged(standin):
    scores, bias = _inputs(rows=9, bias_dtype=torch.float32)
    before = scores.clone(), bias.clone()
    weights, ids = adapter.route(scores, bias, K, True, 2.827)
    w_ref, i_ref = aiter_model.route(scores, bias.to(scores.dtype), K, True, 2.827)
    assert torch.equal(ids, i_ref) and torch.equal(weights, w_ref)
    assert torch.equal(scores, before[0]) and torch.equal(bias, before[1])


def test_dense_logits_are_passed_without_a_copy(standin):
    scores, bias = _inputs(rows=4)
    adapter.route(scores, bias, K, True, 1.0)
    (call,) = standin.calls
    assert call["gating_ptr"] == scores.data_ptr() and call["gating_stride"] == (E, 1)


def test_a_column_slice_of_a_wider_buffer_is_copied_into_dense_rows(standin):
    # aiter reads row t at t * E, so a row stride > E must not reach it.
    scores, bias = _inputs(rows=4)
    backing = torch.zeros(4, 37 + E + 11, dtype=scores.dtype)
    backing[:, 37 : 37 + E] = scores
    view = backing[:, 37 : 37 + E]
    weights, ids = adapter.route(view, bias, K, True, 1.0)
    (call,) = standin.calls
    assert call["gating_stride"] == (E, 1) and call["gating_ptr"] != view.data_ptr()
    w_ref, i_ref = adapter.route(scores, bias, K, True, 1.0)
    assert torch.equal(ids, i_ref) and torch.equal(weights, w_ref)


def test_misaligned_bias_is_copied(standin):
    scores, bias = _inputs(rows=2)
    backing = torch.zeros(E + 1, dtype=bias.dtype)
    backing[1:] = bias
    adapter.route(scores, backing[1:], K, True, 1.0)  # starts 2 bytes into an allocation
    (call,) = standin.calls
    assert torch.equal(call["bias"], bias)


def test_zero_rows_return_empty_outputs_without_calling_aiter(standin):
    scores, bias = _inputs(rows=0)
    weights, ids = adapter.route(scores, bias, K, True, 1.0)
    assert tuple(weights.shape) == tuple(ids.shape) == (0, K) and standin.calls == []


def test_column_stride_other_than_one_is_refused_before_aiter_is_called(standin):
    scores, bias = _inputs(rows=3)
    wide = torch.zeros(3, 2 * E, dtype=scores.dtype)
    with pytest.raises(ValueError, match=r"scores\.stride\(1\)=2 is not 1.*scores\.contiguous\(\)"):
        adapter.route(wide[:, ::2], bias, K, True, 1.0)
    with pytest.raises(ValueError, match=r"scores\.stride\(1\)"):
        adapter.route(torch.zeros(E, 3, dtype=scores.dtype).t(), bias, K, True, 1.0)
    assert standin.calls == []


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(scores=torch.zeros(E)), r"scores\.shape=\(896,\) is not 2-D"),
        (dict(scores=torch.zeros(2, E, dtype=torch.int32)), r"scores\.dtype=torch\.int32 is not supported"),
        (dict(scores=[[0.0] * E]), r"scores=list is not a tensor"),
        (dict(bias=torch.zeros(E - 1, dtype=torch.bfloat16)), r"bias\.shape=\(895,\) does not match E=896"),
        (dict(bias=torch.zeros(E, dtype=torch.int64)), r"bias\.dtype=torch\.int64 is not a floating type"),
        (dict(bias=torch.zeros(E, dtype=torch.bfloat16, device="meta")), r"bias\.device=meta differs from scores\.device=cpu"),
        (dict(topk=E + 1), r"topk=897 is outside 1\.\.E=896"),
        (dict(topk=0), r"topk=0 is outside 1\.\.E=896"),
        (dict(topk=16.0), r"topk=16\.0 is not an integer"),
        (dict(renormalize=1), r"renormalize=1 is not a bool"),
        (dict(routed_scaling_factor="2.5"), r"routed_scaling_factor='2\.5' is not a number"),
        (dict(routed_scaling_factor=float("nan")), r"routed_scaling_factor=nan is not finite"),
    ],
)
def test_bad_arguments_are_named_in_the_error(standin, change, message):
    scores, bias = _inputs(rows=2)
    args = dict(scores=scores, bias=bias, topk=K, renormalize=True, routed_scaling_factor=1.0)
    args.update(change)
    with pytest.raises(ValueError, match=message):
        adapter.route(**args)
    assert standin.calls == []


# ---------------------------------------------------------------- covered shapes


@pytest.mark.parametrize(
    "experts, topk, dtype, bias_dtype, ok",
    [
        (896, 16, torch.bfloat16, torch.bfloat16, True),  # Kimi-K3
        (896, 16, torch.float32, torch.float32, True),
        (896, 16, torch.float16, torch.float16, True),
        (224, 16, torch.bfloat16, torch.bfloat16, True),  # pruned Kimi-K3
        (384, 8, torch.bfloat16, torch.bfloat16, True),  # Kimi-K2
        (896, 16, torch.bfloat16, torch.float32, False),  # aiter would round the fp32 bias to bf16
        (896, 16, torch.float32, torch.bfloat16, False),
        (32, 8, torch.bfloat16, torch.bfloat16, False),  # <= 32 experts per group: not the generic kernel
        (900, 16, torch.bfloat16, torch.bfloat16, False),  # not a multiple of 32
        (64, 65, torch.float32, torch.float32, False),  # topk > E
        (128, 65, torch.float32, torch.float32, False),  # topk > 64: one output column per lane
        (896, 16, torch.float64, torch.float64, False),
    ],
)
def test_covered(experts, topk, dtype, bias_dtype, ok):
    assert adapter.covered(rows=64, experts=experts, topk=topk, dtype=dtype, bias_dtype=bias_dtype) is ok


def test_covered_rows_stop_where_aiter_switches_kernels():
    shape = dict(experts=E, topk=K, dtype=torch.bfloat16, bias_dtype=torch.bfloat16)
    assert adapter.covered(rows=0, **shape) and adapter.covered(rows=4096, **shape)
    assert adapter.covered(rows=adapter.GENERIC_MAX_ROWS, **shape)
    assert not adapter.covered(rows=adapter.GENERIC_MAX_ROWS + 1, **shape)


# ---------------------------------------------------------------- gates


class _Props:
    def __init__(self, arch, name="AMD Instinct MI300X"):
        self.gcnArchName, self.name = arch, name


@pytest.fixture
def rocm_host(monkeypatch):
    """Pretend to be a ROCm host with one GPU of the given arch."""

    def make(arch="gfx942:sramecc+:xnack-", gpu=True):
        monkeypatch.setattr(torch.version, "hip", "6.3.42131")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
        monkeypatch.setattr(torch.cuda, "get_device_properties", lambda index: _Props(arch))

    return make


@not_rocm
def test_this_host_is_not_rocm():
    ok, why = adapter.supported_hardware("cuda")
    assert not ok and "needs a ROCm build of torch" in why and "torch.version.hip is None" in why


@pytest.mark.parametrize("arch", ["gfx942:sramecc+:xnack-", "gfx950"])
def test_supported_archs(rocm_host, arch):
    rocm_host(arch)
    ok, why = adapter.supported_hardware("cuda")
    assert ok and why.startswith(arch.split(":")[0])


def test_wrong_arch_and_no_gpu_are_named(rocm_host):
    rocm_host("gfx90a:sramecc+:xnack-")
    ok, why = adapter.supported_hardware("cuda:0")
    assert not ok and "gfx90a" in why and "gfx942, gfx950" in why
    rocm_host(gpu=False)
    ok, why = adapter.supported_hardware("cuda")
    assert not ok and why.startswith("no GPU")
    assert adapter.supported_hardware("cpu") == (False, "aiter runs on ROCm GPUs (torch device 'cuda'), not on cpu")


def test_available_says_what_is_missing(rocm_host, monkeypatch, tmp_path):
    # not ROCm and not installed: both in one line
    monkeypatch.setenv(adapter.ENV_MODULE, "no_such_aiter_module")
    ok, why = adapter.available("cuda")
    assert not ok and "ROCm" in why and "not installed either: pip install amd-aiter" in why and "\n" not in why
    rocm_host()
    ok, why = adapter.available("cuda")
    assert not ok and why.startswith("no_such_aiter_module is not installed: pip install amd-aiter")
    # installed, but the import fails (e.g. no ROCm libraries)
    (tmp_path / "broken_aiter.py").write_text("raise ImportError('libamdhip64.so: cannot open shared object file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(adapter.ENV_MODULE, "broken_aiter")
    assert adapter.available("cuda") == (False, "import broken_aiter failed: ImportError: libamdhip64.so: cannot open shared object file")
    # imports, but has no such op
    monkeypatch.setenv(adapter.ENV_MODULE, "json")
    ok, why = adapter.available("cuda")
    assert not ok and "json" in why and "has no biased_grouped_topk" in why
    monkeypatch.setenv(adapter.ENV_MODULE, STANDIN)
    ok, why = adapter.available("cuda")
    assert ok and "gfx942" in why and STANDIN in why


def test_build_makes_one_call(standin):
    adapter.build("cpu")
    (call,) = standin.calls
    assert call["gating_dtype"] == torch.bfloat16 and call["weights_stride"] == (K, 1)


@not_rocm
def test_registered_candidate():
    c = get_candidate("aiter")
    assert (c.contract, c.devices, c.origin) == ("aiter", ("cuda",), "kernels.adapters.aiter")
    assert set(c.deviations("aiter")) == {"renorm_guard", "nan_last", "weight_accuracy"}
    assert c.covered(rows=1, experts=896, topk=16, dtype=torch.bfloat16, bias_dtype=torch.bfloat16)
    ok, why = c.available("cuda")
    assert not ok and "ROCm" in why and "\n" not in why
    assert c.available("cpu") == (False, "aiter runs on cuda, not on cpu")


# ---------------------------------------------------------------- import hygiene and the CLI on this host


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != adapter.ENV_MODULE}  # the real module name, "aiter"
    return {**env, **extra}


def _python(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(**env_extra), capture_output=True, text=True, timeout=120)


@not_rocm
def test_importing_the_harness_never_imports_aiter(tmp_path):
    # A booby-trapped aiter on the path: importing it would fail loudly.
    trap = tmp_path / "trap" / "aiter"
    trap.mkdir(parents=True)
    (trap / "__init__.py").write_text("raise RuntimeError('aiter was imported')\n")
    code = textwrap.dedent(
        """
        import sys
        import contracts, contracts.candidates.builtin, kernels, kernels.adapters, kernels.adapters.aiter
        from contracts.candidates import all_candidates, get_candidate
        all_candidates()
        c = get_candidate("aiter")
        print(c.available("cuda")[1])
        c.covered(rows=1, experts=896, topk=16, dtype=None, bias_dtype=None)
        print("aiter" in sys.modules)
        """
    )
    done = _python(code, {"PYTHONPATH": f"{trap.parent}{os.pathsep}{ROOT}"})
    assert done.returncode == 0, done.stderr
    reason, imported = done.stdout.strip().splitlines()
    assert imported == "False"
    assert "ROCm" in reason and "not installed" not in reason  # found on the path, yet not imported


@not_rocm
def test_cli_exits_3_with_a_one_line_reason_here(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "contracts.check", "--candidate", "aiter", "--out", str(tmp_path / "b"), "--quiet"],
        cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("unavailable: aiter: "), done.stderr
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["status"] == "unavailable" and summary["rows_checked"] == 0
    assert lines[0] == f"unavailable: aiter: {summary['reason']}"


# ---------------------------------------------------------------- --against through the adapter (stand-ins)


def _check(tmp_path, argv):
    tmp_path.mkdir(parents=True, exist_ok=True)  # --out's folder must exist
    out = tmp_path / "bundle"
    code = main([*argv, "--out", str(out), "--quiet"])
    return code, json.loads((out / "summary.json").read_text()), out


@pytest.mark.slow  # a check of the adapter (4 s)
def test_adapter_candidate_shows_the_declared_deviations(standin, tmp_path):
    fams = "random_fp32,zero_sum,few_valid,nan_neg_inf_bias"
    code, s, out = _check(tmp_path, ["--candidate", ON_CPU, "--families", fams, "--rows", "400"])
    assert code == 0, (out / "report.md").read_text()
    assert s["mismatched_rows"] == 0
    assert all(d["observed"] for d in s["expected_deviations"].values()), s["expected_deviations"]


@pytest.mark.slow  # a check of the stand-in (5 s)
def test_faithful_standin_matches_the_model_bit_for_bit(standin, tmp_path):
    code, s, out = _check(tmp_path, ["--candidate", ON_CPU, "--against", "aiter-model", "--exact", "--rows", "1000",
                                  "--allow-not-covered"])  # fmt: skip  # bit-identity of the rows checked; coverage is another test's
    assert code == 0, (out / "report.md").read_text()
    assert s["against"] == "aiter-model" and s["exact_rows"] == s["rows_checked"] > 500


@pytest.mark.slow  # a failing check with its diagnosis (4 s)
def test_model_drift_in_tie_order_is_reported_column_by_column(monkeypatch, tmp_path):
    monkeypatch.setenv(adapter.ENV_MODULE, DRIFTED)
    fams = "all_equal,tie_pool_straddle,tie_pool_above,random_fp32"
    code, s, out = _check(tmp_path, ["--candidate", ON_CPU, "--against", "aiter-model", "--families", fams, "--rows", "600"])
    assert code == 1
    assert {c: n for c, n in s["clauses"].items() if n} == {"tie_order": s["mismatched_rows"]}
    assert s["families"]["random_fp32"]["mismatched_rows"] == 0  # no ties, no drift
    cells = pd.read_csv(out / "mismatches.csv")
    assert set(cells["clause"]) == {"tie_order"} and (cells["col"] >= 0).all()
    assert (cells["expected_id"] != cells["actual_id"]).all()
    assert "--against aiter-model" in (out / "report.md").read_text()


CLEAN = "random_bf16,random_fp32,bf16_near_ties,tie_pool_straddle,tie_pool_above,nan_sparse,inf_logits,saturated,all_zero,signed_zero,strided,batch_sizes"
# all_equal: its zero-bias pins hold rows whose one logit underflows the sigmoid, a zero sum that aiter divides (NaN)
DEGENERATE = "nan_dense,nan_neg_inf_bias,few_valid,zero_sum,subnormal,all_equal"


@pytest.mark.slow  # a matrix of the adapter and the oracle: ~9 s
def test_dispatch_consistency_is_red_only_where_aiter_deviates(standin, tmp_path):
    # The oracle stands in for radix4 (which claims the contract exactly): radix4 --against aiter.
    code, s, out = _check(tmp_path / "degenerate", ["--candidate", "oracle", "--against", ON_CPU, "--families", DEGENERATE, "--rows", "300"])
    assert code == 1
    for family in DEGENERATE.split(","):
        assert s["families"][family]["mismatched_rows"] > 0, family
    cells = pd.read_csv(out / "mismatches.csv")
    assert set(cells["family"]) == set(DEGENERATE.split(",")) and cells["col"].between(0, K - 1).all()
    code, s, out = _check(tmp_path / "clean", ["--candidate", "oracle", "--against", ON_CPU, "--families", CLEAN, "--rows", "500",
                                                 "--allow-not-covered"])  # fmt: skip  # agreement on the rows both serve
    assert code == 0, (out / "report.md").read_text()
    assert s["mismatched_rows"] == 0 and s["rows_checked"] > 200
