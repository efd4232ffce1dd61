"""CPU tests of the serial-contract kernels (kernels/serial).

The host build (g++) is compared with a literal per-row Python reference of
contract ``serial`` (docs/contracts.md#contract-serial): scalar loops in numpy
float32, with the platform's ``expf`` called through ctypes because the
contract fixes plain expf (numpy's own float32 exp rounds differently in a few
places). The CUDA source is only compiled here (no GPU in CI); the GPU checks
live in benchmarks/serial_gpu_check.py.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import shutil
import subprocess

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from kernels._build import BuildError  # noqa: E402
from kernels.serial import _native, block_argmax, scan  # noqa: E402

F32 = np.float32
SENTINEL = float(F32(-1e30))
WEIGHT_ULP_TOLERANCE = 0  # the host build and this reference call the same libm expf, so bits agree

_libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_libm.expf.argtypes, _libm.expf.restype = [ctypes.c_float], ctypes.c_float


# ---------------------------------------------------------------- reference


def reference_row(logits, bias, topk, renormalize, rs):
    """Contract `serial` for one row, written out literally. logits, bias: float32 numpy vectors."""
    E = len(logits)
    with np.errstate(all="ignore"):
        sig = [F32(1) / (F32(1) + F32(_libm.expf(float(-x)))) for x in logits]
        biased = [float(s + b) for s, b in zip(sig, bias)]  # fp32 add; float() keeps the value exactly
        ids, w = [], []
        for _ in range(topk):
            best, bi = SENTINEL, 0
            for e in range(E):
                if biased[e] > best:
                    best, bi = biased[e], e
            biased[bi] = SENTINEL
            ids.append(bi)
            w.append(sig[bi])
        rs = F32(rs)
        if renormalize:
            den = F32(0)
            for s in w:
                den = F32(den + s)
            w = [F32(F32(s / F32(den + F32(1e-20))) * rs) for s in w]
        else:
            w = [F32(s * rs) for s in w]
    return np.array(w, dtype=np.float32), np.array(ids, dtype=np.int32)


def reference(scores, bias, topk, renormalize, rs):
    logits = scores.float().numpy()
    b = bias.float().numpy()
    rows = [reference_row(logits[r], b, topk, renormalize, rs) for r in range(logits.shape[0])]
    w = np.stack([r[0] for r in rows]) if rows else np.zeros((0, topk), np.float32)
    ids = np.stack([r[1] for r in rows]) if rows else np.zeros((0, topk), np.int32)
    return w, ids


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ULP distance of fp32 arrays (0 where both are NaN; huge where only one is)."""

    def ordered(x):
        i = x.astype(np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    d = np.abs(ordered(a) - ordered(b))
    both_nan = np.isnan(a) & np.isnan(b)
    one_nan = np.isnan(a) ^ np.isnan(b)
    return np.where(both_nan, 0, np.where(one_nan, 2**40, d))


def assert_matches_reference(scores, bias, topk, renormalize, rs):
    w, ids = scan.route(scores, bias, topk, renormalize, rs)
    ref_w, ref_ids = reference(scores, bias, topk, renormalize, rs)
    assert ids.dtype == torch.int32 and w.dtype == torch.float32
    assert tuple(ids.shape) == tuple(w.shape) == (scores.shape[0], topk)
    bad_rows = np.nonzero((ids.numpy() != ref_ids).any(axis=1))[0]
    assert bad_rows.size == 0, (
        f"ids differ in {bad_rows.size} of {ids.shape[0]} rows; first row {bad_rows[0]}: "
        f"got {ids[bad_rows[0]].tolist()}, expected {ref_ids[bad_rows[0]].tolist()}"
    )
    ulps = ulp_distance(w.numpy(), ref_w)
    worst = np.unravel_index(np.argmax(ulps), ulps.shape) if ulps.size else None
    assert ulps.size == 0 or ulps.max() <= WEIGHT_ULP_TOLERANCE, (
        f"{int((ulps > WEIGHT_ULP_TOLERANCE).sum())} of {ulps.size} weights differ by more than "
        f"{WEIGHT_ULP_TOLERANCE} ULP; worst {int(ulps[worst])} ULP at {tuple(map(int, worst))}: "
        f"got {w.numpy()[worst]!r}, expected {ref_w[worst]!r}"
    )
    return w, ids


# ---------------------------------------------------------------- cases


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def random_case(M, E, dtype, bias_dtype, seed):
    g = _gen(seed)
    scores = (torch.randn(M, E, generator=g) * 2.0).to(dtype)
    bias = (torch.randn(E, generator=g) * 0.05).to(bias_dtype)
    return scores, bias


OPTIONS = [(True, 1.0), (True, 2.5), (False, 1.0), (False, 2.5)]


@pytest.mark.parametrize("renormalize,rs", OPTIONS)
@pytest.mark.parametrize(
    "M,E,topk,dtype,bias_dtype",
    [
        (6, 896, 16, torch.bfloat16, torch.float32),  # Kimi-K3
        (6, 896, 16, torch.float32, torch.float32),
        (6, 384, 8, torch.bfloat16, torch.bfloat16),  # Kimi-K2, bf16 bias upcast
        (16, 64, 8, torch.float32, torch.bfloat16),
        (16, 16, 16, torch.float32, torch.float32),  # topk == E
        (4, 1, 1, torch.float32, torch.float32),
    ],
)
def test_random_rows_match_reference(M, E, topk, dtype, bias_dtype, renormalize, rs):
    scores, bias = random_case(M, E, dtype, bias_dtype, seed=M * 1000 + E + topk)
    assert_matches_reference(scores, bias, topk, renormalize, rs)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_ties_all_equal_row_gives_lowest_ids_in_order(dtype):
    scores = torch.full((3, 896), 0.375, dtype=dtype)
    bias = torch.zeros(896)
    _, ids = assert_matches_reference(scores, bias, 16, True, 2.5)
    assert ids.tolist() == [list(range(16))] * 3


def test_ties_few_distinct_bf16_values_and_saturation():
    g = _gen(7)
    scores = torch.randint(-3, 4, (8, 896), generator=g).to(torch.bfloat16) * 40  # sigmoid saturates to 0 or 1
    scores[4:] = torch.randint(-2, 3, (4, 896), generator=g).to(torch.bfloat16) * 0.5
    bias = torch.randint(0, 2, (896,), generator=g).float() * 0.25
    assert_matches_reference(scores, bias, 16, True, 1.0)


def test_signed_zero_ranking_values_tie_to_lowest_index():
    scores = torch.full((2, 64), float("-inf"))  # sig = +0.0
    bias = torch.tensor([(-0.0 if e % 2 else 0.0) for e in range(64)])
    _, ids = assert_matches_reference(scores, bias, 8, True, 1.0)
    assert ids.tolist() == [list(range(8))] * 2


@pytest.mark.parametrize("renormalize", [True, False])
def test_nan_row_gives_expert_zero_in_every_slot(renormalize):
    scores = torch.full((3, 896), float("nan"), dtype=torch.bfloat16)
    bias = torch.zeros(896)
    w, ids = assert_matches_reference(scores, bias, 16, renormalize, 2.5)
    assert (ids == 0).all()
    assert torch.isnan(w).all()


def test_partial_nan_row_never_takes_nan_experts():
    scores, bias = random_case(4, 896, torch.float32, torch.float32, seed=11)
    scores[:, ::2] = float("nan")
    _, ids = assert_matches_reference(scores, bias, 16, True, 2.5)
    assert (ids % 2 == 1).all()


def test_minus_inf_bias_masks_experts():
    scores, bias = random_case(6, 896, torch.bfloat16, torch.float32, seed=12)
    bias[100:] = float("-inf")
    _, ids = assert_matches_reference(scores, bias, 16, True, 2.5)
    assert (ids < 100).all()


@pytest.mark.parametrize("dead", [float("-inf"), -2e30, float("nan")])
def test_fewer_than_topk_beat_the_sentinel_then_expert_zero_repeats(dead):
    scores, bias = random_case(5, 896, torch.float32, torch.float32, seed=13)
    live = [3, 77, 500, 640, 895]
    mask = torch.ones(896, dtype=torch.bool)
    mask[live] = False
    bias[mask] = dead
    w, ids = assert_matches_reference(scores, bias, 16, True, 2.5)
    assert sorted(ids[:, :5].flatten().tolist()) == sorted(live * 5)
    assert (ids[:, 5:] == 0).all()
    # Expert 0's sig is counted again in every padded slot.
    assert torch.equal(w[:, 5:], w[:, 5:6].expand(-1, 11))


def test_infinite_logits():
    scores, bias = random_case(6, 896, torch.float32, torch.bfloat16, seed=14)
    g = _gen(15)
    where = torch.rand(6, 896, generator=g)
    scores[where < 0.05] = float("inf")
    scores[where > 0.95] = float("-inf")
    scores[5] = float("-inf")
    assert_matches_reference(scores, bias, 16, True, 2.5)
    assert_matches_reference(scores, bias, 16, False, 1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_strided_rows_column_slice_of_wider_buffer(dtype):
    backing, bias = random_case(7, 4096, dtype, torch.float32, seed=16)
    scores = backing[:, 1536 : 1536 + 896]
    assert scores.stride() == (4096, 1)
    w, ids = assert_matches_reference(scores, bias[:896].clone(), 16, True, 2.5)
    w2, ids2 = scan.route(scores.contiguous(), bias[:896].clone(), 16, True, 2.5)
    assert torch.equal(ids, ids2) and torch.equal(w.view(torch.int32), w2.view(torch.int32))


def test_single_row_with_any_row_stride():
    backing, bias = random_case(1, 2000, torch.float32, torch.float32, seed=17)
    assert_matches_reference(backing[:, 10:906], bias[:896].clone(), 16, True, 1.0)


def test_empty_batch():
    w, ids = scan.route(torch.zeros(0, 896), torch.zeros(896), 16, True, 1.0)
    assert tuple(w.shape) == tuple(ids.shape) == (0, 16)


def test_inputs_are_not_modified():
    scores, bias = random_case(4, 896, torch.bfloat16, torch.float32, seed=18)
    before = scores.clone(), bias.clone()
    scan.route(scores, bias, 16, True, 2.5)
    assert torch.equal(scores.view(torch.int16), before[0].view(torch.int16))
    assert torch.equal(bias, before[1])


# ---------------------------------------------------------------- arguments


def _good():
    return torch.zeros(2, 896), torch.zeros(896)


@pytest.mark.parametrize(
    "change,name",
    [
        (lambda s, b: dict(topk=17 + 896), "topk"),
        (lambda s, b: dict(topk=0), "topk"),
        (lambda s, b: dict(topk=2.0), "topk"),
        (lambda s, b: dict(renormalize=1), "renormalize"),
        (lambda s, b: dict(routed_scaling_factor=float("nan")), "routed_scaling_factor"),
        (lambda s, b: dict(routed_scaling_factor="2.5"), "routed_scaling_factor"),
        (lambda s, b: dict(scores=s.half()), "scores.dtype"),
        (lambda s, b: dict(scores=s[0]), "scores.shape"),
        (lambda s, b: dict(scores=s.t().contiguous().t()), "scores.stride"),
        (lambda s, b: dict(scores=s.numpy()), "scores"),
        (lambda s, b: dict(bias=b[:100]), "bias.shape"),
        (lambda s, b: dict(bias=b.double()), "bias.dtype"),
        (lambda s, b: dict(bias=torch.zeros(1792)[::2]), "bias.stride"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(change, name):
    scores, bias = _good()
    kwargs = dict(scores=scores, bias=bias, topk=16, renormalize=True, routed_scaling_factor=1.0)
    kwargs.update(change(scores, bias))
    with pytest.raises(ValueError, match=rf"^{name}"):
        scan.route(**kwargs)


def test_block_argmax_refuses_cpu_tensors():
    with pytest.raises(ValueError, match="scores.device"):
        block_argmax.route(*_good(), 16, True, 1.0)


def test_covered():
    kimi = dict(rows=4096, experts=896, topk=16, dtype=torch.bfloat16, bias_dtype=torch.float32)
    assert scan.covered(**kimi) and block_argmax.covered(**kimi)
    assert not scan.covered(**{**kimi, "topk": 897})
    assert not scan.covered(**{**kimi, "dtype": torch.float16})
    assert scan.covered(**{**kimi, "experts": 20000, "topk": 16})
    assert not block_argmax.covered(**{**kimi, "experts": 20000, "topk": 16})


# ---------------------------------------------------------------- hardware and builds


def test_host_is_supported_and_available_on_cpu():
    assert scan.supported_hardware("cpu")[0]
    assert scan.available("cpu") == (True, scan.supported_hardware("cpu")[1])
    assert scan.build("cpu").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("kernel", [scan, block_argmax])
def test_cuda_is_unsupported_without_a_gpu(kernel):
    for device in ("cuda", "cuda:0", torch.device("cuda")):
        ok, why = kernel.supported_hardware(device)
        assert not ok and why
        assert kernel.available(device) == (False, why)


def test_supported_hardware_never_raises_on_nonsense():
    assert scan.supported_hardware("tpu:3")[0] is False
    assert block_argmax.supported_hardware(None)[0] is False
    assert block_argmax.supported_hardware("cpu")[0] is False


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@needs_nvcc
@pytest.mark.parametrize("kernel", [scan, block_argmax])
def test_cuda_source_compiles_for_sm90(kernel):
    path = kernel.build("cuda", arch="sm_90")
    assert path.exists() and path.stat().st_size > 0


@needs_nvcc
def test_cuda_sources_keep_fused_multiply_add_off(tmp_path):
    """-fmad=false pins every fp32 add and multiply to `.rn` (ptxas may fuse a bare `add.f32`);
    IEEE division, not the approximate one. (The fma and ex2 in the PTX are CUDA's own expf.)"""
    out = tmp_path / "k.ptx"
    cmd = ["nvcc", *_native.CUDA_DEVICE_FLAGS, "-arch=sm_90", "--ptx", "-o", str(out), str(_native.CUDA_SOURCE)]
    subprocess.run(cmd, check=True, capture_output=True)
    ptx = out.read_text()
    assert ".entry" in ptx and "serial_scan_kernel" in ptx and "block_argmax_kernel" in ptx
    assert "div.rn.f32" in ptx and "div.approx" not in ptx and "div.full" not in ptx
    assert "add.rn.f32" in ptx and "add.f32" not in ptx and "mul.f32" not in ptx


def _broken_copy(tmp_path, source):
    broken = tmp_path / source.name
    broken.write_text(source.read_text() + "\nthis is not C++;\n")
    (tmp_path / _native.ROW_HEADER.name).write_text(_native.ROW_HEADER.read_text())
    return broken


def test_host_build_raises_build_error_on_broken_source(tmp_path, monkeypatch):
    monkeypatch.setattr(_native, "HOST_SOURCE", _broken_copy(tmp_path, _native.HOST_SOURCE))
    with pytest.raises(BuildError, match="compile failed"):
        scan.build("cpu")


@needs_nvcc
def test_cuda_build_raises_build_error_on_broken_source(tmp_path, monkeypatch):
    monkeypatch.setattr(_native, "CUDA_SOURCE", _broken_copy(tmp_path, _native.CUDA_SOURCE))
    with pytest.raises(BuildError, match="compile failed"):
        block_argmax.build("cuda", arch="sm_90")
