"""Kernel ``radix4-serial-pdl``: ``kernels.radix4.serial`` launched with programmatic dependent launch (CUDA sm_90+).

The same kernel, library and results as ``kernels.radix4.serial`` (contract
``serial``, bit-identical to kernels.serial); ``route`` passes ``pdl=True``
(see ``kernels.radix4.pdl``). Gated on CUDA compute capability 9.0 or later.
Functions as in ``kernels.radix4.serial``.
"""

from __future__ import annotations

from . import KIMI_SHAPES as SHAPES
from . import MAX_ROWS
from . import covered_kimi as covered
from .pdl import MIN_CUDA_ARCH, pdl_functions

NAME = "radix4-serial-pdl"
CONTRACT = "serial"
__all__ = ["MAX_ROWS", "MIN_CUDA_ARCH", "NAME", "SHAPES", "available", "build", "covered", "route", "supported_hardware"]

supported_hardware, build, available, route = pdl_functions(NAME, CONTRACT)
