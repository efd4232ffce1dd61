"""The engines' routers as candidates (contracts.candidates.engines), and the batched candidates of the prefill/decode view.

What is asserted:
- listing candidates (and importing the harness) imports no adapter module
  and loads no engine file; every adapter of kernels.engines.ADAPTERS is a
  candidate with its gates, devices and contract, isolated by default;
- the torch adapters, as candidates, against the installed engines: a check
  under aiter passes with exactly the declared deviations (each one seen,
  none missing), and the same under deepseek-v3 (their grouped path). An
  engine that is not installed skips with the
  reason (available()'s line), never silently;
- ``--engine-path`` reaches the adapters (and the environment workers inherit);
- ``A@M<M0`` / ``B@M>=M0`` route the same rows at the batch sizes they promise.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contracts import check
from contracts.candidates import Candidate, all_candidates, get_candidate, register
from contracts.candidates.engines import ENGINE_DEVIATIONS, MEASURED_WITH
from contracts.commands._common import ExitCode
from kernels import engines

ROOT = Path(__file__).resolve().parent.parent
TORCH_ENGINES = ("sglang-torch", "vllm-torch", "lmdeploy-torch")
# The families that show every declared clause of the torch routers under aiter: bf16 rows (selection,
# weight_accuracy, output_order), exact ties, NaN, underflowed sigmoids and zero sums (renorm_guard).
AITER_FAMILIES = "random_bf16,tie_pool_straddle,nan_sparse,sigmoid_underflow,zero_sum"
GROUPED_FAMILIES = "random_bf16,tie_pool_straddle,nan_sparse,zero_sum"


def _quiet(fn, *args):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return fn(*args)


def _available(name: str):
    module = __import__(engines.ADAPTERS[name].module, fromlist=["available"])
    ok, why = module.available()
    if not ok:
        pytest.skip(f"{name} unavailable here: {why}")
    return module


def test_listing_candidates_imports_no_engine_module():
    code = (
        "import sys, contracts\n"
        "from contracts.candidates import all_candidates\n"
        "names = sorted(all_candidates())\n"
        "loaded = sorted(m for m in sys.modules if m.startswith(('kernels.engines.', 'router_contracts_engines', 'torch', "
        "'sglang', 'vllm', 'lmdeploy', 'flashinfer', 'triton')))\n"
        "print(names); print(loaded)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    assert out.returncode == 0, out.stderr
    names, loaded = (eval(line) for line in out.stdout.strip().splitlines())
    assert set(engines.ADAPTERS) <= set(names)
    assert loaded == ["kernels.engines._locate"], "only the adapter table and its path settings may load"


@pytest.mark.parametrize("name", sorted(engines.ADAPTERS))
def test_every_adapter_is_a_candidate_with_its_gates(name):
    adapter, cand = engines.ADAPTERS[name], all_candidates()[name]
    assert cand.contract == "aiter"
    assert cand.devices == adapter.devices
    assert cand.origin == adapter.module and cand.third_party, "engine code runs isolated by default"
    assert set(cand.expected_deviations) <= {"aiter", "deepseek-v3"}
    ok, why = cand.available("cpu" if "cpu" in cand.devices else "cuda")
    assert isinstance(ok, bool) and why, "available() always says why"
    if name in TORCH_ENGINES:
        assert cand.deviations("aiter"), "the torch routers' measured deviations are declared"
        assert set(MEASURED_WITH[name]) == set(ENGINE_DEVIATIONS[name])


def test_cuda_adapters_are_unavailable_on_the_cpu_with_the_reason():
    for name in ("sglang-radix", "sglang-radix-unsorted", "sglang-triton", "flashinfer-noaux"):
        ok, why = all_candidates()[name].available("cpu")
        assert not ok and "cuda" in why and "cpu" in why


@pytest.mark.parametrize("name", TORCH_ENGINES)
def test_torch_engine_passes_aiter_with_exactly_its_declared_deviations(name, tmp_path):
    _available(name)
    code = _quiet(check.main, ["--candidate", name, "--contract", "aiter", "--rows", "900", "--families", AITER_FAMILIES,
                               "--no-isolate", "--device", "cpu", "--out", str(tmp_path), "--quiet"])  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == ExitCode.OK and summary["status"] == "pass", summary["clauses"]
    assert set(summary["expected_deviations"]) == set(ENGINE_DEVIATIONS[name]["aiter"])
    # Rows showing each declared clause, primary or not (weight_accuracy is never a row's primary clause here:
    # the bf16 rows that break it also choose other experts or another order).
    shown = {clause for f in summary["families"].values() for clause in f["expected_clauses"]}
    assert shown == set(ENGINE_DEVIATIONS[name]["aiter"]), "declared exactly the clauses the run breaks"
    assert summary["mismatched_rows"] == 0


@pytest.mark.parametrize("name", TORCH_ENGINES)
def test_grouped_declarations_are_what_the_harness_measures(name, tmp_path):
    _available(name)
    code = _quiet(check.main, ["--candidate", name, "--contract", "deepseek-v3", "--rows", "700", "--families", GROUPED_FAMILIES,
                               "--no-isolate", "--device", "cpu", "--out", str(tmp_path), "--quiet"])  # fmt: skip
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert code == ExitCode.OK and summary["status"] == "pass", summary["clauses"]
    shown = {clause for f in summary["families"].values() for clause in f["expected_clauses"]}
    declared = set(ENGINE_DEVIATIONS[name]["deepseek-v3"])
    assert declared == set(summary["expected_deviations"])
    assert shown == declared, "this CPU run shows every declared clause"


def test_engine_path_option_reaches_the_adapters(tmp_path):
    _available("sglang-torch")
    saved = os.environ.get(engines.ENV_ENGINE_PATH)
    try:
        out, empty = tmp_path / "bundle", tmp_path / "empty"
        empty.mkdir()
        code = _quiet(check.main, ["--candidate", "sglang-torch", "--rows", "8", "--families", "random_fp32", "--no-isolate",
                                   "--engine-path", f"sglang={empty}", "--out", str(out), "--quiet"])  # fmt: skip
        summary = json.loads((out / "summary.json").read_text())
        assert code == ExitCode.UNAVAILABLE and summary["status"] == "unavailable"
        assert f"--engine-path sglang={empty}" in summary["reason"] and "topk.py" in summary["reason"], summary["reason"]
        assert os.environ[engines.ENV_ENGINE_PATH] == f"sglang={empty}", "workers inherit it"
        assert _quiet(check.main, ["--candidate", "oracle", "--engine-path", "nope=/x"]) == ExitCode.USAGE
    finally:
        engines.set_engine_path(saved)


# ---------------------------------------------------------------- batched candidates (prefill/decode)

_SEEN: list[int] = []


def _recording_route(scores, bias, topk, renormalize, routed_scaling_factor):
    import oracle

    _SEEN.append(scores.shape[0])
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract="aiter")


if "recording-oracle" not in all_candidates():
    register(Candidate(name="recording-oracle", route=_recording_route, description="the oracle, recording its batch sizes",
                       covered=lambda *, rows, **_: rows <= 300))  # fmt: skip


@pytest.mark.parametrize("rows", [1, 5, 63, 64, 65, 200])
def test_batched_candidates_route_the_same_rows_at_the_promised_batch_sizes(rows):
    gen = torch.Generator().manual_seed(rows)
    x, bias = torch.randn(rows, 896, generator=gen), torch.randn(896, generator=gen) * 0.01
    base = get_candidate("recording-oracle").route(x, bias, 16, True, 2.5)
    for name, allowed in (("recording-oracle@M<64", lambda m: m < 64), ("recording-oracle@M>=64", lambda m: m >= 64)):
        _SEEN.clear()
        w, ids = get_candidate(name).route(x, bias, 16, True, 2.5)
        assert _SEEN and all(map(allowed, _SEEN)), (name, _SEEN)
        assert torch.equal(ids, base[1]) and torch.equal(w, base[0])


def test_batched_candidates_ask_the_base_about_the_batches_they_make():
    below, above = get_candidate("recording-oracle@M<64"), get_candidate("recording-oracle@M>=512")
    shape = dict(experts=896, topk=16, dtype=torch.float32, bias_dtype=torch.float32)
    assert below.covered(rows=1000, **shape)  # batches of 63 and the rest
    assert above.covered(rows=10, **shape) is False  # tiled to 512 rows, more than the base serves
    assert below.description.startswith("recording-oracle in batches of fewer than 64")
    assert get_candidate("torch-native@M<8").deviations("aiter") == get_candidate("torch-native").deviations("aiter")


def narrow_gate(*, rows, experts, topk, dtype, bias_dtype):
    """A gate that takes the basics only (for the lazy-gate test below)."""
    return experts == 64


def test_a_lazy_gate_shows_the_real_signature_so_covers_passes_only_what_it_takes():
    from contracts.candidates.lazy import LazyFunction
    from contracts.candidates.registry import _REFUSED_OPTIONS

    lazy = LazyFunction(__name__, "narrow_gate")
    assert inspect.signature(lazy) == inspect.signature(narrow_gate)
    cand = Candidate(name="lazy-narrow", route=lambda *a: None, covered=lazy)
    shape = dict(rows=1, experts=64, topk=4, dtype=torch.float32, bias_dtype=torch.float32, num_expert_group=8, topk_group=4)
    assert cand.covers(**shape) and not cand.covers(**{**shape, "experts": 32})
    assert lazy not in _REFUSED_OPTIONS  # filtered by its signature, not found out by a TypeError
    for c in all_candidates().values():  # every built-in and engine gate that loads here answers with its module's signature
        if isinstance(c.covered, LazyFunction):
            try:
                real = c.covered.target()
            except ImportError:
                continue
            assert inspect.signature(c.covered) == inspect.signature(real), c.name
