"""CPU tests of the serial-contract radix kernel (kernels/radix4/serial.py, SerialContract).

The kernel template of radix4_router.h under SerialContract, compiled for the
host with lanes emulated by fibers (tests/test_radix4_build.py's emulation),
must give the same bits as the serial scan's host build (kernels.serial.scan on
the CPU): both call the platform's expf and round every fp32 step the same way,
so ids and weight bits must agree exactly, in every launch shape (a block of
several warps per token, a warp per token, two tokens per block, wave64), on
both selection paths (the rank step and the radix rounds forced), for the
three shapes (896, 16), (384, 8), (224, 16). The scan itself is checked against
a literal reference in tests/test_serial_kernels.py; here a few rows are also
checked against tests/reference.serial_row directly.

The cases are the serial contract's edges: ties to the lowest index, all-equal
rows, NaN (never taken), the -1e30 floor (values at or below it never win, just
above it they do), fewer than topk winners (expert 0 fills, counted again),
+-inf, signed zeros, strided rows, renormalize off.
"""

from __future__ import annotations

import ctypes
import shutil

import numpy as np
import pytest
import torch

import kernels.radix4 as radix4
import kernels.radix4.pdl as radix4_pdl
import kernels.radix4.serial as radix4_serial
import kernels.radix4.serial_pdl as radix4_serial_pdl
from kernels.serial import scan
from reference import serial_row
from test_radix4_build import ONE_PATH_LAUNCHES, sm90_build, SHAPE_IDS, SHAPE_PARAMS, _build_emulation, emulated_route, emulated_sigmoid

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


@pytest.fixture(scope="module", params=[0, 1024], ids=["radix-rounds-only", "rank-step-only"])
def emulation_one_path(tmp_path_factory, request):
    return _build_emulation(tmp_path_factory, rank_max=request.param, launches=ONE_PATH_LAUNCHES)


