"""Kernel ``radix4-pdl``: ``kernels.radix4`` launched with programmatic dependent launch (CUDA sm_90+).

The same kernel, library and results as ``kernels.radix4`` (contract
``aiter``); ``route`` passes ``pdl=True``: the kernel may start while the
previous kernel in the stream finishes and waits for it right before it loads
the logits, which hides most of a launch's latency in a chain of kernels (a
CUDA graph captures the launch with a programmatic edge). Gated on CUDA
compute capability 9.0 or later. Functions as in ``kernels.radix4``;
``pdl_functions`` makes them for either contract (``kernels.radix4.serial_pdl``).
"""

from __future__ import annotations

from pathlib import Path

from . import MAX_ROWS, SHAPES, covered, route_contract
from . import available as _available
from . import build as _build
from . import supported_hardware as _supported_hardware

NAME = "radix4-pdl"
CONTRACT = "aiter"
MIN_CUDA_ARCH = 90
__all__ = ["MAX_ROWS", "NAME", "SHAPES", "available", "build", "covered", "pdl_functions", "route", "supported_hardware"]


def pdl_functions(name: str, contract: str):
    """``(supported_hardware, build, available, route)`` of candidate ``name``: contract ``contract``'s
    library, always launched with PDL, gated on CUDA sm_90+."""

    def supported_hardware() -> tuple[bool, str]:
        """(True, what) on CUDA sm_90+ with nvcc; (False, why) otherwise. Never raises."""
        return _supported_hardware(cuda_only=True, min_cuda_arch=MIN_CUDA_ARCH)

    def build(*, arch: str | None = None, defines: tuple[str, ...] = ()) -> Path:
        return _build(arch=arch, defines=defines, contract=contract)

    def available() -> tuple[bool, str]:
        return _available(contract=contract, cuda_only=True, min_cuda_arch=MIN_CUDA_ARCH)

    def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0, *,
              launch_shape: str | None = None):  # fmt: skip
        """The contract's ``route(..., pdl=True)``."""
        return route_contract(contract, scores, bias, topk, renormalize, routed_scaling_factor,
                              launch_shape=launch_shape, pdl=True, name=name)  # fmt: skip

    return supported_hardware, build, available, route


supported_hardware, build, available, route = pdl_functions(NAME, CONTRACT)
