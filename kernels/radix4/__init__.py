"""Kernel ``radix4``: the Kimi router's radix-4 top-k, one source for CUDA and HIP.

Contract ``aiter`` (docs/contracts.md#contract-aiter), per row of logits ``x[E]``
and bias ``b[E]``:

- ``sig = 1 / (1 + exp2(-log2(e) * x))`` in fp32 (IEEE division, no fast math;
  bf16 logits and bias widened exactly);
- ``r = sig + b`` in fp32; ``r`` only ranks;
- rank keys: order-preserving fp32 -> uint32, ``-0.0 == +0.0``, NaN below -inf;
- the ``topk`` largest keys, equal keys in aiter's wave64 tie order (expert 252
  first for E=896); output ordered by (key desc, tie priority asc);
- ``w = sig[id]``; with ``renormalize``, ``w / sum(w)`` only if ``sum(w) > 0``;
  then ``w * routed_scaling_factor``.

Outputs: ``weights`` fp32 ``[M, topk]`` and ``ids`` int32 ``[M, topk]``, contiguous.
Inputs: ``scores`` ``[M, E]`` bf16 or fp32, column stride 1, row stride >= E;
``bias`` ``[E]`` bf16 or fp32, stride 1. Shapes: (E, topk) = (896, 16) (Kimi-K3)
or (384, 8) (Kimi-K2).

::

    supported_hardware() -> tuple[bool, str]     # CUDA sm_80+ or ROCm gfx942/gfx950; never raises
    build(*, arch=None) -> pathlib.Path          # BuildError on compiler error
    available() -> tuple[bool, str]              # never raises
    covered(*, rows, experts, topk, dtype, bias_dtype) -> bool
    route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, launch_shape=None)
        -> (weights, ids)

``arch`` is ``'sm_90'`` (nvcc) or ``'gfx942'`` (hipcc) and lets a machine without
a GPU compile the library. Launch shape: a block of 4 warps per token up to 256
rows (lowest latency), a warp per token above (least work per token); H200
figures are in radix4_entry.h and benchmarks/radix4_gpu_check.py. ``route`` launches on ``torch.cuda.current_stream``,
so a CUDA graph captures it, and never modifies its inputs.

Sources (no torch headers): ``radix4_router.h`` (the algorithm, shared),
``tie_order.h`` (aiter's tie table), ``lanes_cuda.cuh`` / ``lanes_hip.h`` (the
cross-lane primitives of each back end), ``radix4_entry.h`` (the C ABI),
``radix4.cu`` and ``radix4.hip`` (one translation unit per back end).
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path

from .._args import check_route_args
from .._build import BuildError, compile_shared, load_library

__all__ = [
    "MAX_ROWS",
    "NAME",
    "SHAPES",
    "available",
    "build",
    "covered",
    "cuda_source",
    "headers",
    "hip_source",
    "route",
    "supported_hardware",
]

NAME = "radix4"
HERE = Path(__file__).resolve().parent
SHAPES = frozenset({(896, 16), (384, 8)})  # (experts, topk); mirrors radix4_entry.h
# Rows per launch this kernel is meant for. On an H200 it beat torch-native
# routing at every batch measured up to 4096 rows (benchmarks/radix4_gpu_check.py);
# beyond that a library router may take over.
MAX_ROWS = 4096

CUDA_COMPILER = "nvcc"
HIP_COMPILER = "hipcc"
# No fast math, no fused multiply-add: ids must stay comparable with the contract.
CUDA_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-fmad=false", "-ftz=false", "-prec-div=true"]
HIP_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off"]
HIP_SUPPORTED = ("gfx942", "gfx950")

_DTYPE_CODES = {"float32": 0, "bfloat16": 1}
_RENORMALIZE = 1
_LAUNCH_SHAPES = {None: 0, "block": 2, "warp": 4}  # mirrors radix4_entry.h's flags
_STATUS = {
    1: "unsupported (experts, topk)",
    2: "unsupported dtype",
    3: "bad argument",
    4: "kernel launch failed",
}


def cuda_source() -> Path:
    return HERE / "radix4.cu"


def hip_source() -> Path:
    return HERE / "radix4.hip"


def headers(backend: str) -> list[Path]:
    """The headers a back end's translation unit includes (``'cuda'`` or ``'hip'``)."""
    lanes = {"cuda": "lanes_cuda.cuh", "hip": "lanes_hip.h"}[backend]
    return [HERE / name for name in ("radix4_router.h", "tie_order.h", "radix4_entry.h", lanes)]


