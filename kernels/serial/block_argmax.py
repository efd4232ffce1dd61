"""Kernel ``block_argmax``: one CUDA block per row, a block argmax per round; CUDA only.

Bit-identical to the serial scan (same ``serial_row.h`` arithmetic, lowest
index on equal values). Takes E <= 4096 (ranking values, sigs and chosen
sigs live in the default 48 KiB of shared memory).
"""

from __future__ import annotations

from pathlib import Path

from . import _native

NAME = "block_argmax"
MAX_EXPERTS = _native.BLOCK_ARGMAX_MAX_EXPERTS
__all__ = ["MAX_EXPERTS", "NAME", "available", "build", "covered", "route", "supported_hardware"]


def supported_hardware(device) -> tuple[bool, str]:
    """(True, what) on a CUDA device with nvcc; (False, why) otherwise (the CPU included). Never raises."""
    return _native.cuda_supported(device)


def build(device, *, arch: str | None = None) -> Path:
    """Compile (or find cached) the CUDA library; ``arch`` overrides the device's. BuildError on compiler error."""
    kind, _ = _native.device_kind(device)
    if kind != "cuda":
        raise ValueError(f"device={device!r} is not a CUDA device; block_argmax runs on 'cuda' only")
    return _native.build_cuda(arch or _native.cuda_arch(device))


def available(device) -> tuple[bool, str]:
    """supported_hardware, then a build and load; (False, why) instead of raising."""
    ok, why = supported_hardware(device)
    if not ok:
        return ok, why
    try:
        _native.library("cuda", _native.cuda_arch(device))
    except Exception as exc:  # noqa: BLE001 -- report build failures as data
        return False, f"{type(exc).__name__}: {exc}"
    return True, why


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, logits_strides: tuple[int, int] | None = None,
            bias_stride: int | None = None) -> bool:  # fmt: skip
    """Whether this kernel accepts the call: E <= MAX_EXPERTS, 1 <= topk <= E, bf16/fp32 logits and bias, logits of
    column stride 1 and row stride >= E, a bias of stride 1."""
    return _native.covered(rows=rows, experts=experts, topk=topk, dtype=dtype, bias_dtype=bias_dtype, max_experts=MAX_EXPERTS,
                           logits_strides=logits_strides, bias_stride=bias_stride)  # fmt: skip


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0):
    """Route CUDA ``scores`` [M, E] under the serial contract; return ``(weights, ids)``.

    Launches on ``torch.cuda.current_stream(scores.device)``, so a CUDA graph
    captures it. Inputs are not modified.
    """
    import torch

    M, E, row_stride, sdt, bdt, rs = _native.check_route_args(
        scores, bias, topk, renormalize, routed_scaling_factor, max_experts=MAX_EXPERTS
    )
    if scores.device.type != "cuda":
        raise ValueError(f"scores.device={scores.device} is not a CUDA device; block_argmax runs on CUDA only")
    weights = torch.empty((M, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    if M == 0:
        return weights, ids
    lib = _native.library("cuda", _native.cuda_arch(scores.device))
    stream = torch.cuda.current_stream(scores.device).cuda_stream
    rc = lib.block_argmax_route_cuda(
        scores.data_ptr(), row_stride, sdt, bias.data_ptr(), bdt, M, E, topk, int(renormalize), rs,
        weights.data_ptr(), ids.data_ptr(), stream,
    )  # fmt: skip
    _native.raise_for_status(rc, "block_argmax_route_cuda")
    return weights, ids
