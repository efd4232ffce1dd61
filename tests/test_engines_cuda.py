"""The CUDA engine adapters on a host without a GPU: the shims compile for sm_90 and their C ABI checks arguments.

- sglang-radix: our shim over SGLang's route_radix.cuh builds for sm_90
  (SGLang's flags, PDL compiled in), reports the kernel's 896/16 shape, and
  refuses bad dtypes and strides before touching a GPU.
- flashinfer-noaux: our shim over FlashInfer's noAuxTcKernels.cu builds for
  sm_90 (fast math, as FlashInfer builds it) with no tvm-ffi runtime symbol
  left to resolve, and refuses bad arguments before any launch.
- sglang-triton: when triton is installed, SGLang's Triton kernel runs
  under Triton's CPU interpreter and matches a plain reference.
- Without a GPU every CUDA adapter says so in one line.

Skips (with the reason) only when nvcc or the engine's files are missing.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from kernels.engines import flashinfer_noaux, sglang_radix, sglang_triton
from kernels.engines._locate import EngineUnavailable

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


def _sources_or_skip(module):
    try:
        return module.sources()
    except EngineUnavailable as exc:
        pytest.skip(f"{module.__name__.rsplit('.', 1)[1]}: {exc}")


@needs_nvcc
def test_sglang_radix_shim_builds_for_sm90_and_checks_arguments():
    _sources_or_skip(sglang_radix)
    path = sglang_radix.build(arch="sm_90")
    lib = sglang_radix._library(str(path))  # loads: no unresolved tvm-ffi symbol
    route = lib.rc_sglang_radix_route
    assert route(None, 7, 896, None, 4, 1.0, 1, None, None, None) == 2  # dtype code
    assert route(None, 1, 898, None, 4, 1.0, 1, None, None, None) == 3  # row stride not a multiple of 4
    assert route(None, 1, 892, None, 4, 1.0, 1, None, None, None) == 3  # row stride < E
    assert route(None, 1, 896, None, 4, 1.0, 64, None, None, None) == 3  # unknown flag
    assert route(None, 1, 896, None, 0, 1.0, 15, None, None, None) == 0  # empty batch: nothing launched
    flags = sglang_radix.compile_flags("sm_90")
    assert "-DSGL_CUDA_ARCH=900" in flags and "-gencode=arch=compute_90a,code=sm_90a" in flags
    assert not any("fast_math" in f for f in flags), "SGLang builds the router without fast math"


@needs_nvcc
def test_sglang_radix_ptx_has_the_pdl_instructions(tmp_path):
    _sources_or_skip(sglang_radix)
    out = tmp_path / "radix.ptx"
    cmd = ["nvcc", *sglang_radix.compile_flags("sm_90"), "--ptx", "-o", str(out), str(sglang_radix.SHIM)]
    subprocess.run(cmd, check=True, capture_output=True)
    ptx = out.read_text()
    assert "griddepcontrol.wait" in ptx and "griddepcontrol.launch_dependents" in ptx


@needs_nvcc
def test_flashinfer_shim_builds_for_sm90_and_checks_arguments():
    _sources_or_skip(flashinfer_noaux)
    path = flashinfer_noaux.build(arch="sm_90")
    undefined = subprocess.run(["nm", "-uD", str(path)], capture_output=True, text=True).stdout
    assert "TVMFFI" not in undefined, "the tvm-ffi binding must be compiled out"
    lib = flashinfer_noaux._library(str(path))
    route = lib.rc_flashinfer_noaux_route
    assert route(None, 0, None, 0, 4, 896, 3, 1, 8, 1.0, 1, None, None, None) == 3  # 3 groups do not divide 896
    assert route(None, 0, None, 0, 4, 384, 1, 1, 33, 1.0, 1, None, None, None) == 3  # topk > 32
    assert route(None, 9, None, 0, 4, 384, 1, 1, 8, 1.0, 1, None, None, None) == 2  # dtype code
    assert route(None, 0, None, 0, 0, 384, 1, 1, 8, 1.0, 1, None, None, None) == 0  # empty batch
    flags, note = flashinfer_noaux.compile_flags("sm_90")
    assert "-use_fast_math" in flags and "cuBLAS" in note


def test_flashinfer_covers_its_own_shapes():
    shape = {"rows": 4, "dtype": "torch.float32", "bias_dtype": "torch.float32"}
    assert flashinfer_noaux.covered(experts=384, topk=8, **shape)  # Kimi-K2
    assert flashinfer_noaux.covered(experts=256, topk=8, num_expert_group=8, topk_group=4, **shape)  # DeepSeek-V3
    assert not flashinfer_noaux.covered(experts=896, topk=16, **shape)  # Kimi-K3: not served
    assert not flashinfer_noaux.covered(experts=384, topk=8, renormalize=False, **shape)  # always renormalizes
    assert sglang_radix.covered(experts=896, topk=16, **shape)
    assert not sglang_radix.covered(experts=384, topk=8, **shape)


def test_cuda_adapters_say_why_they_cannot_run_here():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has a GPU")
    for module in (sglang_radix, flashinfer_noaux, sglang_triton):
        ok, why = module.available()
        assert not ok and why and "\n" not in why, (module.__name__, why)


TRITON_CHECK = textwrap.dedent(
    """
    import torch
    from kernels.engines import sglang_triton
    gen = torch.Generator().manual_seed(0)
    for E, k in ((896, 16), (384, 8)):
        x = torch.randn(3, E, generator=gen)
        x[0, :] = 0.5                       # an all-equal row: ties to the lowest ids, in order
        x[1, 7] = float("nan")
        bias = torch.randn(E, generator=gen) * 0.01
        w, ids = sglang_triton.route(x, bias, k, True, 2.5, pdl=False)
        sig = torch.sigmoid(x)
        choice = torch.where(torch.isnan(sig + bias), torch.tensor(-1e30), sig + bias)
        for row in range(3):
            order = sorted(range(E), key=lambda e: (-choice[row, e].item(), e))[:k]
            assert ids[row].tolist() == order, (E, row, ids[row].tolist(), order)
            ref = sig[row, order] / sig[row, order].sum() * 2.5
            torch.testing.assert_close(w[row], ref, rtol=2e-6, atol=1e-7)
    x = torch.randn(2, 256, generator=gen)
    w, ids = sglang_triton.route(x, torch.zeros(256), 8, True, 1.0, num_expert_group=8, topk_group=4, pdl=False)
    assert ids.shape == (2, 8)
    print("ok")
    """
)


def test_sglang_triton_kernel_under_the_triton_interpreter():
    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed (pip install --no-deps triton runs this test on the CPU interpreter)")
    try:
        sglang_triton.source()
    except EngineUnavailable as exc:
        pytest.skip(f"sglang: {exc}")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run([sys.executable, "-c", TRITON_CHECK], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


@needs_nvcc
def test_extract_takes_only_the_files_the_adapters_read(tmp_path):
    """python -m kernels.engines.extract: a small tree that the adapters read as they read the wheels."""
    from kernels import engines
    from kernels.engines import extract, lmdeploy_torch, sglang_torch, vllm_torch

    for module in (sglang_radix, flashinfer_noaux):
        _sources_or_skip(module)
    try:
        summary = extract.extract(tmp_path / "engines")
    except EngineUnavailable as exc:
        pytest.skip(f"nothing to extract from: {exc}")
    total = sum(info["bytes"] for info in summary.values())
    assert total < 20e6, summary
    saved = os.environ.get(engines.ENV_ENGINE_PATH)
    engines.set_engine_path(str(tmp_path / "engines"))
    try:
        for module in (sglang_torch, vllm_torch, lmdeploy_torch):
            ok, why = module.available()
            assert ok and "--engine-path" in why, why
        # Every header the shims include is there: preprocessing both shims succeeds against the tree alone.
        for shim, flags in ((sglang_radix.SHIM, sglang_radix.compile_flags("sm_90")),
                            (flashinfer_noaux.SHIM, flashinfer_noaux.compile_flags("sm_90")[0])):  # fmt: skip
            assert all(str(tmp_path) in f for f in flags if f.startswith("-I") and "compile_only" not in f)
            proc = subprocess.run(["nvcc", *flags, "-E", "-o", os.devnull, str(shim)], capture_output=True, text=True)
            assert proc.returncode == 0, proc.stderr[-2000:]
    finally:
        engines.set_engine_path(saved)


def test_a_shim_failure_names_the_return_code_and_asks_the_shim_only_for_detailed_codes():
    from kernels.engines._cuda import shim_failure

    asked = []

    class Lib:  # a loaded shim's error entry point
        def rc_x_error(self):
            asked.append(True)
            return b"an illegal memory access was encountered"

    err = shim_failure(Lib(), "rc_x", 4, {3: "bad argument", 4: "kernel launch failed"}, detailed=(4,))
    assert str(err) == "rc_x_route returned 4 (kernel launch failed) an illegal memory access was encountered"
    assert str(shim_failure(Lib(), "rc_x", 3, {3: "bad argument"}, detailed=(4,))) == "rc_x_route returned 3 (bad argument)"
    assert str(shim_failure(Lib(), "rc_x", 9, {}, detailed=(4,))) == "rc_x_route returned 9 (unknown)" and len(asked) == 1


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("rows", [1, 3])
def test_sglang_radix_operands_start_on_16_bytes(dtype, rows):
    """The views the plan pins (logits and bias one element into their buffer, a bias of stride 2) reach the kernel
    as fresh 16-byte-aligned copies with the same values. A contiguous view one element in is what ``contiguous()``
    hands back unchanged: the H100 faulted on ``random_bf16:442551064:1:logits_offset-1`` before ``clone``."""
    import torch

    dt = getattr(torch, dtype)
    base = torch.randn(rows * 896 + 1, dtype=torch.float32).to(dt)
    scores = base[1:].view(rows, 896)
    assert scores.is_contiguous() and scores.data_ptr() % 16
    bias_buffer = torch.randn(2 * 896 + 1)
    for bias in (bias_buffer[1:897], bias_buffer[1::2][:896], bias_buffer[:896].to(torch.bfloat16), None):
        got, row_stride, bias32 = sglang_radix.aligned_operands(scores, bias)
        assert got.data_ptr() % 16 == 0 and row_stride % 4 == 0 and torch.equal(got, scores)
        assert bias32.dtype == torch.float32 and bias32.stride(0) == 1 and bias32.data_ptr() % 16 == 0
        assert torch.equal(bias32, torch.zeros(896) if bias is None else bias.float())
