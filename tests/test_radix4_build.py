"""CPU-only tests of the radix-4 router (kernels/radix4): builds, assembly, gates, and the algorithm.

- CUDA: the source compiles for sm_90 into a shared library whose C ABI
  answers argument errors without touching a GPU.
- HIP: the serial unit compiles for gfx90a with Debian's hipcc (HIP 5.2) and
  aiter's whole unit for gfx942 with clang++-19, and the assembly carries the
  DPP prefix sums (row_shr, row_bcast) and the hardware exp2; no kernel of
  the unit's own contract uses scratch, checked kernel by kernel (the model
  contracts' kernels keep small arrays on the stack, within a budget).
- build() raises BuildError on a broken source; without a GPU,
  supported_hardware() and available() say no in one line.
- The algorithm itself: the kernel template is compiled for the host with
  lanes emulated by fibers in lockstep (32 lanes as on CUDA, 64 as on HIP),
  and compared to a plain reference of contract ``aiter`` built from the
  emulation's own sigmoid, in both launch shapes (a block per token with
  one or several vectors per thread, a warp per token). This runs the real select/tie/placement code of
  radix4_router.h on ties, NaN, infinities and strided rows.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import kernels.radix4 as radix4
from kernels._build import BuildError, cache_dir, compile_shared, compile_to_assembly, compiler_version, load_library
from kernels._build import _digest as _build_digest
from kernels._build import _locked as _build_lock
from reference import LANE_RANK_FROM_SPEC as LANE_RANK
from reference import aiter_priority as tie_priority

HERE = Path(radix4.__file__).resolve().parent
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
needs_hipcc = pytest.mark.skipif(shutil.which("hipcc") is None, reason="hipcc is not on PATH (apt-get install hipcc)")
needs_clang19 = pytest.mark.skipif(shutil.which("clang++-19") is None, reason="clang++-19 is not installed")
needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")
# slow: each compiles the whole kernel for a GPU architecture with nvcc or
# hipcc (tens of seconds of CPU, not cached); the fast tier leaves them to CI.
gpu_compile = pytest.mark.slow
# slow: each needs emulation builds of its own (eleven with a tuning switch,
# two with one selection path forced), about 10 s of g++ each on a cold cache.
extra_builds = pytest.mark.slow

# ---------------------------------------------------------------- CUDA


@dataclass(frozen=True)
class Sm90Build:
    library: Path  # the shared library, built with the shipped flags (ptxas -v and -keep change no code)
    ptxas: str  # ptxas -v's report: registers and spills per kernel
    ptx: str  # the sm_90 PTX the library was assembled from


def sm90_build(contract: str) -> Sm90Build:
    """One nvcc compile of a contract's CUDA translation unit for sm_90, shared by the ABI, spill and PDL-hook tests.

    The whole radix4.cu (every shape and contract it serves) takes minutes of CPU: compiled once per session, and
    once on the machine for the xdist workers (under the kernel cache's lock, keyed like the cache), not per test."""
    source = radix4.cuda_source(contract)
    flags = [*radix4.CUDA_FLAGS, "-arch=sm_90", "-Xptxas", "-v"]
    key = _build_digest([source, *radix4.headers("cuda")], ["nvcc", compiler_version("nvcc"), *flags])
    folder = cache_dir() / f"test-sm90-{contract}-{key}"
    done = folder / "ptxas.txt"
    with _build_lock(folder.with_suffix(".lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            (folder / "keep").mkdir(parents=True)
            proc = subprocess.run(["nvcc", *flags, "-keep", f"-keep-dir={folder / 'keep'}", "-o", str(folder / "lib.so"),
                                   str(source)], capture_output=True, text=True, check=True)  # fmt: skip
            (folder / "sm_90.ptx").write_text((folder / "keep" / f"{source.stem}.ptx").read_text())
            shutil.rmtree(folder / "keep")
            done.write_text(proc.stdout + proc.stderr)
    return Sm90Build(folder / "lib.so", done.read_text(), (folder / "sm_90.ptx").read_text())


@gpu_compile  # slow: see gpu_compile
@needs_nvcc
def test_cuda_source_builds_for_sm90_and_its_abi_checks_arguments():
    lib = ctypes.CDLL(str(sm90_build("aiter").library))
    fn = lib.radix4_route
    p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
    fn.argtypes, fn.restype = [p, i, i64, p, i, i64, i, i, i, f, p, p, p], i
    lib.radix4_status_string.argtypes, lib.radix4_status_string.restype = [i], ctypes.c_char_p
    # These return before any CUDA call, so they run without a GPU.
    assert fn(None, 1, 896, None, 0, 4, 896, 8, 1, 1.0, None, None, None) == 1  # E=896 needs topk 16
    assert fn(None, 7, 896, None, 0, 4, 896, 16, 1, 1.0, None, None, None) == 2  # dtype code
    assert fn(None, 1, 895, None, 0, 4, 896, 16, 1, 1.0, None, None, None) == 3  # row stride < E
    assert fn(None, 1, 896, None, 0, 4, 896, 16, 2, 1.0, None, None, None) == 3  # unknown flag
    assert fn(None, 1, 896, None, 0, 0, 896, 16, 1, 1.0, None, None, None) == 0  # empty batch
    assert fn(None, 1, 224, None, 0, 0, 224, 16, 1, 1.0, None, None, None) == 0  # the pruned shape
    assert fn(None, 1, 224, None, 0, 0, 224, 16, 32, 1.0, None, None, None) == 3  # unknown flag
    assert fn(None, 1, 224, None, 0, 0, 224, 16, 2 | 16, 1.0, None, None, None) == 3  # two launch shapes
    assert fn(None, 1, 224, None, 0, 0, 224, 16, 1 | 16, 1.0, None, None, None) == 0  # the dense shape
    if not torch.cuda.is_available():  # programmatic launch needs a device of compute capability 9.0+
        assert fn(None, 1, 896, None, 0, 0, 896, 16, 1 | 8, 1.0, None, None, None) == 5
    assert b"(896, 16)" in lib.radix4_status_string(1) and b"(224, 16)" in lib.radix4_status_string(1)
    assert b"9.0" in lib.radix4_status_string(5)


@gpu_compile  # slow: see gpu_compile (the sm_90 builds the ABI and spill tests share)
@needs_nvcc
def test_every_entry_serves_the_shapes_its_python_gate_names():
    # kernels.radix4 restates radix4_entry.h's `served` (the shape lists and the generic path's bounds) to answer
    # covered() without loading a library: ask each built entry about every (E, k) near the range, rows = 0 (it
    # returns before any CUDA call), and hold the two to each other.
    differ = []
    for entry, (source, _hip, symbol) in radix4.CONTRACTS.items():
        lib = ctypes.CDLL(str(sm90_build("serial" if "serial" in source else "aiter").library))  # one build a source
        fn = getattr(lib, symbol)
        p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        fn.argtypes, fn.restype = [p, i, i64, p, i, i64, i, i, i, f, p, p, p], i
        for experts in range(1, 1100):
            for topk in range(0, 20):
                rc = fn(None, 1, experts, None, 0, 0, experts, topk, 0, 1.0, None, None, None)
                assert rc in (0, 1), f"{symbol}({experts}, {topk}) returned {rc}"
                if (rc == 0) != radix4._entry_serves(entry, experts, topk):
                    differ.append((entry, experts, topk, rc == 0))
    assert not differ, f"{len(differ)} (entry, E, k, library serves) disagree with _entry_serves, first {differ[:5]}"


# The dense warp-per-token kernel (kMinBlocks > 1, for batches above one wave)
# trades a few dozen bytes of spills for more warps per SM
# (docs/radix4_tuning.md); at most this many bytes (stores + loads) per thread.
DENSE_SPILL_BUDGET = 256


def _ptxas_report(report: str) -> dict[str, int]:
    """Entry function -> spill bytes (stores + loads), from ptxas -v's report."""
    spills, props = {}, None
    for line in report.splitlines():
        if m := re.search(r"Function properties for (\S+)", line):
            props = m.group(1)
        elif (m := re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)) and props:
            spills[props] = int(m.group(1)) + int(m.group(2))
    return {name: n for name, n in spills.items() if "route_kernel" in name}


@gpu_compile  # slow: see gpu_compile
@needs_nvcc
@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_cuda_build_spills_only_in_the_dense_kernel_and_within_budget(contract):
    spills = _ptxas_report(sm90_build(contract).ptxas)
    kimi = 3 * 4 * 2 * 3  # the Kimi shapes: 3 shapes x 4 dtype pairs x 2 load kinds x 3 launch shapes
    # radix4.cu also: fp16 logits at the Kimi shapes (2 bias dtypes), aiter at the 5 other shapes (3 x 2 dtypes),
    # the model contracts at all 8 (3 x 2), the two grouped ones at 1 (3 x 2): a warp per token, one load kind;
    # the model contracts' block per token at 5 shapes and the grouped ones' at 1 (2 x 2: no fp16 logits), and the
    # generic path's 4 bounds (3 x 2).
    assert len(spills) == (kimi if contract == "serial" else kimi + 3 * 2 + (5 + 8 + 2) * 3 * 2 + (5 + 2) * 2 * 2 + 4 * 3 * 2)
    for name, n in spills.items():
        found = re.search(r"ELi(\d+)ELb[01]EEEv", name)  # the template arguments kMinBlocks, then kDynamic
        assert found, f"kernel name not understood: {name}"
        min_blocks = int(found.group(1))
        if min_blocks == 1:
            assert n == 0, f"{name} spills {n} bytes"
        else:
            assert n <= DENSE_SPILL_BUDGET, f"dense kernel {name} spills {n} bytes, more than {DENSE_SPILL_BUDGET}"


@gpu_compile  # slow: see gpu_compile
@needs_nvcc
@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_programmatic_launch_hooks_are_in_the_sm90_code_only(contract, tmp_path):
    """griddepcontrol.launch_dependents at entry and griddepcontrol.wait before the logits: sm_90 only.

    sm_90: the PTX of the shipped build, one wait and one trigger per kernel (so none outside the hooks). sm_80: the
    hooks themselves (lanes_cuda.cuh's Warp32, which every kernel calls) compiled in a kernel of their own for both
    architectures: present on sm_90, nothing on sm_80. (A second compile of the whole unit for sm_80 cost half a
    minute of CI for the same answer.)"""
    flags = [f for f in radix4.CUDA_FLAGS if f not in ("-shared", "-Xcompiler", "-fPIC")]
    hooks = tmp_path / "hooks.cu"
    hooks.write_text('#include "lanes_cuda.cuh"\n__global__ void hooks() {\n'
                     '    radix4::Warp32::launch_dependents();\n    radix4::Warp32::wait_for_prior_grids();\n}\n')
    for arch, present in (("sm_90", True), ("sm_80", False)):
        out = tmp_path / f"hooks_{arch}.ptx"
        subprocess.run(["nvcc", *flags, f"-I{HERE}", f"-arch={arch}", "--ptx", "-o", str(out), str(hooks)], check=True,
                       capture_output=True)  # fmt: skip
        text = out.read_text()
        assert text.count("griddepcontrol.wait") == text.count("griddepcontrol.launch_dependents") == (1 if present else 0), arch
    ptx = sm90_build(contract).ptx
    entries = ptx.count(".entry ")
    assert entries > 0
    assert ptx.count("griddepcontrol.wait") == ptx.count("griddepcontrol.launch_dependents") == entries
    if contract == "aiter":
        # RADIX4_EX2_FTZ defaults to on: every exp2 of aiter's sigmoid is the flushed one
        # (an #if read before the switch's default once left it off in every default build).
        assert ptx.count("ex2.approx.ftz.f32") > 0
        assert ptx.count("ex2.approx.f32") == 0


def _defaults_and_uses(text: str) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Line numbers of each `#ifndef X / #define X` default, and of every other code line naming X."""
    lines = text.splitlines()
    defaults: dict[str, int] = {}
    for n, line in enumerate(lines):
        m = re.match(r"#ifndef (RADIX4_\w+)$", line.strip())
        if m and n + 1 < len(lines) and lines[n + 1].strip().startswith(f"#define {m.group(1)} "):
            defaults[m.group(1)] = n
    uses: dict[str, list[int]] = {}
    for n, line in enumerate(lines):
        code = line.split("//", 1)[0]
        for name in re.findall(r"\bRADIX4_\w+", code):
            uses.setdefault(name, []).append(n)
    return defaults, uses


@pytest.mark.parametrize("header", ["radix4_router.h", "radix4_entry.h"])
def test_every_switch_is_defaulted_before_its_first_use(header):
    """An `#if RADIX4_X` above `#define RADIX4_X 1` reads 0 and silently builds the other setting."""
    defaults, uses = _defaults_and_uses((HERE / header).read_text())
    assert defaults, f"{header} defines no switch defaults: the pattern is out of date"
    early = {name: [n + 1 for n in uses[name] if n < line] for name, line in defaults.items()}
    assert not {k: v for k, v in early.items() if v}, f"{header}: switches used above their defaults (lines): {early}"


def test_the_switch_order_check_sees_a_use_above_its_default():
    planted = "#if RADIX4_DEMO\n#endif\n#ifndef RADIX4_DEMO\n#define RADIX4_DEMO 1\n#endif\n#if RADIX4_DEMO\n#endif\n"
    defaults, uses = _defaults_and_uses(planted)
    assert defaults == {"RADIX4_DEMO": 2}
    assert [n for n in uses["RADIX4_DEMO"] if n < defaults["RADIX4_DEMO"]] == [0]


def _lab_build(define: str) -> Path:
    """A step-clock build, device code unoptimised and left as PTX (no ptxas: 10 s of CPU, not 31): the test reads
    its exports, and an optimised compile of the whole unit costs a minute of CPU (the lab tools build theirs with
    radix4.build and the shipped flags)."""
    quick = ["-Xcicc", "-O0", "-gencode", "arch=compute_90,code=compute_90"]
    return compile_shared(radix4.cuda_source("aiter"), compiler="nvcc", flags=[*radix4.CUDA_FLAGS, *quick, f"-D{define}"],
                          depends=radix4.headers("cuda"))  # fmt: skip


@gpu_compile  # slow: see gpu_compile
@needs_nvcc
def test_lab_build_exports_its_step_clocks():
    """kernels/radix4/lab/radix4_lab.py loads a RADIX4_LAB build and calls these two."""
    lib = ctypes.CDLL(str(_lab_build("RADIX4_LAB")))
    assert hasattr(lib, "radix4_lab_clocks") and hasattr(lib, "radix4_lab_reset")
    plain = ctypes.CDLL(str(sm90_build("aiter").library))  # the shipped build's code (sm90_build: its flags)
    assert not hasattr(plain, "radix4_lab_clocks"), "the shipped build must not carry the step clocks"
    # kernels/radix4/lab/radix4_token_lab.py: every token's clocks, from a build of its own.
    tokens = ctypes.CDLL(str(_lab_build("RADIX4_LAB_TOKENS")))
    assert all(hasattr(tokens, f) for f in ("radix4_lab_tokens", "radix4_lab_tokens_reset", "radix4_lab_token_words"))
    assert tokens.radix4_lab_token_words() == 10
    assert not hasattr(plain, "radix4_lab_tokens")


@gpu_compile  # slow: see gpu_compile
@needs_nvcc
@pytest.mark.parametrize("program", ["radix4_sigmoid_exhaustive.cu", "radix4_model_scores_exhaustive.cu"])
def test_exhaustive_sigmoid_check_compiles(tmp_path, program):
    """kernels/radix4/lab's exhaustive checks (run on a GPU by radix4_gpu_check.py) still build."""
    src = Path(radix4.__file__).resolve().parent / "lab" / program
    flags = [f for f in radix4.CUDA_FLAGS if f not in ("-shared", "-Xcompiler", "-fPIC")]
    subprocess.run(["nvcc", *flags, "-arch=sm_90", f"-I{HERE}", str(src), "-o", str(tmp_path / "exe")], check=True)
    assert (tmp_path / "exe").exists()


# ---------------------------------------------------------------- HIP


def _hip_assembly(arch: str, tmp_path: Path, contract: str = "aiter", defines: tuple[str, ...] = ()) -> str:
    out = tmp_path / f"radix4_{contract}_{arch}.s"
    extra = [f"-D{d}" for d in defines]
    if arch == "gfx942":  # HIP 5.2's clang does not know gfx942; clang 19 with hipcc's headers does
        flags = ["-x", "hip", f"--offload-arch={arch}", "-nogpulib", "--cuda-device-only", "-O3", "-std=c++17",
                 "-ffp-contract=off", "-I/usr/include", *extra]  # fmt: skip
        compile_to_assembly(radix4.hip_source(contract), compiler="clang++-19", flags=flags, out=out)
    else:
        flags = [f"--offload-arch={arch}", "-O3", "-std=c++17", "-ffp-contract=off", "--cuda-device-only", *extra]
        env = {"HIP_PLATFORM": "amd", "PATH": "/usr/bin:/bin"}
        compile_to_assembly(radix4.hip_source(contract), compiler="hipcc", flags=flags, out=out, env=env)
    return out.read_text()


# A model contract's kernel keeps small arrays it indexes at run time on the stack (scratch on AMD; ptxas reports
# the same as a stack frame, not as spills): at most this many bytes per lane, and no spilled register.
MODEL_STACK_BUDGET = 256


@dataclass
class AmdKernel:
    name: str
    contract: str  # "aiter" or "serial" (the unit's own contract), or "model" (the folded-in model contracts)
    shape: str  # "block", "warp" or "dense"
    vgpr_spills: int
    scratch: int  # bytes per lane: spills and stack


def _amd_kernels(asm: str) -> list[AmdKernel]:
    """Every route_kernel of an AMD assembly, from its metadata (the assembler's YAML after the code)."""
    kernels = []
    for entry in re.split(r"\n  - \.agpr_count", asm[asm.index("amdhsa.kernels:"):])[1:]:
        name = re.search(r"\.name:\s+(\S+)", entry).group(1)
        if "route_kernel" not in name:
            continue
        # the template arguments kVec, kWarpsPerToken, kTokensPerBlock, kMinBlocks, kDynamic
        found = re.search(r"Li(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb[01]EE", name)
        assert found, f"kernel name not understood: {name}"
        warps, min_blocks = int(found.group(2)), int(found.group(4))
        own = re.search(r"route_kernelINS_\d+(Aiter|Serial)Contract", name)
        kernels.append(AmdKernel(name, own.group(1).lower() if own else "model",
                                 "block" if warps > 1 else "dense" if min_blocks > 1 else "warp",
                                 int(re.search(r"\.vgpr_spill_count:\s+(\d+)", entry).group(1)),
                                 int(re.search(r"\.private_segment_fixed_size:\s+(\d+)", entry).group(1))))  # fmt: skip
    return kernels


def _check_amd_assembly(asm: str, kernels_expected: int) -> None:
    for needle in ("row_shr:1", "row_shr:8", "row_bcast:15", "row_bcast:31", "v_exp_f32", "v_readlane_b32"):
        assert needle in asm, f"{needle} not in the assembly"
    kernels = _amd_kernels(asm)
    assert len(kernels) == kernels_expected, f"{len(kernels)} route kernels, expected {kernels_expected}"
    # every kernel, each on its own (before: one kernel without scratch in the unit let the whole unit pass)
    # (a register the dense kernel's cap moves into an accumulation register is counted as spilled, but costs no
    # memory: scratch is what is checked there)
    for k in kernels:
        if k.contract == "model":
            assert k.vgpr_spills == 0, f"{k.name} ({k.shape}) spills {k.vgpr_spills} registers"
            assert k.scratch <= MODEL_STACK_BUDGET, f"{k.name} keeps {k.scratch} bytes on the stack"
        else:
            assert k.scratch == 0, f"{k.name} ({k.contract}, {k.shape}) uses {k.scratch} bytes of scratch"


# Each HIP unit compiles once, each compiler once: the serial unit with Debian's hipcc (HIP 5.2) for gfx90a (CDNA2),
# aiter's whole unit (every shape and contract it serves) with clang 19 for gfx942 (CDNA3, what the kernel ships
# for). Both carry the shared lanes header's DPP prefix sums and wave64 code; a whole unit per (architecture,
# compiler) pair costs minutes of CPU in CI.
@gpu_compile  # slow: see gpu_compile
@needs_hipcc
def test_hip_source_compiles_with_dpp_prefix_sums_with_hipcc(tmp_path):
    _check_amd_assembly(_hip_assembly("gfx90a", tmp_path, "serial"), kernels_expected=72)


@gpu_compile  # slow: see gpu_compile
@needs_hipcc
@needs_clang19
def test_hip_source_compiles_for_gfx942_with_clang19(tmp_path):
    _check_amd_assembly(_hip_assembly("gfx942", tmp_path, "aiter"), kernels_expected=214)


# ---------------------------------------------------------------- build path and gates


@gpu_compile  # slow: see gpu_compile
@needs_nvcc
def test_build_raises_build_error_on_a_broken_source(tmp_path):
    for name in ["radix4.cu", *(p.name for p in radix4.headers("cuda"))]:
        shutil.copy(HERE / name, tmp_path / name)
    broken = tmp_path / "radix4_router.h"
    broken.write_text(broken.read_text().replace("struct Pick {", "struct Pick { this is not C++;", 1))
    with pytest.raises(BuildError, match="compile failed"):
        radix4._compile(tmp_path / "radix4.cu", "sm_90", depends=[broken])


def test_build_refuses_an_unknown_architecture():
    with pytest.raises(ValueError, match="arch='tpu_v5'"):
        radix4.build(arch="tpu_v5")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_without_a_gpu_the_kernel_says_why_in_one_line():
    for ok, why in (radix4.supported_hardware(), radix4.available()):
        assert ok is False
        assert why and "\n" not in why and "GPU" in why
    with pytest.raises(BuildError, match="cannot pick an architecture"):
        radix4.build()


def test_covered_gates_shape_rows_and_dtypes():
    ok = dict(rows=1024, experts=896, topk=16, dtype=torch.bfloat16, bias_dtype=torch.float32)
    assert radix4.covered(**ok)
    assert radix4.covered(**{**ok, "experts": 384, "topk": 8, "dtype": "float32", "bias_dtype": "bfloat16"})
    assert radix4.covered(**{**ok, "experts": 224, "topk": 16})
    assert not radix4.covered(**{**ok, "experts": 224, "topk": 8, "contract": "aiter"})
    assert radix4.covered(**{**ok, "experts": 224, "topk": 8})  # the model contracts' generic path
    assert not radix4.covered(**{**ok, "rows": radix4.MAX_ROWS + 1})
    assert not radix4.covered(**{**ok, "topk": 8, "contract": "aiter"})
    assert not radix4.covered(**{**ok, "topk": 17})
    assert radix4.covered(**{**ok, "dtype": torch.float16, "bias_dtype": torch.float16})  # fp16 logits; the bias widened
    assert not radix4.covered(**{**ok, "dtype": torch.float64})


def test_route_names_the_bad_argument():
    scores, bias = torch.zeros(2, 896), torch.zeros(896)
    with pytest.raises(ValueError, match="scores.device=cpu"):
        radix4.route(scores, bias, 16)
    with pytest.raises(ValueError, match=r"\(E, topk\)=\(896, 8\)"):
        radix4._check_args(scores, bias, 8, True, 1.0)


def test_importing_the_wrapper_does_not_build_anything():
    assert radix4._libraries == {}


# ---------------------------------------------------------------- the algorithm, emulated on the host

EMULATION = r"""
// The radix4 kernel template compiled for the host: each GPU thread is a
// fiber (ucontext) on the calling thread, cross-lane operations exchange
// through a shared array between barriers (one barrier per warp, one per
// block for __syncthreads). Fibers, not OS threads: a lockstep barrier of 128
// threads costs 128 wake-ups through the kernel, which on a loaded 2-core
// machine made one pass over the cases take a minute; a fiber switch is a
// few dozen nanoseconds. The scheduler runs the lanes in turn to their next
// barrier, first to last then last to first, so a missing barrier reads
// another lane's stale data in either direction.
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>
#include <ucontext.h>

#define __device__
#define __global__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
struct Dim3 { unsigned x = 0, y = 0, z = 0; };
Dim3 threadIdx, blockIdx;  // set by the scheduler before it resumes a lane
inline int __popcll(uint64_t v) { return __builtin_popcountll(v); }

// Switching between fibers. On x86-64 a few lines of assembly swap the
// callee-saved registers, the stack pointer and the FP control words: glibc's
// swapcontext also saves the signal mask, a system call per switch that took
// half the run time. Elsewhere, ucontext.
#if defined(__x86_64__)
extern "C" void emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl emu_switch
    .hidden emu_switch
    .type emu_switch, @function
emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_switch, .-emu_switch
)");
struct EmuContext { void* sp = nullptr; };
inline EmuContext emu_scheduler;
// A fresh stack as emu_switch leaves one: control words (default MXCSR and
// x87), six registers, `entry` as the return address, then a null return
// address for entry itself, 16-byte aligned as at a call.
inline void emu_make(EmuContext& c, char* stack, size_t size, void (*entry)()) {
    const uintptr_t top = reinterpret_cast<uintptr_t>(stack + size) & ~uintptr_t{15};
    uint64_t* sp = reinterpret_cast<uint64_t*>(top) - 9;
    sp[0] = 0x1F80u | (uint64_t{0x037F} << 32);
    for (int r = 1; r <= 6; ++r) sp[r] = 0;
    sp[7] = reinterpret_cast<uint64_t>(entry);
    sp[8] = 0;
    c.sp = sp;
}
inline void emu_enter(EmuContext& c) { emu_switch(&emu_scheduler.sp, c.sp); }
inline void emu_leave(EmuContext& c) { emu_switch(&c.sp, emu_scheduler.sp); }
#else
struct EmuContext { ucontext_t uc; };
inline EmuContext emu_scheduler;
inline void emu_make(EmuContext& c, char* stack, size_t size, void (*entry)()) {
    getcontext(&c.uc);
    c.uc.uc_stack.ss_sp = stack;
    c.uc.uc_stack.ss_size = size;
    c.uc.uc_link = nullptr;
    makecontext(&c.uc, entry, 0);
}
inline void emu_enter(EmuContext& c) { swapcontext(&emu_scheduler.uc, &c.uc); }
inline void emu_leave(EmuContext& c) { swapcontext(&c.uc, &emu_scheduler.uc); }
#endif

// The lane running now, and a count of barrier arrivals and finished lanes:
// a round in which it does not move is a deadlock (a barrier some lanes never
// reach), reported instead of hanging.
inline EmuContext* emu_running = nullptr;
inline long emu_progress = 0;
inline void emu_yield() { emu_leave(*emu_running); }

struct EmuBarrier {
    int expected, arrived = 0;
    long generation = 0;
    explicit EmuBarrier(int n) : expected(n) {}
    void arrive_and_wait() {
        const long mine = generation;
        ++emu_progress;
        if (++arrived == expected) {
            arrived = 0;
            ++generation;
            return;
        }
        while (generation == mine) emu_yield();
    }
};

inline EmuBarrier* emu_block_barrier = nullptr;
inline void __syncthreads() { emu_block_barrier->arrive_and_wait(); }
inline uint32_t atomicAdd(uint32_t* p, uint32_t v) {  // one lane runs at a time
    const uint32_t old = *p;
    *p = old + v;
    return old;
}

// How many lanes took each way of the selection (radix4::RankPath).
inline std::atomic<long> emu_paths[6];
#define RADIX4_NOTE_PATH(path) (++emu_paths[static_cast<int>(path)])
// How many lanes got their model-contract scores each way (radix4::ScorePath).
inline std::atomic<long> emu_score_paths[2];
#define RADIX4_NOTE_SCORES(path) (++emu_score_paths[static_cast<int>(path)])
// How many lanes selected by approximate keys and how many the exact way (radix4::KeyPath).
inline std::atomic<long> emu_key_paths[2];
#define RADIX4_NOTE_KEYS(path) (++emu_key_paths[static_cast<int>(path)])

#include "radix4_router.h"

// How many threads passed the programmatic-launch hooks (each thread: both, once).
inline std::atomic<int> emu_waits{0}, emu_triggers{0};

template <int N>
struct EmuLanes {
    static constexpr int kLanes = N;
    static constexpr int kMaxWarps = 16;
    static inline EmuBarrier* barrier[kMaxWarps];
    static inline uint64_t slot[kMaxWarps][N];
    static int lane() { return threadIdx.x % N; }
    static int group() { return threadIdx.x / N; }
    static void sync() { barrier[group()]->arrive_and_wait(); }
    static void wait_for_prior_grids() { ++emu_waits; }
    static void launch_dependents() { ++emu_triggers; }
    static bool any(bool p) { return exchange(p, [](uint64_t* s) { uint64_t t = 0; for (int i = 0; i < N; ++i) t |= s[i]; return t; }) != 0; }
    static constexpr float kReciprocalLimit = 0x1p126f;  // as on CUDA, so the redo path runs here too
    static float reciprocal(float y) { return 1.0f / y; }
    // Off by 2^-22 of the root, up or down by the input's last bit: the device's MUFU forms err too, and an
    // error that reorders close values is what the two-phase scores' bound must cover (a zero bound then fails).
    static float log2_approx(float y) { return std::log2(y); }
    static float sqrt_approx(float y) {
        uint32_t u; std::memcpy(&u, &y, 4);
        return std::sqrt(y) * ((u & 1u) ? 1.0f + 0x1p-22f : 1.0f - 0x1p-22f);
    }
    static uint64_t bits64(double v) { uint64_t u; std::memcpy(&u, &v, 8); return u; }
    static double from_bits64(uint64_t u) { double d; std::memcpy(&d, &u, 8); return d; }
    // radix4_router.h's steps mend float64 seeds within 2^-16: these are off by that much, the worst case
    static double reciprocal64_seed(double d) { return (1.0 / d) * (1.0 - 0x1p-16); }
    static double rsqrt64_seed(double v) { return (1.0 / std::sqrt(v)) * (1.0 + 0x1p-16); }
    template <class F> static uint64_t exchange(uint64_t v, F f) {
        uint64_t* mine = slot[group()];
        mine[lane()] = v; sync(); const uint64_t r = f(mine); sync(); return r;
    }
    static uint32_t sum(uint32_t v) { return exchange(v, [](uint64_t* s) { uint64_t t = 0; for (int i = 0; i < N; ++i) t += s[i]; return t; }); }
    static uint32_t all_max(uint32_t v) { return exchange(v, [](uint64_t* s) { uint64_t t = 0; for (int i = 0; i < N; ++i) t = s[i] > t ? s[i] : t; return t; }); }
    static uint32_t all_min(uint32_t v) { return exchange(v, [](uint64_t* s) { uint64_t t = ~0u; for (int i = 0; i < N; ++i) t = s[i] < t ? s[i] : t; return t; }); }
    template <class T> static void store_shared_if(bool p, T* at, T v) { if (p) *at = v; }
    template <class T> static void store_global_if(bool p, T* at, T v) { if (p) *at = v; }
    template <class E16> static void store_shared_if(bool p, E16* at, uint64_t c, float s) { if (p) at->composite = c, at->sig = s; }
    static void add_if_at_least(uint32_t& n, uint32_t key, uint32_t lo) { n += key >= lo; }
    template <class E16> static E16* cursor(E16* at) { return at; }
    template <class E16> static void store_if_at_least(uint32_t key, uint32_t lo, E16*& at, uint64_t c, float s) { if (key >= lo) at->composite = c, at->sig = s, ++at; }
    static float exp2_flushed(float x) { const float r = std::exp2(x); return r < 0x1p-126f ? 0.0f : r; }
    // The approximate keys: tanh off by up to 0.9 of radix4::kApproximateKeyBound (a quarter of the inputs by
    // all of that, up or down by the input's bits): the device's tanh.approx errs too, and an error that
    // reorders close values is what the margin must cover (a margin of 0 then fails).
    static constexpr bool kApproximateKeys = true;
    static float tanh_approx(float y) {
        if (y != y) return y;
        uint32_t u; std::memcpy(&u, &y, 4);
        const uint32_t h = (u * 2654435761u) >> 16;
        const double spread = (h & 3u) == 0 ? ((h & 4u) ? 1.0 : -1.0) : (static_cast<double>(h >> 3) / 4095.0) * 2.0 - 1.0;
        const double t = std::tanh(static_cast<double>(y)) + spread * 0.9 * radix4::kApproximateKeyBound;
        return static_cast<float>(t > 1.0 ? 1.0 : t < -1.0 ? -1.0 : t);
    }
    static float fma(float a, float b, float c) { return std::fma(a, b, c); }
    static float max_nan(float a, float b) {
        if (a != a || b != b) { const uint32_t n = 0x7fffffffu; float f; std::memcpy(&f, &n, 4); return f; }
        return a > b ? a : b;
    }
    static void add_if_at_least(uint32_t& n, float key, float lo) { n += key >= lo; }
    // Only the low word, as the device's 32-bit store: the high word keeps what was there.
    template <class E16> static void store_if_at_least(float key, float lo, E16*& at, uint32_t low) {
        if (key >= lo) std::memcpy(&at->composite, &low, 4), ++at;
    }
    static uint32_t shfl_xor(uint32_t v, int d) { const int me = lane(); return exchange(v, [me, d](uint64_t* s) { return s[me ^ d]; }); }
    static uint32_t shfl(uint32_t v, int src) { return exchange(v, [src](uint64_t* s) { return s[src]; }); }
    using Mask = uint64_t;
    static Mask ballot(bool p) { return exchange(p, [](uint64_t* s) { uint64_t m = 0; for (int i = 0; i < N; ++i) m |= (s[i] & 1u) << i; return m; }); }
    static Mask lanes_below() { return (uint64_t{1} << lane()) - 1u; }
    static uint32_t exclusive_scan(uint32_t v) {
        const int me = lane();
        return exchange(v, [me](uint64_t* s) { uint64_t t = 0; for (int i = 0; i < me; ++i) t += s[i]; return t; });
    }
    static uint64_t one_hot_nibble(uint32_t t) { return t < 16u ? (uint64_t{1} << (4u * t)) : 0u; }
    static uint32_t bytes01_to_pair(uint32_t x) { return (x & 0xffu) | ((x & 0xff00u) << 8); }
    static uint32_t bytes23_to_pair(uint32_t x) { return ((x >> 16) & 0xffu) | ((x >> 8) & 0x00ff0000u); }
    static float as_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
    static uint32_t as_uint(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
    static int count_leading_zeros(uint32_t v) { return __builtin_clz(v); }
};

// Set when a launch deadlocked; emu_route reports it as status 6.
inline bool emu_deadlocked = false;

inline std::function<void()>* emu_lane_body = nullptr;
inline bool* emu_lane_done = nullptr;
inline void emu_lane_entry() {
    (*emu_lane_body)();
    emu_lane_done[threadIdx.x] = true;
    ++emu_progress;
    emu_yield();  // never resumed: the scheduler skips finished lanes
}

// Runs `lanes` fibers of `body` to the end: in turn to their next barrier,
// alternating the order each round. False if a round moved nothing.
inline bool emu_run_lanes(int lanes, unsigned block_index, std::function<void()> body) {
    constexpr size_t kStack = 256 * 1024;
    static std::vector<std::unique_ptr<char[]>> stacks;  // kept: a fresh mapping per block costs page faults
    while (static_cast<int>(stacks.size()) < lanes) stacks.emplace_back(new char[kStack]);
    std::vector<EmuContext> contexts(lanes);
    std::unique_ptr<bool[]> done(new bool[lanes]());
    emu_lane_body = &body;
    emu_lane_done = done.get();
    for (int t = 0; t < lanes; ++t) emu_make(contexts[t], stacks[t].get(), kStack, emu_lane_entry);
    blockIdx.x = block_index;
    for (bool forward = true;; forward = !forward) {
        const long before = emu_progress;
        int alive = 0;
        for (int k = 0; k < lanes; ++k) {
            const int t = forward ? k : lanes - 1 - k;
            if (done[t]) continue;
            threadIdx.x = t;
            emu_running = &contexts[t];
            emu_enter(contexts[t]);
            alive += !done[t];
        }
        if (alive == 0) return true;
        if (emu_progress == before) return false;
    }
}

// One block after another; a block of kTokens tokens of kWarps warps each.
// kDynamic: the generic path, E and K bounds for `experts` and `topk`.
template <class C, int N, int E, int K, class S, class B, int kVec, int kWarps, int kTokens, bool kDynamic = false,
          int kMinBlocks = 1>
void run(const void* scores, int64_t stride, const void* bias, int rows, int renorm, float rs, float* w, int32_t* ids,
         int experts = E, int topk = K) {
    constexpr int kGroups = kWarps * kTokens;
    std::vector<std::unique_ptr<EmuBarrier>> warps;
    for (int i = 0; i < kGroups; ++i) {
        warps.emplace_back(new EmuBarrier(N));
        EmuLanes<N>::barrier[i] = warps.back().get();
    }
    EmuBarrier block(N * kGroups);
    emu_block_barrier = &block;
    for (int blk = 0; blk * kTokens < rows && !emu_deadlocked; ++blk) {
        emu_deadlocked = !emu_run_lanes(N * kGroups, blk, [=] {
            radix4::route_kernel<C, EmuLanes<N>, E, K, S, B, kVec, kWarps, kTokens, kMinBlocks, kDynamic>(
                static_cast<const typename S::Raw*>(scores), stride, static_cast<const typename B::Raw*>(bias),
                rows, renorm, rs, w, ids, experts, topk);
        });
    }
}

// block: 0 = a warp per token; 1 = a block of min(4, E/4/N) warps per token
// (radix4_entry.h's default); 2 = two warps per token; 3 = one vector of 4
// experts per thread; 4 = a warp per token, two tokens per block, as the
// dense kernel (kMinBlocks 4: its approximate keys, radix4_router.h).
// EMU_LAUNCHES: the launch shapes this build instantiates, bit (N == 64) * 5 + block
// (a build for a test that needs a few compiles in a fraction of the time);
// a launch not built returns 4.
#ifndef EMU_LAUNCHES
#define EMU_LAUNCHES 0x3FF
#endif
// EMU_MODELS=0: no model contract and no generic path (with_model_shape and
// with_generic return 4): the builds of a few Kimi launch shapes, whose tests
// route aiter and serial only, in half the compile.
#ifndef EMU_MODELS
#define EMU_MODELS 1
#endif
template <int N, int kBlock>
constexpr bool emu_built = (EMU_LAUNCHES >> ((N == 64) * 5 + kBlock)) & 1;

template <class C, int N, int E, int K, class S, class B, bool kVec>
int shaped(int block, const void* s, int64_t st, const void* b, int rows, int rn, float rs, float* w, int32_t* i) {
    constexpr int kFull = (E / 4 + N - 1) / N;
    if (block == 1) {
        if constexpr (emu_built<N, 1>) return run<C, N, E, K, S, B, kVec, (kFull < 4 ? kFull : 4), 1>(s, st, b, rows, rn, rs, w, i), 0;
    } else if (block == 2) {
        if constexpr (emu_built<N, 2>) return run<C, N, E, K, S, B, kVec, (kFull < 2 ? kFull : 2), 1>(s, st, b, rows, rn, rs, w, i), 0;
    } else if (block == 3) {
        if constexpr (emu_built<N, 3>) return run<C, N, E, K, S, B, kVec, kFull, 1>(s, st, b, rows, rn, rs, w, i), 0;
    } else if (block == 4) {
        if constexpr (emu_built<N, 4>) return run<C, N, E, K, S, B, kVec, 1, 2, false, 4>(s, st, b, rows, rn, rs, w, i), 0;
    } else {
        if constexpr (emu_built<N, 0>) return run<C, N, E, K, S, B, kVec, 1, 1>(s, st, b, rows, rn, rs, w, i), 0;
    }
    return 4;
}

// Loads: vector (aligned) loads for every dtype pairing but bf16 / bf16;
// scalar loads for bf16 logits with fp32 bias (the strided-row test).
template <class C, int N, int E, int K>
int with_dtypes(int sdt, int bdt, bool vec, int block, const void* s, int64_t st, const void* b, int rows, int rn, float rs, float* w, int32_t* i) {
    using radix4::Bf16; using radix4::F32;
    if (!vec) {
        if (sdt != 1 || bdt != 0) return 2;
        return shaped<C, N, E, K, Bf16, F32, false>(block, s, st, b, rows, rn, rs, w, i);
    } else if (sdt == 0 && bdt == 0) return shaped<C, N, E, K, F32, F32, true>(block, s, st, b, rows, rn, rs, w, i);
    else if (sdt == 1 && bdt == 0) return shaped<C, N, E, K, Bf16, F32, true>(block, s, st, b, rows, rn, rs, w, i);
    else if (sdt == 0 && bdt == 1) return shaped<C, N, E, K, F32, Bf16, true>(block, s, st, b, rows, rn, rs, w, i);
    return 2;
}

template <class C>
int with_shape(int lanes, int block, const void* s, int sdt, int64_t st, const void* b, int bdt, int rows,
               int E, int K, int vec, int rn, float rs, float* w, int32_t* i) {
#define EMU_SHAPE(E_, K_)                                                                            \
    if (E == E_ && K == K_)                                                                          \
        return lanes == 32 ? with_dtypes<C, 32, E_, K_>(sdt, bdt, vec, block, s, st, b, rows, rn, rs, w, i) \
                           : with_dtypes<C, 64, E_, K_>(sdt, bdt, vec, block, s, st, b, rows, rn, rs, w, i);
    EMU_SHAPE(896, 16)
    EMU_SHAPE(384, 8)
    EMU_SHAPE(224, 16)
#undef EMU_SHAPE
    return 1;
}

// The model shapes and contracts (radix4_entry.h's dispatch builds them a
// warp per token, and some a block per token too), with vector loads: a warp
// per token, logits bf16 / fp32 / fp16 with an fp32 bias or fp32 logits with
// a bf16 bias; two tokens per block (block 4), a block per token (block 1,
// the ungrouped contracts, the in-kernel alignment test of radix4_entry.h's
// kBlockAndWarp) and wave64 with bf16 logits and an fp32 bias only.
template <class C, int N, int E, int K>
int model_shaped(int sdt, int bdt, int block, const void* s, int64_t st, const void* b, int rows, int rn, float rs, float* w, int32_t* i) {
    using radix4::Bf16; using radix4::F16; using radix4::F32;
    if (block != 0 && block != 4 && block != 1) return 4;
    if (sdt == 1 && bdt == 0) {
        constexpr int kFull = (E / 4 + N - 1) / N;  // a block per token as radix4_entry.h builds it (kBlockAndWarp)
        if (block == 1) return run<C, N, E, K, Bf16, F32, 2, (kFull < 4 ? kFull : 4), 1>(s, st, b, rows, rn, rs, w, i), 0;
        if (block == 4 && N == 32) return run<C, N, E, K, Bf16, F32, true, 1, 2>(s, st, b, rows, rn, rs, w, i), 0;
        if (block == 0) return run<C, N, E, K, Bf16, F32, true, 1, 1>(s, st, b, rows, rn, rs, w, i), 0;
        return 4;
    }
    if (N == 64 || block != 0) return 2;
    if constexpr (N == 32) {
        if (sdt == 0 && bdt == 0) return run<C, N, E, K, F32, F32, true, 1, 1>(s, st, b, rows, rn, rs, w, i), 0;
        if (sdt == 2 && bdt == 0) return run<C, N, E, K, F16, F32, true, 1, 1>(s, st, b, rows, rn, rs, w, i), 0;
        if (sdt == 0 && bdt == 1) return run<C, N, E, K, F32, Bf16, true, 1, 1>(s, st, b, rows, rn, rs, w, i), 0;
    }
    return 2;
}

template <class C, int E, int K>
int model_lanes(int lanes, int sdt, int bdt, int block, const void* s, int64_t st, const void* b, int rows, int rn, float rs, float* w, int32_t* i) {
    return lanes == 32 ? model_shaped<C, 32, E, K>(sdt, bdt, block, s, st, b, rows, rn, rs, w, i)
                       : model_shaped<C, 64, E, K>(sdt, bdt, block, s, st, b, rows, rn, rs, w, i);
}

// contract: 2 = the ungrouped model contracts with the sigmoid, 4 = the
// same build with sqrt(softplus(x)) (mode bit 4), 3 = deepseek-v3 (groups),
// 5 = deepseek-v3-reference (groups, dropped experts ranked 0.0);
// 0 (aiter) at a model shape. rn: 0 none, 1 sum + 1e-20, 2 the raw sum.
int with_model_shape(int contract, int lanes, int block, const void* s, int sdt, int64_t st, const void* b, int bdt,
                     int rows, int E, int K, int rn, float rs, float* w, int32_t* i) {
#if EMU_MODELS
#define EMU_MODEL(C_, E_, K_) \
    if (E == E_ && K == K_) return model_lanes<C_, E_, K_>(lanes, sdt, bdt, block, s, st, b, rows, rn, rs, w, i);
    if (contract == 0) { EMU_MODEL(radix4::AiterContract, 256, 8) }
    if (contract == 4) rn |= 4;
    if (contract == 2 || contract == 4) {
        EMU_MODEL(radix4::ModelContract, 256, 8) EMU_MODEL(radix4::ModelContract, 160, 8)
        EMU_MODEL(radix4::ModelContract, 128, 6) EMU_MODEL(radix4::ModelContract, 384, 8)
        EMU_MODEL(radix4::ModelContract, 256, 6) EMU_MODEL(radix4::ModelContract, 384, 6)
        EMU_MODEL(radix4::ModelContract, 896, 16)
    }
    if (contract == 3) { EMU_MODEL(radix4::GroupedContract, 256, 8) }
    if (contract == 5) { EMU_MODEL(radix4::GroupedZeroContract, 256, 8) }
#undef EMU_MODEL
    return 1;
#else
    return 4;  // not built
#endif
}

// The generic path (radix4_entry.h's dispatch_generic) under the model
// contracts (2 sigmoid, 4 sqrt(softplus(x))): any experts up to the bound,
// topk up to 16, a warp per token (block 0; 4: two tokens a block), the
// kernel testing alignment itself (kVec 2) as built. The bounds of CUDA's
// warp32 (128 .. 1024) and of HIP's wave64 (256 .. 1024); dtypes as
// model_shaped's.
template <int N, int E>
int generic_bound(int sdt, int bdt, int block, const void* s, int64_t st, const void* b, int rows, int E_, int K_,
                  int rn, float rs, float* w, int32_t* i) {
    using radix4::Bf16; using radix4::F16; using radix4::F32; using C = radix4::ModelContract;
    if (block != 0 && block != 4) return 4;
    if (block == 4) {
        if (sdt == 1 && bdt == 0 && N == 32) return run<C, N, E, 16, Bf16, F32, 2, 1, 2, true>(s, st, b, rows, rn, rs, w, i, E_, K_), 0;
        return 4;
    }
    if (sdt == 1 && bdt == 0) return run<C, N, E, 16, Bf16, F32, 2, 1, 1, true>(s, st, b, rows, rn, rs, w, i, E_, K_), 0;
    if constexpr (N == 32) {
        if (sdt == 0 && bdt == 0) return run<C, N, E, 16, F32, F32, 2, 1, 1, true>(s, st, b, rows, rn, rs, w, i, E_, K_), 0;
        if (sdt == 2 && bdt == 1) return run<C, N, E, 16, F16, Bf16, 2, 1, 1, true>(s, st, b, rows, rn, rs, w, i, E_, K_), 0;
    }
    return 2;
}

int with_generic(int contract, int lanes, int block, const void* s, int sdt, int64_t st, const void* b, int bdt,
                 int rows, int E, int K, int rn, float rs, float* w, int32_t* i) {
#if EMU_MODELS
    if (contract != 2 && contract != 4) return 1;
    if (E < 8 || E > 1024 || K < 1 || K > 16 || K > E) return 1;
    if (contract == 4) rn |= 4;
    if (lanes == 32) {
        if (E <= 128) return generic_bound<32, 128>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
        if (E <= 256) return generic_bound<32, 256>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
        if (E <= 512) return generic_bound<32, 512>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
        return generic_bound<32, 1024>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
    }
    if (E <= 256) return generic_bound<64, 256>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
    if (E <= 512) return generic_bound<64, 512>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
    return generic_bound<64, 1024>(sdt, bdt, block, s, st, b, rows, E, K, rn, rs, w, i);
#else
    return 4;  // not built
#endif
}

extern "C" int emu_route_generic(int contract, int lanes, int block, const void* s, int sdt, int64_t st, const void* b,
                                 int bdt, int rows, int E, int K, int rn, float rs, float* w, int32_t* i) {
    emu_deadlocked = false;
    const int rc = with_generic(contract, lanes, block, s, sdt, st, b, bdt, rows, E, K, rn, rs, w, i);
    return rc != 0 ? rc : emu_deadlocked ? 6 : 0;
}

// contract: 0 = aiter, 1 = serial, 2..5 the model contracts (with_model_shape).
extern "C" int emu_route(int contract, int lanes, int block, const void* s, int sdt, int64_t st, const void* b, int bdt,
                         int rows, int E, int K, int vec, int rn, float rs, float* w, int32_t* i) {
    emu_deadlocked = false;
    const bool kimi = (E == 896 && K == 16) || (E == 384 && K == 8) || (E == 224 && K == 16);
    const int rc = contract >= 2 || (contract == 0 && !kimi)
                       ? (vec ? with_model_shape(contract, lanes, block, s, sdt, st, b, bdt, rows, E, K, rn, rs, w, i) : 2)
                   : contract == 0 ? with_shape<radix4::AiterContract>(lanes, block, s, sdt, st, b, bdt, rows, E, K, vec, rn, rs, w, i)
                                   : with_shape<radix4::SerialContract>(lanes, block, s, sdt, st, b, bdt, rows, E, K, vec, rn, rs, w, i);
    return rc != 0 ? rc : emu_deadlocked ? 6 : 0;  // 6: some lanes never reached a barrier the others wait at
}

// The model contracts' score as the kernel computes it (model_scores, four a call): 2 the
// sigmoid, 4 sqrt(softplus(x)); 12 and 14 the same through libm alone.
extern "C" void emu_score(int contract, const float* x, float* out, int64_t n) {
    for (int64_t k = 0; k < n; k += 4) {
        float in[4] = {0.0f, 0.0f, 0.0f, 0.0f}, r[4];
        for (int i = 0; i < 4 && k + i < n; ++i) in[i] = x[k + i];
        if (contract == 4) radix4::float64_scores<radix4::ModelContract, EmuLanes<32>, true, 4>(in, r);
        if (contract == 2) radix4::float64_scores<radix4::ModelContract, EmuLanes<32>, false, 4>(in, r);
        for (int i = 0; i < 4; ++i) {
            if (contract == 12) r[i] = radix4::rounded_sigmoid(in[i]);
            if (contract == 14) r[i] = radix4::sqrt_softplus(in[i]);
        }
        for (int i = 0; i < 4 && k + i < n; ++i) out[k + i] = r[i];
    }
}

// The fast float64 forms alone, and whether each decided its value (sure).
extern "C" void emu_fast_score(int sqrt_softplus, const float* x, float* out, uint8_t* sure, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
        bool ok;
        out[k] = sqrt_softplus ? radix4::fast64::sqrt_softplus<EmuLanes<32>>(x[k], ok)
                               : radix4::fast64::sigmoid<EmuLanes<32>>(x[k], ok);
        sure[k] = ok;
    }
}

extern "C" void emu_sigmoid(int contract, const float* x, float* out, int64_t n) {
    for (int64_t k = 0; k < n; ++k) {
        out[k] = contract == 0 ? radix4::contract_sigmoid<radix4::AiterContract, EmuLanes<32>>(x[k])
                               : radix4::contract_sigmoid<radix4::SerialContract, EmuLanes<32>>(x[k]);
    }
}

extern "C" void emu_hook_counts(int* out) { out[0] = emu_waits.load(); out[1] = emu_triggers.load(); }

extern "C" void emu_score_path_counts(long* out) {
    for (int p = 0; p < 2; ++p) out[p] = emu_score_paths[p].exchange(0);
}

extern "C" void emu_key_path_counts(long* out) {
    for (int p = 0; p < 2; ++p) out[p] = emu_key_paths[p].exchange(0);
}

extern "C" void emu_path_counts(long* out, int reset) {
    for (int p = 0; p < 6; ++p) out[p] = reset ? emu_paths[p].exchange(0) : emu_paths[p].load();
}
"""


def _launch_mask(launches) -> int:
    """EMULATION's EMU_LAUNCHES bits for (lanes, block) pairs."""
    return sum(1 << ((lanes == 64) * 5 + block) for lanes, block in set(launches))


def _build_emulation(tmp_path_factory, rank_max=None, defines=(), launches=None):
    """Builds (or finds in the kernel cache) the emulation; ``launches``: only these (lanes, block) shapes (all by default)."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not on PATH")
    src = tmp_path_factory.mktemp("radix4_emulation") / "radix4_emulation.cpp"
    src.write_text(EMULATION)
    # -fno-gnu-unique: the kernel's __shared__ arrays are static locals of a
    # template; as GNU-unique symbols, two builds loaded into one process would
    # share them (with the first build's sizes).
    # -O0: the build's 240 kernel instantiations compile in 12 s of CPU instead
    # of 30 s at -O1 (twelve builds a session); with lanes as fibers a pass over
    # CASES still runs in under a second, and the bits are the same (checked).
    flags = ["-O0", "-std=c++20", "-shared", "-fPIC", "-ffp-contract=off", "-fno-gnu-unique", f"-I{HERE}"]
    if rank_max is not None:
        flags.append(f"-DRADIX4_RANK_MAX={rank_max}")
    flags += [f"-D{d}" for d in defines]
    if launches is not None:  # a build for a few Kimi launch shapes: aiter and serial only
        flags += [f"-DEMU_LAUNCHES={_launch_mask(launches)}", "-DEMU_MODELS=0"]
    lib = load_library(compile_shared(src, compiler="g++", flags=flags, depends=radix4.headers("cuda")[:2]))
    p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
    lib.emu_route.argtypes = [i, i, i, p, i, i64, p, i, i, i, i, i, i, f, p, p]
    lib.emu_route.restype = i
    lib.emu_route_generic.argtypes = [i, i, i, p, i, i64, p, i, i, i, i, i, f, p, p]
    lib.emu_route_generic.restype = i
    lib.emu_sigmoid.argtypes = [i, p, p, i64]
    lib.emu_score.argtypes = [i, p, p, i64]
    lib.emu_fast_score.argtypes = [i, p, p, p, i64]
    lib.emu_hook_counts.argtypes = [p]
    lib.emu_path_counts.argtypes = [p, i]
    lib.emu_score_path_counts.argtypes = [p]
    lib.emu_key_path_counts.argtypes = [p]
    return lib


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    """The kernel as shipped: the rank step for small candidate sets, radix rounds otherwise."""
    return _build_emulation(tmp_path_factory)


# The two ways to finish a selection, each forced on every row: 0 turns the
# rank step off (radix rounds only); 1024 sends every row with unequal keys
# through the rank step. Built for the launch shapes the one-path tests here
# and in test_radix4_serial.py use (one build each for both files).
ONE_PATH_LAUNCHES = ((32, 1), (32, 0), (32, 4), (64, 1))


@pytest.fixture(scope="module", params=[0, 1024], ids=["radix-rounds-only", "rank-step-only"])
def emulation_one_path(tmp_path_factory, request):
    return _build_emulation(tmp_path_factory, rank_max=request.param, launches=ONE_PATH_LAUNCHES)


CODES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2}
CONTRACTS = {"aiter": 0, "serial": 1, "lowest": 2, "grouped": 3, "sqrt_softplus": 4, "grouped_zero": 5}


def emulated_route(lib, lanes, scores, bias, topk, renormalize, rs, *, block=0, vec=True, contract="aiter"):
    """The emulated kernel. block: 0 warp per token, 1 the default block, 2 two warps, 3 a vector per thread,
    4 a warp per token with two tokens per block, as the dense kernel (approximate keys)."""
    M, E = scores.shape
    weights = torch.full((M, topk), 12345.0, dtype=torch.float32)  # poisoned: every slot must be written
    ids = torch.full((M, topk), -7, dtype=torch.int32)
    rc = lib.emu_route(CONTRACTS[contract], lanes, block, scores.data_ptr(), CODES[scores.dtype], scores.stride(0),
                       bias.data_ptr(), CODES[bias.dtype], M, E, topk, int(vec), int(renormalize), rs,
                       weights.data_ptr(), ids.data_ptr())  # fmt: skip
    assert rc == 0, f"emu_route returned {rc} (4: launch ({lanes}, {block}) not in this build's launches; 6: deadlock)"
    return weights, ids


def emulated_sigmoid(lib, scores, contract="aiter"):
    x = scores.float().contiguous()
    sig = torch.empty_like(x)
    lib.emu_sigmoid(CONTRACTS[contract], x.data_ptr(), sig.data_ptr(), x.numel())
    return sig


def reference(lib, scores, bias, topk, renormalize, rs):
    """Contract aiter, plainly: sort experts by (rank key desc, tie priority asc)."""
    sig = emulated_sigmoid(lib, scores)
    r = sig + bias.float()
    prio = tie_priority(scores.shape[1])
    weights, ids = [], []
    for row in range(scores.shape[0]):
        def rank(e, row=row):
            v = float(r[row, e])
            return (1, 0.0 if v == 0 else v, -prio[e]) if v == v else (0, 0.0, -prio[e])  # NaN below all

        chosen = sorted(range(scores.shape[1]), key=rank, reverse=True)[:topk]
        w = sig[row, chosen]
        total = w.sum()
        if renormalize and total > 0:
            w = w / total
        weights.append(w * torch.tensor(rs, dtype=torch.float32))
        ids.append(chosen)
    return torch.stack(weights), torch.tensor(ids, dtype=torch.int32)


WIDE_TIE_CASE = "small tie pools, keys too spread to pack"


def _cases():
    g = torch.Generator().manual_seed(0)
    E, K = 896, 16
    yield "random bf16 / fp32 bias", (torch.randn(6, E, generator=g) * 2).bfloat16(), torch.randn(E, generator=g) * 0.05, K
    yield "random fp32 / bf16 bias", torch.randn(4, E, generator=g), (torch.randn(E, generator=g) * 0.1).bfloat16(), K
    yield "all equal", torch.zeros(2, E, dtype=torch.bfloat16), torch.zeros(E), K
    straddle = torch.full((4, E), -2.0)
    for row in range(4):
        perm = torch.randperm(E, generator=g)
        straddle[row, perm[: 3 + 4 * row]] = 3.0
        straddle[row, perm[3 + 4 * row : 43 + 4 * row]] = 1.0
    yield "tie pool straddling the cutoff", straddle.bfloat16(), torch.zeros(E), K
    levels = torch.tensor([-1.0, 0.0, 0.5, 1.0])[torch.randint(0, 4, (3, E), generator=g)]
    yield "four levels, bias levels", levels, torch.randint(0, 3, (E,), generator=g) * 0.25, K
    nan = torch.randn(4, E, generator=g)
    nan[0] = float("nan")
    nan[1, 100:] = float("nan")
    nan[2, :890] = float("nan")
    nan[3, ::3] = float("nan")
    yield "NaN rows", nan, torch.randn(E, generator=g) * 0.05, K
    inf = torch.randn(3, E, generator=g)
    inf[:, ::7] = float("inf")
    inf[:, 3::11] = float("-inf")
    inf[0] = float("-inf")
    yield "+-inf logits, all -inf row", inf, torch.zeros(E), K
    yield "saturated sigmoid", torch.randint(0, 4, (3, E), generator=g).float() * 43 - 100, torch.zeros(E), K
    yield "negative ranking values", torch.randn(3, E, generator=g), torch.full((E,), -2.0), K
    yield "wide bias spread (many keys near the max)", (torch.randn(3, E, generator=g) * 2).bfloat16(), torch.randn(E, generator=g), K
    masked = torch.full((2, E), float("nan"))
    masked[0, :10] = 1.0  # 10 keys of -inf ranking value, 886 NaN keys: lo clamps at 0
    masked[1, 5:40] = 1.0
    yield "-inf bias, mostly NaN logits", masked, torch.full((E,), float("-inf")), K
    crowded = torch.randn(2, E, generator=g) * 0.1
    crowded[0, (torch.arange(E) >> 2) % 32 == 0] += 5.0  # all 28 on one lane of a warp-per-token launch
    crowded[1, (torch.arange(E) >> 2) % 128 == 0] += 5.0  # all 8 on one thread of a 4-warp block
    yield "top keys crowded on one lane", crowded, torch.zeros(E), K
    # Equal keys among few candidates (C <= 32: the one-candidate-per-lane
    # rank pass): a tie straddling the cutoff, and a tie among the winners.
    few = torch.full((3, E), -2.0)
    for row in range(3):
        perm = torch.randperm(E, generator=g)
        few[row, perm[:12]] = 3.0 + 0.125 * torch.arange(12.0)
        few[row, perm[12 : 18 + row]] = 2.0
    few[2, perm[:2]] = 9.0
    yield "small tie pools among the candidates", few.bfloat16(), torch.zeros(E), K
    # The same with the candidates' keys spread too wide for the rank step's
    # packed words (sig 0.27 .. 1.0 spans more than 2^22 key values): the
    # pass by keys, then by composites, ranks them.
    wide = torch.full((4, E), -8.0)
    for row in range(3):
        perm = torch.randperm(E, generator=g)
        wide[row, perm[: 8 + 2 * row]] = 9.0
        wide[row, perm[8 + 2 * row : 22 + 2 * row]] = -1.0
    # Row 3 for a vector per thread (7 warps of 32 vectors): each warp gets
    # one 9.0 and three -1.0 on four lanes, and no two of the 28 share a lane
    # of a warp per token either, so both launch shapes bound at the -1.0 key.
    for w in range(7):
        for j, value in enumerate((9.0, -1.0, -1.0, -1.0)):
            wide[3, 4 * (32 * w + (5 * w + 8 * j) % 32)] = value
    yield WIDE_TIE_CASE, wide.bfloat16(), torch.zeros(E), K
    yield "Kimi-K2 random", (torch.randn(4, 384, generator=g) * 2).bfloat16(), torch.randn(384, generator=g) * 0.05, 8
    yield "Kimi-K2 all equal", torch.zeros(2, 384), torch.zeros(384), 8
    yield "Kimi-K3 pruned 224 random", (torch.randn(5, 224, generator=g) * 2).bfloat16(), torch.randn(224, generator=g) * 0.05, K
    yield "Kimi-K3 pruned 224 all equal", torch.zeros(2, 224, dtype=torch.bfloat16), torch.zeros(224), K
    pool = torch.full((3, 224), -2.0)
    for row in range(3):
        perm = torch.randperm(224, generator=g)
        pool[row, perm[: 5 + 3 * row]] = 3.0
        pool[row, perm[5 + 3 * row : 30 + 3 * row]] = 1.0
    yield "Kimi-K3 pruned 224 tie pool", pool.bfloat16(), torch.zeros(224), K
    nan224 = torch.randn(3, 224, generator=g)
    nan224[0] = float("nan")
    nan224[1, 10:] = float("nan")
    nan224[2, ::2] = float("nan")
    yield "Kimi-K3 pruned 224 NaN rows", nan224, torch.randn(224, generator=g) * 0.05, K


CASES = list(_cases())


SHAPE_PARAMS = [(32, 1), (32, 2), (32, 3), (32, 0), (32, 4), (64, 1), (64, 2), (64, 0)]
SHAPE_IDS = ["warp32-4-warps", "warp32-2-warps", "warp32-vector-per-thread", "warp32-warp-per-token",
             "warp32-dense-2-tokens-per-block", "wave64-4-waves", "wave64-2-waves", "wave64-wave-per-token"]  # fmt: skip
SHAPES = pytest.mark.parametrize("lanes,block", SHAPE_PARAMS, ids=SHAPE_IDS)


@needs_gxx
@SHAPES
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_emulated_kernel_matches_plain_reference(emulation, lanes, block, case):
    _, scores, bias, topk = case
    for renormalize, rs in ((True, 2.5), (False, 1.0)):
        w, ids = emulated_route(emulation, lanes, scores, bias, topk, renormalize, rs, block=block)
        rw, rids = reference(emulation, scores, bias, topk, renormalize, rs)
        assert torch.equal(ids, rids), f"ids differ in rows {(ids != rids).any(1).nonzero().flatten().tolist()}"
        torch.testing.assert_close(w, rw, rtol=1e-5, atol=1e-6, equal_nan=True)


@extra_builds  # slow: see extra_builds
@needs_gxx
@pytest.mark.parametrize("lanes,block", [(32, 1), (32, 4), (64, 1)], ids=["warp32-4-warps", "warp32-2-tokens-per-block", "wave64-4-waves"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_each_selection_path_alone_matches_plain_reference(emulation_one_path, lanes, block, case):
    _, scores, bias, topk = case
    w, ids = emulated_route(emulation_one_path, lanes, scores, bias, topk, True, 2.5, block=block)
    rw, rids = reference(emulation_one_path, scores, bias, topk, True, 2.5)
    assert torch.equal(ids, rids), f"ids differ in rows {(ids != rids).any(1).nonzero().flatten().tolist()}"
    torch.testing.assert_close(w, rw, rtol=1e-5, atol=1e-6, equal_nan=True)


# The tuning switches of radix4_router.h against the defaults (RADIX4_EX2_FTZ=1,
# RADIX4_COPY_ENTRY16=1, RADIX4_RANK_KEY32=1, RADIX4_RANK_PACKED=1, RADIX4_COPY_MASK=1,
# RADIX4_COPY_CURSOR, which follows RADIX4_COPY_ENTRY16, RADIX4_COPY_CURSORS=4 and
# RADIX4_APPROXIMATE_KEYS=3, the dense kernel's): each must leave every output bit as it was.
SWITCHES = {
    "plain-exp2-two-arrays": ("RADIX4_EX2_FTZ=0", "RADIX4_COPY_ENTRY16=0"),  # the cursor goes off with the entries
    "sorted-bound": ("RADIX4_SORTED_BOUND=1",),
    "early-trigger": ("RADIX4_PDL_LATE_TRIGGER=0",),
    "rank-by-composites": ("RADIX4_RANK_KEY32=0", "RADIX4_RANK_PACKED=0"),
    "rank-by-keys-then-composites": ("RADIX4_RANK_PACKED=0",),
    "copy-count-by-mask": ("RADIX4_COPY_CURSOR=0",),
    "copy-count-by-sum": ("RADIX4_COPY_CURSOR=0", "RADIX4_COPY_MASK=0"),
    "one-copy-cursor": ("RADIX4_COPY_CURSORS=1",),
    "two-copy-cursors": ("RADIX4_COPY_CURSORS=2",),
    "exact-keys": ("RADIX4_APPROXIMATE_KEYS=0",),
    "approximate-keys-in-every-launch": ("RADIX4_APPROXIMATE_KEYS=1",),  # the block shape's candidates by approximate keys too
}


SWITCH_LAUNCHES = ((32, 1), (32, 0), (32, 4), (64, 1), (64, 0))


@pytest.fixture(scope="module", params=list(SWITCHES), ids=list(SWITCHES))
def emulation_switched(tmp_path_factory, request):
    return _build_emulation(tmp_path_factory, defines=SWITCHES[request.param], launches=SWITCH_LAUNCHES)


@pytest.fixture(scope="module")
def shipped_outputs(emulation):
    """The shipped build's outputs over CASES per launch shape and contract, computed once for all the switches."""
    cache = {}

    def outputs(lanes, block, contract):
        if (lanes, block, contract) not in cache:
            cache[lanes, block, contract] = [emulated_route(emulation, lanes, scores, bias, topk, True, 2.5, block=block, contract=contract)
                                             for _, scores, bias, topk in CASES]  # fmt: skip
        return cache[lanes, block, contract]

    return outputs


@extra_builds  # slow: see extra_builds
@needs_gxx
@pytest.mark.parametrize("lanes,block", SWITCH_LAUNCHES,
                         ids=["warp32-4-warps", "warp32-warp-per-token", "warp32-2-tokens-per-block", "wave64-4-waves",
                              "wave64-wave-per-token"])  # fmt: skip
def test_tuning_switches_keep_every_bit(shipped_outputs, emulation_switched, lanes, block):
    for contract in ("aiter", "serial"):
        for (_, scores, bias, topk), want in zip(CASES, shipped_outputs(lanes, block, contract)):
            got = emulated_route(emulation_switched, lanes, scores, bias, topk, True, 2.5, block=block, contract=contract)
            assert torch.equal(got[1], want[1]) and torch.equal(got[0].view(torch.int32), want[0].view(torch.int32))


@needs_gxx
@SHAPES
def test_emulated_kernel_strided_rows_and_scalar_loads(emulation, lanes, block):
    g = torch.Generator().manual_seed(3)
    backing = (torch.randn(3, 1000, generator=g) * 2).bfloat16()
    scores, bias = backing[:, 3 : 3 + 896], torch.randn(896, generator=g) * 0.05
    w, ids = emulated_route(emulation, lanes, scores, bias, 16, True, 2.5, block=block, vec=False)
    rw, rids = reference(emulation, scores, bias, 16, True, 2.5)
    assert torch.equal(ids, rids)
    torch.testing.assert_close(w, rw, rtol=1e-5, atol=1e-6)


PATHS = ("packed", "keys", "composites", "regions", "radix", "packed_pairs")


def _counted_over_cases(read_and_reset, names, lib, lanes, block, contract, cases):
    """One of the emulation's path counters (``read_and_reset(counts)``), over ``cases`` routed from zero."""
    counts = (ctypes.c_long * len(names))()
    read_and_reset(counts)
    for _, scores, bias, topk in cases:
        emulated_route(lib, lanes, scores, bias, topk, True, 2.5, block=block, contract=contract)
    read_and_reset(counts)
    return dict(zip(names, counts))


def emulated_paths(lib, lanes, block, contract, cases=CASES):
    """How many lanes took each way of the selection over ``cases`` (radix4::RankPath)."""
    return _counted_over_cases(lambda c: lib.emu_path_counts(c, 1), PATHS, lib, lanes, block, contract, cases)


# The cases must reach every way the rank step can finish with one candidate
# per lane, or a broken fallback would pass unseen: the packed words, the
# pass by keys (keys too spread to pack, none equal) and the redo by
# composites (too spread, some equal: WIDE_TIE_CASE); and the packed words two
# a lane (more candidates than lanes, as in about one random row in 45).
@needs_gxx
@SHAPES
@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_cases_reach_every_way_of_the_rank_step(emulation, lanes, block, contract):
    seen = emulated_paths(emulation, lanes, block, contract)
    missing = [p for p in ("packed", "keys", "composites", "radix", "packed_pairs") if seen[p] == 0]
    assert not missing, f"no case took {missing}: {seen}"


def emulated_key_paths(lib, lanes, block, contract, cases=CASES):
    """How many lanes selected by approximate keys and how many the exact way over ``cases`` (radix4::KeyPath)."""
    return _counted_over_cases(lib.emu_key_path_counts, ("approximate", "exact"), lib, lanes, block, contract, cases)


# The dense kernel selects by approximate keys and takes the exact way for NaN, huge keys and too many candidates
# (radix4_router.h's approximate_key): the cases must reach both, or a broken exact way would pass unseen; the
# other launch shapes use neither.
@needs_gxx
@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_cases_reach_both_ways_of_the_approximate_keys_in_the_dense_launch_only(emulation, contract):
    dense = emulated_key_paths(emulation, 32, 4, contract)
    assert dense["approximate"] > 0 and dense["exact"] > 0, dense
    for block in (0, 1):
        assert emulated_key_paths(emulation, 32, block, contract) == {"approximate": 0, "exact": 0}


@extra_builds  # slow: see extra_builds
@needs_gxx
def test_each_one_path_build_takes_its_path(emulation_one_path, request):
    # rank_max 0: radix rounds only. 1024: every row with unequal keys through the rank step, so the rows with
    # more candidates than lanes reach both ways of ranking them: the packed words two a lane (a small span) and
    # the region loop (a span too wide to pack, or more than two candidates a lane).
    seen = emulated_paths(emulation_one_path, 32, 1, "aiter")
    if request.node.callspec.params["emulation_one_path"] == 0:
        assert seen["radix"] > 0 and sum(v for p, v in seen.items() if p != "radix") == 0, seen
    else:
        assert seen["regions"] > 0 and seen["packed_pairs"] > 0, seen


@needs_gxx
def test_the_wide_tie_case_needs_the_redo_by_composites(emulation):
    (case,) = [c for c in CASES if c[0] == WIDE_TIE_CASE]
    name, scores, bias, topk = case
    for row in range(scores.shape[0]):
        seen = emulated_paths(emulation, 32, 0, "aiter", cases=[(name, scores[row : row + 1], bias, topk)])
        assert seen["composites"] > 0, f"row {row}: {seen}"


@needs_gxx
def test_emulated_all_equal_row_starts_with_aiters_first_lane(emulation):
    _, ids = emulated_route(emulation, 32, torch.zeros(1, 896), torch.zeros(896), 16, True, 1.0)
    assert ids[0, :8].tolist() == [252, 253, 254, 255, 508, 509, 510, 511]
    # E = 224: 56 vectors, lanes 0..55 hold one each; lane 48 has the lowest rank among them (8)
    prio = tie_priority(224)
    for lanes, block in SHAPE_PARAMS:
        _, ids = emulated_route(emulation, lanes, torch.zeros(1, 224), torch.zeros(224), 16, True, 1.0, block=block)
        assert ids[0].tolist() == sorted(range(224), key=prio.__getitem__)[:16]
        assert ids[0, :4].tolist() == [192, 193, 194, 195]


@needs_gxx
def test_tie_table_matches_the_contracts_closed_form(tmp_path):
    src = tmp_path / "tie.cpp"
    src.write_text(
        '#include "tie_order.h"\n#include <cstdio>\n'
        "int main() { for (int e = 0; e < 896; ++e) std::printf(\"%d\\n\", radix4::tie_priority<896>(e)); }\n"
    )
    exe = tmp_path / "tie"
    subprocess.run(["g++", "-std=c++17", f"-I{HERE}", str(src), "-o", str(exe)], check=True)
    got = [int(v) for v in subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout.split()]

    def closed_form(e):  # docs/contracts.md#the-tie-table, E = 896
        vec = e >> 2
        rank, bank = LANE_RANK[vec & 63], vec >> 6
        vec_rank = rank * 3 + bank if rank < 32 else 96 + (rank - 32) * 4 + bank
        return vec_rank * 4 + (e & 3)

    assert got == [closed_form(e) for e in range(896)] == tie_priority(896)
