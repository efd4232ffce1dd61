"""Build, load and call the serial-contract libraries; validate route() arguments.

Shared by the two kernel modules (``scan`` and ``block_argmax``). torch is
imported only inside the functions that need it.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

from .._args import check_route_args as _check_common
from .._args import serves_layout
from .._build import compile_shared, load_library

HERE = Path(__file__).resolve().parent
ROW_HEADER = HERE / "serial_row.h"
HOST_SOURCE = HERE / "serial_host.cpp"
CUDA_SOURCE = HERE / "serial_cuda.cu"

HOST_COMPILER = "g++"
CUDA_COMPILER = "nvcc"
# No fast math anywhere: the contract fixes plain expf and IEEE division, and
# it has no fused multiply-add, so contraction is off on both sides.
HOST_FLAGS = ["-O2", "-shared", "-fPIC", "-std=c++17", "-ffp-contract=off", "-fno-fast-math"]
CUDA_DEVICE_FLAGS = ["-O3", "-std=c++17", "-fmad=false", "-ftz=false", "-prec-div=true", "-prec-sqrt=true"]
CUDA_FLAGS = ["-shared", "-Xcompiler", "-fPIC", "-Xcompiler", "-ffp-contract=off", *CUDA_DEVICE_FLAGS]

DTYPE_CODES = {"float32": 0, "bfloat16": 1}
BLOCK_ARGMAX_MAX_EXPERTS = 4096  # mirrors serial_cuda.cu: (2 E + topk) fp32 in 48 KiB of shared memory

_ERRORS = {
    1: "a null pointer was passed",
    2: "the shape is out of range (M < 0, E < 1, topk < 1 or topk > E)",
    3: "the row stride is smaller than E",
    4: "a dtype flag is neither float32 nor bfloat16",
    5: f"E exceeds {BLOCK_ARGMAX_MAX_EXPERTS} experts (the shared memory of block argmax)",
    6: "the host build could not allocate its scratch row",
}
_CUDA_ERROR_BASE = 1000

_I64, _INT, _FLOAT, _PTR = ctypes.c_int64, ctypes.c_int, ctypes.c_float, ctypes.c_void_p
_ROUTE_ARGS = [_PTR, _I64, _INT, _PTR, _INT, _I64, _INT, _INT, _INT, _FLOAT]
_SIGNATURES = {
    "serial_route_host": [*_ROUTE_ARGS, _PTR, _PTR],
    "serial_scan_route_cuda": [*_ROUTE_ARGS, _PTR, _PTR, _PTR, _PTR],
    "block_argmax_route_cuda": [*_ROUTE_ARGS, _PTR, _PTR, _PTR],
}

_loaded: dict[tuple[str, str], ctypes.CDLL] = {}


# ---------------------------------------------------------------- devices


def device_kind(device) -> tuple[str, int | None]:
    """``("cpu", None)`` or ``("cuda", index)`` for a str or torch.device; ValueError otherwise."""
    text = str(device)
    if text == "cpu":
        return "cpu", None
    if text == "cuda":
        return "cuda", None
    if text.startswith("cuda:") and text[5:].isdigit():
        return "cuda", int(text[5:])
    raise ValueError(f"device={device!r} is not supported; pass 'cpu', 'cuda' or 'cuda:N'")


def cuda_supported(device) -> tuple[bool, str]:
    """Whether torch sees a CUDA device there and nvcc is on PATH (never raises)."""
    try:
        kind, index = device_kind(device)
        if kind != "cuda":
            return False, f"device={device!r} is not a CUDA device"
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if not torch.cuda.is_available():
            return False, f"torch {torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
        if index is not None and index >= torch.cuda.device_count():
            return False, f"device={device!r}: only {torch.cuda.device_count()} CUDA device(s) are visible"
        if shutil.which(CUDA_COMPILER) is None:
            return False, f"{CUDA_COMPILER} is not on PATH; install the CUDA toolkit to build the kernels"
        return True, f"CUDA device {cuda_arch(device)} with {CUDA_COMPILER}"
    except Exception as exc:  # noqa: BLE001 -- the contract of this function is to report, not raise
        return False, f"{type(exc).__name__}: {exc}"


def host_supported(device) -> tuple[bool, str]:
    try:
        kind, _ = device_kind(device)
    except ValueError as exc:
        return False, str(exc)
    if kind != "cpu":
        return False, f"device={device!r} is not the CPU"
    if shutil.which(HOST_COMPILER) is None:
        return False, f"{HOST_COMPILER} is not on PATH; install g++ to build the host kernel"
    return True, f"CPU with {HOST_COMPILER}"


def cuda_arch(device) -> str:
    """``sm_XY`` of the CUDA device (needs torch with CUDA)."""
    import torch

    _, index = device_kind(device)
    major, minor = torch.cuda.get_device_capability(index if index is not None else torch.cuda.current_device())
    return f"sm_{major}{minor}"


# ---------------------------------------------------------------- building


def build_host() -> Path:
    return compile_shared(HOST_SOURCE, compiler=HOST_COMPILER, flags=HOST_FLAGS, depends=[ROW_HEADER])


def build_cuda(arch: str) -> Path:
    if not (arch.startswith("sm_") and arch[3:].rstrip("a").isdigit()):
        raise ValueError(f"arch={arch!r} is not a CUDA architecture; pass e.g. 'sm_90'")
    return compile_shared(CUDA_SOURCE, compiler=CUDA_COMPILER, flags=[*CUDA_FLAGS, f"-arch={arch}"], depends=[ROW_HEADER])


def library(kind: str, arch: str | None = None) -> ctypes.CDLL:
    """The loaded library for ``kind`` ('cpu' or 'cuda'), built on first use."""
    key = (kind, arch or "")
    if key not in _loaded:
        path = build_host() if kind == "cpu" else build_cuda(arch)
        lib = load_library(path)
        for name, argtypes in _SIGNATURES.items():
            if hasattr(lib, name):
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = argtypes, ctypes.c_int
        if kind == "cuda":
            lib.serial_cuda_error_string.argtypes, lib.serial_cuda_error_string.restype = [_INT], ctypes.c_char_p
        _loaded[key] = lib
    return _loaded[key]


# ---------------------------------------------------------------- arguments


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, max_experts: int | None = None,
            logits_strides: tuple[int, int] | None = None, bias_stride: int | None = None) -> bool:  # fmt: skip
    """The calls ``check_route_args`` takes: the shape, bf16/fp32 logits and bias, and the layouts (logits of column
    stride 1 and row stride >= E, a bias of stride 1: ``kernels._args.serves_layout``)."""
    return (
        serves_layout(rows=rows, experts=experts, logits_strides=logits_strides, bias_stride=bias_stride)
        and rows >= 0
        and 1 <= topk <= experts
        and (max_experts is None or experts <= max_experts)
        and dtype_name(dtype) in DTYPE_CODES
        and dtype_name(bias_dtype) in DTYPE_CODES
    )


def check_route_args(scores, bias, topk, renormalize, routed_scaling_factor, *, max_experts: int | None = None):
    """Validate route() arguments; return ``(M, E, row_stride, scores_code, bias_code, rs)``."""
    M, E, row_stride, rs = _check_common(scores, bias, topk, renormalize, routed_scaling_factor, dtypes=tuple(DTYPE_CODES),
                                         bias_dtypes=tuple(DTYPE_CODES))  # fmt: skip
    if max_experts is not None and E > max_experts:
        raise ValueError(f"E={E} is more than this kernel's {max_experts} experts; use the serial scan kernel")
    return M, E, row_stride, DTYPE_CODES[dtype_name(scores.dtype)], DTYPE_CODES[dtype_name(bias.dtype)], rs


def raise_for_status(rc: int, entry: str) -> None:
    if rc == 0:
        return
    if rc >= _CUDA_ERROR_BASE:
        code = rc - _CUDA_ERROR_BASE
        name = "unknown"
        for (kind, _), lib in _loaded.items():
            if kind == "cuda":
                name = lib.serial_cuda_error_string(code).decode(errors="replace")
        raise RuntimeError(f"{entry} failed with CUDA error {code} ({name})")
    raise RuntimeError(f"{entry} returned {rc}: {_ERRORS.get(rc, 'unknown error')}")
