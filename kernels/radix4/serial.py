"""Kernel ``radix4-serial``: the radix-4 select under contract ``serial``, bit-identical to kernels.serial.

Contract ``serial`` (docs/contracts.md, "Contract serial"), per row of logits ``x[E]``
and bias ``b[E]``, exactly the serial scan's arithmetic:

- ``sig = 1.0f / (1.0f + expf(-x))`` in fp32 (plain expf, IEEE division, no fast
  math; bf16 logits and bias widened exactly);
- ``r = sig + b`` in fp32; only ``r > -1e30`` can be chosen (NaN never);
- ids in selection order: by ``r`` descending, ties to the lowest index; when
  fewer than ``topk`` values beat -1e30, expert 0 fills the slots left (again,
  if it was already chosen), with its sig counted again;
- ``den`` = the winners' sig summed in selection order (fp32);
  ``w = (sig / (den + 1e-20f)) * rs``, or ``sig * rs`` without ``renormalize``.

It computes that as radix4 does (the same source, radix4_router.h, with
SerialContract), built with the serial kernels' floating-point flags, so on a
CUDA device its bits equal those of ``kernels.serial.scan`` and
``kernels.serial.block_argmax`` (benchmarks/radix4_kernels_bench.py checks it).

Outputs, inputs, shapes, launch shapes and ``pdl`` as in ``kernels.radix4``;
CUDA only (the HIP translation unit is compile-checked, not claimed: ROCm's
expf is not CUDA's).

::

    supported_hardware() -> tuple[bool, str]          # CUDA sm_80+; never raises
    build(*, arch=None, defines=()) -> pathlib.Path   # BuildError on compiler error
    available() -> tuple[bool, str]                   # never raises
    covered(*, rows, experts, topk, dtype, bias_dtype) -> bool   # as kernels.radix4.covered
    route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, launch_shape=None, pdl=False)
        -> (weights, ids)
"""

from __future__ import annotations

from pathlib import Path

from . import KIMI_SHAPES as SHAPES
from . import MAX_ROWS, route_contract
from . import covered_kimi as covered
from . import available as _available
from . import build as _build
from . import supported_hardware as _supported_hardware

NAME = "radix4-serial"
CONTRACT = "serial"
__all__ = ["MAX_ROWS", "NAME", "SHAPES", "available", "build", "covered", "route", "supported_hardware"]


def supported_hardware() -> tuple[bool, str]:
    """(True, what) on CUDA sm_80+ with nvcc; (False, why) otherwise (ROCm included). Never raises."""
    return _supported_hardware(cuda_only=True)


def build(*, arch: str | None = None, defines: tuple[str, ...] = ()) -> Path:
    """Compile (or find cached) the serial-contract library for ``arch`` ('sm_90'; default: the device's)."""
    return _build(arch=arch, defines=defines, contract=CONTRACT)


def available() -> tuple[bool, str]:
    """supported_hardware, then a build and load; (False, why) instead of raising."""
    return _available(contract=CONTRACT, cuda_only=True)


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0, *,
          launch_shape: str | None = None, pdl: bool = False):  # fmt: skip
    """Route CUDA ``scores`` [M, E] under contract ``serial``; return ``(weights, ids)``.

    Launches on ``torch.cuda.current_stream(scores.device)`` (a CUDA graph
    captures it); inputs are not modified. ``launch_shape`` and ``pdl`` as in
    ``kernels.radix4.route``.
    """
    return route_contract(CONTRACT, scores, bias, topk, renormalize, routed_scaling_factor,
                          launch_shape=launch_shape, pdl=pdl, name=NAME)  # fmt: skip
