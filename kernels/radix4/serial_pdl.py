"""Kernel ``radix4-serial-pdl``: ``kernels.radix4.serial`` launched with programmatic dependent launch (CUDA sm_90+).

The same kernel, library and results as ``kernels.radix4.serial`` (contract
``serial``, bit-identical to kernels.serial); ``route`` passes ``pdl=True``:
the kernel may start while the previous kernel in the stream finishes and
waits for it right before it loads the logits, which hides most of a launch's
latency in a chain of kernels (a CUDA graph captures the launch with a
programmatic edge). Gated on CUDA compute capability 9.0 or later. Functions as in ``kernels.radix4.serial``.
"""

from __future__ import annotations

from pathlib import Path

from . import MAX_ROWS, SHAPES, covered, route_contract
from . import available as _available
from . import build as _build
from . import supported_hardware as _supported_hardware

NAME = "radix4-serial-pdl"
CONTRACT = "serial"
MIN_CUDA_ARCH = 90
__all__ = ["MAX_ROWS", "NAME", "SHAPES", "available", "build", "covered", "route", "supported_hardware"]


def supported_hardware() -> tuple[bool, str]:
    """(True, what) on CUDA sm_90+ with nvcc; (False, why) otherwise. Never raises."""
    return _supported_hardware(cuda_only=True, min_cuda_arch=MIN_CUDA_ARCH)


def build(*, arch: str | None = None, defines: tuple[str, ...] = ()) -> Path:
    return _build(arch=arch, defines=defines, contract=CONTRACT)


def available() -> tuple[bool, str]:
    return _available(contract=CONTRACT, cuda_only=True, min_cuda_arch=MIN_CUDA_ARCH)


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0, *,
          launch_shape: str | None = None):  # fmt: skip
    """``kernels.radix4.serial.route(..., pdl=True)``."""
    return route_contract(CONTRACT, scores, bias, topk, renormalize, routed_scaling_factor,
                          launch_shape=launch_shape, pdl=True, name=NAME)  # fmt: skip
