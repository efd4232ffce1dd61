"""Baseline kernels of the ``serial`` routing contract (Kimi-K3 router: E=896, top-16).

Contract (docs/contracts.md#contract-serial), per row of logits ``x[E]``, bias ``b[E]``:

- ``sig = 1.0f / (1.0f + expf(-x))`` in fp32 (plain expf; bf16 logits widened exactly);
- ``biased = sig + b`` in fp32 (bf16 bias widened exactly);
- ``topk`` rounds: ``best = -1e30f, bi = 0``; scan ``e = 0..E-1`` ascending and take
  ``e`` if ``biased[e] > best`` (strict: ties to the lowest index, NaN never taken);
  the winner's ``biased`` becomes ``-1e30f``; if nothing beats the sentinel, expert 0
  is emitted (again, if already taken) and its ``sig`` counted again;
- output in selection order; ``den`` = sum of the winners' ``sig`` in selection order (fp32);
- ``weight_j = (sig_j / (den + 1e-20f)) * rs`` (division first), or ``sig_j * rs`` when
  ``renormalize=False``. ``rs`` (routed_scaling_factor) is rounded to fp32.

Outputs: ``weights`` fp32 ``[M, topk]`` and ``ids`` int32 ``[M, topk]``, contiguous.
Inputs: ``scores`` ``[M, E]`` bf16 or fp32 with column stride 1 and row stride >= E
(column slices of a wider buffer are fine); ``bias`` ``[E]`` fp32 or bf16, stride 1.

Edge rules (all follow from the scan): all-equal rows give ids 0, 1, 2, ...; an
all-NaN row gives ids all 0 and weights NaN or 0 as the arithmetic gives; ``-0.0``
and ``+0.0`` are equal (lowest index wins); experts whose ranking value is ``-inf``,
NaN or <= -1e30 are never chosen, so a row with fewer than ``topk`` such experts
ends with repeated expert 0.

Layout. Two kernel modules, each with the same five functions:

- ``kernels.serial.scan`` (``NAME = "serial"``): CPU (host build, g++) and CUDA
  (one thread per row).
- ``kernels.serial.block_argmax`` (``NAME = "block_argmax"``): CUDA only (one block
  per row), bit-identical to ``scan`` on CUDA; ``MAX_EXPERTS = 4096``.

::

    supported_hardware(device) -> tuple[bool, str]          # never raises
    build(device, *, arch=None) -> pathlib.Path             # BuildError on compiler error
    available(device) -> tuple[bool, str]                   # never raises
    covered(*, rows, experts, topk, dtype, bias_dtype, logits_strides=None, bias_stride=None) -> bool
    route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0)
        -> (weights, ids)                                   # dispatches on scores.device

``device`` is ``'cpu'``, ``'cuda'``, ``'cuda:N'`` or a ``torch.device``. ``arch``
(``'sm_90'``) lets a machine without a GPU compile the CUDA source. CUDA launches go
to ``torch.cuda.current_stream(scores.device)``, so CUDA graphs capture them. Bad
arguments raise ValueError naming the argument, its value and the fix.

Sources (no torch headers; ``extern "C"`` entry points returning an error code):
``serial_row.h`` (the per-row arithmetic, ``__host__ __device__``), ``serial_host.cpp``
(``serial_route_host``), ``serial_cuda.cu`` (``serial_scan_route_cuda``,
``block_argmax_route_cuda``). Host: ``g++ -O2 -ffp-contract=off``; CUDA:
``nvcc -O3 -fmad=false -arch=sm_XX``. Host and CUDA expf may differ by an ULP, so
host-vs-CUDA weights are compared to a few ULP; the two CUDA kernels agree bit for bit.
"""

from __future__ import annotations

from . import block_argmax, scan

KERNELS = {scan.NAME: scan, block_argmax.NAME: block_argmax}
__all__ = ["KERNELS", "block_argmax", "scan"]