def _cases():
    g = torch.Generator().manual_seed(21)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    for E, K in ((896, 16), (384, 8), (224, 16)):
        yield f"{E}/{K} random bf16 / fp32 bias", (randn(5, E) * 2).bfloat16(), randn(E) * 0.05, K
        yield f"{E}/{K} random fp32 / bf16 bias", randn(3, E) * 3, (randn(E) * 0.1).bfloat16(), K
        yield f"{E}/{K} all equal", torch.full((2, E), 0.375, dtype=torch.bfloat16), torch.zeros(E), K
        floor = randn(3, E) * 0.05
        floor[E // 3 :] = -1e30  # r == -1e30 exactly (the sigmoid is absorbed): never taken
        floor[: E // 3 : 3] = -9.9e29  # just above the floor: taken
        yield f"{E}/{K} bias at and just above the -1e30 floor", randn(3, E), floor[0], K
        few = torch.full((E,), float("-inf"))
        few[[3, E // 2, E - 1]] = 0.0
        yield f"{E}/{K} three experts beat the floor: expert 0 fills", randn(2, E), few, K
        nan = randn(4, E)
        nan[0] = float("nan")
        nan[1, 10:] = float("nan")
        nan[2, ::2] = float("nan")
        nan[3, 1:] = float("nan")  # only expert 0 is a number: it wins, then fills
        yield f"{E}/{K} NaN rows", nan, randn(E) * 0.05, K
    E, K = 896, 16
    yield "ties: few bf16 levels, bias levels", (torch.randint(-3, 4, (4, E), generator=g) * 0.5).bfloat16(), torch.randint(0, 2, (E,), generator=g) * 0.25, K
    yield "ties: saturated sigmoid", torch.randint(-3, 4, (3, E), generator=g).float() * 40, torch.zeros(E), K
    straddle = torch.full((4, E), -2.0)
    for row in range(4):
        perm = torch.randperm(E, generator=g)
        straddle[row, perm[: 2 + 4 * row]] = 3.0
        straddle[row, perm[2 + 4 * row : 42 + 4 * row]] = 1.0
    yield "tie pool straddling the cutoff", straddle.bfloat16(), torch.zeros(E), K
    inf = randn(3, E)
    inf[:, ::7] = float("inf")
    inf[:, 3::11] = float("-inf")
    inf[0] = float("-inf")  # every sig +0: ids 0..15, weights 0 (den = 1e-20)
    yield "+-inf logits, all -inf row", inf, torch.zeros(E), K
    plus = torch.zeros(E)
    plus[[5, 700, 64, 3]] = float("inf")  # r = +inf ties: lowest index first
    yield "+inf bias on four experts", randn(2, E), plus, K
    yield "signed zeros (sig 0, bias -0/+0)", torch.full((2, E), float("-inf")), torch.tensor([(-0.0 if e % 3 else 0.0) for e in range(E)]), K
    yield "-inf bias, mostly NaN logits", torch.where(torch.rand(2, E, generator=g) < 0.97, float("nan"), 1.0), torch.where(torch.rand(E, generator=g) < 0.5, float("-inf"), 0.0), K
    crowded = randn(2, E) * 0.1
    crowded[0, (torch.arange(E) >> 2) % 32 == 0] += 5.0
    crowded[1, (torch.arange(E) >> 2) % 128 == 0] += 5.0
    yield "top values crowded on one lane", crowded, torch.zeros(E), K


CASES = list(_cases())
OPTIONS = [(True, 2.5), (False, 1.0)]


def _bits(w: torch.Tensor) -> torch.Tensor:
    return w.contiguous().view(torch.int32)


def assert_bit_identical(got, want, what):
    (w, ids), (rw, rids) = got, want
    bad = (ids != rids).any(1).nonzero().flatten().tolist()
    assert not bad, f"{what}: ids differ in rows {bad}; first: {ids[bad[0]].tolist()} vs {rids[bad[0]].tolist()}"
    wbad = (_bits(w) != _bits(rw)).any(1).nonzero().flatten().tolist()
    assert not wbad, f"{what}: weight bits differ in rows {wbad}; first: {w[wbad[0]].tolist()} vs {rw[wbad[0]].tolist()}"


@needs_gxx
@pytest.mark.parametrize("lanes,block", SHAPE_PARAMS, ids=SHAPE_IDS)
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_emulated_serial_kernel_is_bit_identical_to_the_serial_scan(emulation, lanes, block, case):
    _, scores, bias, topk = case
    for renormalize, rs in OPTIONS:
        got = emulated_route(emulation, lanes, scores, bias, topk, renormalize, rs, block=block, contract="serial")
        assert_bit_identical(got, scan.route(scores, bias, topk, renormalize, rs), f"renormalize={renormalize}")


@pytest.mark.slow  # two emulation builds of its own (one selection path forced each), ~10 s of g++ each when cold
@needs_gxx
@pytest.mark.parametrize("lanes,block", [(32, 1), (32, 0), (32, 4), (64, 1)],
                         ids=["warp32-4-warps", "warp32-warp-per-token", "warp32-2-tokens-per-block", "wave64-4-waves"])  # fmt: skip
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_selection_path_alone_is_bit_identical(emulation_one_path, lanes, block, case):
    _, scores, bias, topk = case
    got = emulated_route(emulation_one_path, lanes, scores, bias, topk, True, 2.5, block=block, contract="serial")
    assert_bit_identical(got, scan.route(scores, bias, topk, True, 2.5), "renormalize=True")


@needs_gxx
@pytest.mark.parametrize("lanes,block", SHAPE_PARAMS, ids=SHAPE_IDS)
def test_strided_rows_and_scalar_loads(emulation, lanes, block):
    g = torch.Generator().manual_seed(22)
    for E, K in ((896, 16), (384, 8), (224, 16)):
        backing = (torch.randn(3, E + 105, generator=g) * 2).bfloat16()
        scores, bias = backing[:, 3 : 3 + E], torch.randn(E, generator=g) * 0.05
        got = emulated_route(emulation, lanes, scores, bias, K, True, 2.5, block=block, vec=False, contract="serial")
        assert_bit_identical(got, scan.route(scores, bias, K, True, 2.5), f"{E}/{K} strided")


@needs_gxx
@pytest.mark.parametrize("case", CASES[:18:3] + CASES[-6:], ids=[c[0] for c in CASES[:18:3] + CASES[-6:]])
def test_matches_the_literal_serial_reference(emulation, case):
    """tests/reference.serial_row, from the emulation's own sigmoid: independent of kernels.serial."""
    _, scores, bias, topk = case
    sig = emulated_sigmoid(emulation, scores, "serial").numpy()
    ranking = (torch.from_numpy(sig) + bias.float()).numpy()  # fp32 add
    w, ids = emulated_route(emulation, 32, scores, bias, topk, True, 2.5, block=1, contract="serial")
    for row in range(scores.shape[0]):
        rw, rids = serial_row(list(sig[row]), list(ranking[row]), topk, True, 2.5)
        assert ids[row].tolist() == rids, f"row {row}"
        assert np.array_equal(w[row].numpy().view(np.int32), np.array(rw, dtype=np.float32).view(np.int32)), f"row {row}"


@needs_gxx
def test_all_equal_and_all_nan_rows_follow_the_scan(emulation):
    _, ids = emulated_route(emulation, 32, torch.zeros(1, 896), torch.zeros(896), 16, True, 1.0, block=1, contract="serial")
    assert ids[0].tolist() == list(range(16))
    w, ids = emulated_route(emulation, 32, torch.full((1, 224), float("nan")), torch.zeros(224), 16, True, 1.0, contract="serial")
    assert ids[0].tolist() == [0] * 16 and torch.isnan(w).all()


@needs_gxx
def test_the_programmatic_launch_hooks_run_once_per_thread(emulation):
    counts = (ctypes.c_int * 2)()
    emulation.emu_hook_counts(counts)
    before = list(counts)
    emulated_route(emulation, 32, torch.randn(3, 896), torch.zeros(896), 16, True, 1.0, block=1, contract="serial")
    emulation.emu_hook_counts(counts)
    assert [counts[0] - before[0], counts[1] - before[1]] == [3 * 128, 3 * 128]  # 3 blocks of 4 warps


# ---------------------------------------------------------------- the wrapper and the CUDA build


def test_api_shape_matches_radix4():
    for module in (radix4_serial, radix4_pdl, radix4_serial_pdl):
        for fn in ("supported_hardware", "build", "available", "covered", "route"):
            assert callable(getattr(module, fn)), f"{module.__name__}.{fn}"
    # The serial contract keeps the Kimi shapes; radix4 (and its PDL launch) serves the model shapes too.
    assert radix4_serial.SHAPES == radix4_serial_pdl.SHAPES == radix4.KIMI_SHAPES == {(896, 16), (384, 8), (224, 16)}
    assert radix4_pdl.SHAPES == radix4.SHAPES > radix4.KIMI_SHAPES
    assert (radix4_serial.NAME, radix4_pdl.NAME, radix4_serial_pdl.NAME) == ("radix4-serial", "radix4-pdl", "radix4-serial-pdl")


def test_covered_gates_shape_rows_and_dtypes():
    ok = dict(rows=4096, experts=224, topk=16, dtype=torch.bfloat16, bias_dtype=torch.float32)
    assert radix4_serial.covered(**ok) and radix4_serial_pdl.covered(**ok)
    assert radix4_serial.covered(**{**ok, "experts": 896}) and radix4_serial.covered(**{**ok, "experts": 384, "topk": 8})
    assert not radix4_serial.covered(**{**ok, "rows": 4097})
    assert not radix4_serial.covered(**{**ok, "experts": 256, "topk": 8})
    assert not radix4_serial.covered(**{**ok, "dtype": torch.float16})


def test_route_names_the_bad_argument():
    scores, bias = torch.zeros(2, 224), torch.zeros(224)
    with pytest.raises(ValueError, match="scores.device=cpu"):
        radix4_serial.route(scores, bias, 16)
    with pytest.raises(ValueError, match=r"\(E, topk\)=\(224, 8\).*radix4-serial"):
        radix4_serial.route(scores, bias, 8)
    with pytest.raises(ValueError, match="pdl=1 is not a bool"):
        radix4._check_pdl(1, scores.device, "radix4")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_every_module_says_why_in_one_line():
    for module in (radix4_serial, radix4_pdl, radix4_serial_pdl):
        for ok, why in (module.supported_hardware(), module.available()):
            assert ok is False and why and "\n" not in why and "GPU" in why


@pytest.mark.slow  # compiles the kernel for sm_90 with nvcc (tens of seconds; the spill test's compile, shared)
@needs_nvcc
def test_serial_cuda_source_builds_for_sm90_and_its_abi_checks_arguments():
    assert radix4.cuda_source("serial").name == "radix4_serial.cu"  # the unit radix4_serial.build compiles
    lib = ctypes.CDLL(str(sm90_build("serial").library))
    fn = lib.radix4_serial_route
    p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
    fn.argtypes, fn.restype = [p, i, i64, p, i, i64, i, i, i, f, p, p, p], i
    assert fn(None, 1, 224, None, 0, 4, 224, 8, 1, 1.0, None, None, None) == 1  # E=224 needs topk 16
    assert fn(None, 1, 224, None, 0, 0, 224, 16, 1, 1.0, None, None, None) == 0  # empty batch
    assert fn(None, 1, 224, None, 0, 0, 224, 16, 32, 1.0, None, None, None) == 3  # unknown flag
    assert not hasattr(lib, "radix4_route"), "one contract per library"