# ---------------------------------------------------------------- hardware


def _device_arch() -> tuple[str, str]:
    """``('cuda', 'sm_90')`` or ``('hip', 'gfx942')`` of the current device; needs torch with a GPU."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if torch.version.hip:
        return "hip", props.gcnArchName.split(":")[0]
    return "cuda", f"sm_{props.major}{props.minor}"


def supported_hardware() -> tuple[bool, str]:
    """(True, what) on CUDA sm_80+ or ROCm gfx942/gfx950 with its compiler; (False, why) otherwise. Never raises."""
    try:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if not torch.cuda.is_available():
            return False, f"no GPU: torch {torch.__version__} sees none (torch.cuda.is_available() is False)"
        backend, arch = _device_arch()
        if backend == "hip":
            if arch not in HIP_SUPPORTED:
                return False, f"ROCm device {arch} is not a CDNA3/4 target; radix4 supports {', '.join(HIP_SUPPORTED)}"
            compiler = HIP_COMPILER
        else:
            if int(arch[3:]) < 80:
                return False, f"CUDA device {arch} is older than sm_80 (radix4 needs redux.sync)"
            compiler = CUDA_COMPILER
        if shutil.which(compiler) is None:
            return False, f"{compiler} is not on PATH; install it to build radix4 for {arch}"
        return True, f"{arch} with {compiler}"
    except Exception as exc:  # noqa: BLE001 -- this function reports, it does not raise
        return False, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- building


def _compile(source: Path, arch: str, *, depends: list[Path], defines: tuple[str, ...] = ()) -> Path:
    """Compile a radix4 translation unit for ``arch`` into the cache; BuildError on compiler error."""
    extra = [f"-D{d}" for d in defines]
    if arch.startswith("sm_") and arch[3:].rstrip("a").isdigit():
        return compile_shared(source, compiler=CUDA_COMPILER, flags=[*CUDA_FLAGS, *extra, f"-arch={arch}"],
                              depends=depends)  # fmt: skip
    if arch.startswith("gfx"):
        env = {**os.environ, "HIP_PLATFORM": "amd"}  # nvcc may be installed too; hipcc would pick it
        return compile_shared(source, compiler=HIP_COMPILER, flags=[*HIP_FLAGS, *extra, f"--offload-arch={arch}"],
                              depends=depends, env=env)  # fmt: skip
    raise ValueError(f"arch={arch!r} is neither a CUDA ('sm_90') nor an AMD ('gfx942') architecture")


def build(*, arch: str | None = None, defines: tuple[str, ...] = ()) -> Path:
    """Compile (or find cached) the library for ``arch`` (default: the current device's).

    ``defines`` are preprocessor definitions such as ``("RADIX4_TOKENS_PER_BLOCK=2",)``
    (the benchmark times them). Raises BuildError if the compiler rejects the source
    or is missing.
    """
    if arch is None:
        ok, why = supported_hardware()
        if not ok:
            raise BuildError(f"cannot pick an architecture: {why}; pass arch='sm_90' or arch='gfx942'")
        _, arch = _device_arch()
    backend = "hip" if arch.startswith("gfx") else "cuda"
    source = hip_source() if backend == "hip" else cuda_source()
    return _compile(source, arch, depends=headers(backend), defines=tuple(defines))


_libraries: dict[tuple[str, tuple[str, ...]], ctypes.CDLL] = {}


def library(*, defines: tuple[str, ...] = ()) -> ctypes.CDLL:
    """The loaded library for the current device, built on first use."""
    _, arch = _device_arch()
    key = (arch, tuple(defines))
    if key not in _libraries:
        lib = load_library(build(arch=arch, defines=tuple(defines)))
        p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        lib.radix4_route.argtypes = [p, i, i64, p, i, i64, i, i, i, f, p, p, p]
        lib.radix4_route.restype = i
        lib.radix4_status_string.argtypes, lib.radix4_status_string.restype = [i], ctypes.c_char_p
        lib.radix4_runtime_error_string.argtypes, lib.radix4_runtime_error_string.restype = [], ctypes.c_char_p
        _libraries[key] = lib
    return _libraries[key]


def available() -> tuple[bool, str]:
    """supported_hardware, then a build and load; (False, why) instead of raising."""
    ok, why = supported_hardware()
    if not ok:
        return ok, why
    try:
        library()
    except Exception as exc:  # noqa: BLE001 -- report build failures as data
        return False, f"{type(exc).__name__}: {exc}".splitlines()[0]
    return True, why


# ---------------------------------------------------------------- routing


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype) -> bool:
    """Whether radix4 is meant for this call: a supported (experts, topk), 0 <= rows <= MAX_ROWS, bf16/fp32."""
    return (
        (experts, topk) in SHAPES
        and 0 <= rows <= MAX_ROWS
        and _dtype_name(dtype) in _DTYPE_CODES
        and _dtype_name(bias_dtype) in _DTYPE_CODES
    )


def _check_args(scores, bias, topk, renormalize, routed_scaling_factor) -> tuple[int, int, int, float]:
    """Validate route() arguments; return ``(M, E, row_stride, rs)``."""
    M, E, row_stride, rs = check_route_args(scores, bias, topk, renormalize, routed_scaling_factor, dtypes=tuple(_DTYPE_CODES),
                                            bias_dtypes=tuple(_DTYPE_CODES))  # fmt: skip
    if (E, int(topk)) not in SHAPES:
        shapes = ", ".join(f"E={e} with topk={k}" for e, k in sorted(SHAPES))
        raise ValueError(f"(E, topk)=({E}, {topk}) is not supported; radix4 takes {shapes}; use the oracle or aiter")
    if M >= 2**31 - 16:
        raise ValueError(f"M={M} rows is more than one launch takes; split the batch below 2**31 - 16 rows")
    if scores.device.type != "cuda":
        raise ValueError(f"scores.device={scores.device} is not a GPU; radix4 runs on CUDA or ROCm devices")
    return M, E, row_stride, rs


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0, *,
          launch_shape: str | None = None):  # fmt: skip
    """Route GPU ``scores`` [M, E] under contract ``aiter``; return ``(weights, ids)``.

    Launches on ``torch.cuda.current_stream(scores.device)``, so a CUDA graph
    captures it. Inputs are not modified. ``launch_shape`` ('block': a block
    per token, 'warp': a warp per token) overrides the choice by batch size,
    for benchmarks and tests; both give the same results.
    """
    import torch

    if launch_shape not in _LAUNCH_SHAPES:
        raise ValueError(f"launch_shape={launch_shape!r} is not one of None, 'block', 'warp'; leave it None")
    M, E, row_stride, rs = _check_args(scores, bias, topk, renormalize, routed_scaling_factor)
    weights = torch.empty((M, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    if M == 0:
        return weights, ids
    with torch.cuda.device(scores.device):
        lib = library()
        stream = torch.cuda.current_stream(scores.device).cuda_stream
        rc = lib.radix4_route(
            scores.data_ptr(), _DTYPE_CODES[_dtype_name(scores.dtype)], row_stride,
            bias.data_ptr(), _DTYPE_CODES[_dtype_name(bias.dtype)], M, E, topk,
            (_RENORMALIZE if renormalize else 0) | _LAUNCH_SHAPES[launch_shape], rs, weights.data_ptr(), ids.data_ptr(), stream,
        )  # fmt: skip
    if rc != 0:
        detail = lib.radix4_status_string(rc).decode(errors="replace")
        if rc == 4:
            detail += ": " + lib.radix4_runtime_error_string().decode(errors="replace")
        raise RuntimeError(f"radix4_route returned {rc} ({_STATUS.get(rc, 'unknown')}): {detail}")
    return weights, ids
