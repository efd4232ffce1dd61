"""Kernel ``serial``: the serial-scan router (one thread per row), on the CPU and on CUDA.

On the CPU it runs the host build (g++) of ``serial_row.h``; on CUDA the
serial-scan kernel of ``serial_cuda.cu``, which needs an [E, M] fp32
workspace that ``route`` allocates (from the graph pool under capture).
"""

from __future__ import annotations

from pathlib import Path

from . import _native

NAME = "serial"
__all__ = ["NAME", "available", "build", "covered", "route", "supported_hardware"]


def supported_hardware(device) -> tuple[bool, str]:
    """(True, what) on the CPU with g++ or a CUDA device with nvcc; (False, why) otherwise. Never raises."""
    try:
        kind, _ = _native.device_kind(device)
    except ValueError as exc:
        return False, str(exc)
    return _native.host_supported(device) if kind == "cpu" else _native.cuda_supported(device)


def build(device, *, arch: str | None = None) -> Path:
    """Compile (or find cached) the library for ``device``; BuildError if the compiler rejects it.

    ``arch`` ('sm_90', ...) overrides the CUDA device's own architecture, so
    that a machine without a GPU can compile the CUDA source.
    """
    kind, _ = _native.device_kind(device)
    if kind == "cpu":
        return _native.build_host()
    return _native.build_cuda(arch or _native.cuda_arch(device))


def available(device) -> tuple[bool, str]:
    """supported_hardware, then a build and load; (False, why) instead of raising."""
    ok, why = supported_hardware(device)
    if not ok:
        return ok, why
    try:
        kind, _ = _native.device_kind(device)
        _native.library(kind, None if kind == "cpu" else _native.cuda_arch(device))
    except Exception as exc:  # noqa: BLE001 -- report build failures as data
        return False, f"{type(exc).__name__}: {exc}"
    return True, why


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, logits_strides: tuple[int, int] | None = None,
            bias_stride: int | None = None) -> bool:  # fmt: skip
    """Whether this kernel accepts the call: any E, 1 <= topk <= E, bf16/fp32 logits and bias, logits of column
    stride 1 and row stride >= E, a bias of stride 1."""
    return _native.covered(rows=rows, experts=experts, topk=topk, dtype=dtype, bias_dtype=bias_dtype,
                           logits_strides=logits_strides, bias_stride=bias_stride)  # fmt: skip


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0):
    """Route ``scores`` [M, E] under the serial contract; return ``(weights fp32 [M, topk], ids int32 [M, topk])``.

    Runs where ``scores`` lives: the host build on the CPU, the serial-scan
    kernel on CUDA (on the current stream). Inputs are not modified.
    """
    import torch

    M, E, row_stride, sdt, bdt, rs = _native.check_route_args(scores, bias, topk, renormalize, routed_scaling_factor)
    weights = torch.empty((M, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    if M == 0:
        return weights, ids
    args = (scores.data_ptr(), row_stride, sdt, bias.data_ptr(), bdt, M, E, topk, int(renormalize), rs)
    if scores.device.type == "cpu":
        lib = _native.library("cpu")
        rc = lib.serial_route_host(*args, weights.data_ptr(), ids.data_ptr())
        _native.raise_for_status(rc, "serial_route_host")
        return weights, ids
    if scores.device.type != "cuda":
        raise ValueError(f"scores.device={scores.device} is not supported; pass a CPU or CUDA tensor")
    lib = _native.library("cuda", _native.cuda_arch(scores.device))
    workspace = torch.empty((E, M), dtype=torch.float32, device=scores.device)
    stream = torch.cuda.current_stream(scores.device).cuda_stream
    rc = lib.serial_scan_route_cuda(*args, workspace.data_ptr(), weights.data_ptr(), ids.data_ptr(), stream)
    _native.raise_for_status(rc, "serial_scan_route_cuda")
    return weights, ids
