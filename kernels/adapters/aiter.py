"""Adapter for AMD aiter's ``biased_grouped_topk`` (docs/aiter.md), the library router on ROCm.

What it calls (package ``amd-aiter``, import name ``aiter``, ROCm only)::

    aiter.biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids,
                              num_expert_group, topk_group, need_renorm, routed_scaling_factor)

It fills ``topk_weights`` (fp32) and ``topk_ids`` (int32), both ``[M, topk]``,
in place and returns nothing. How this adapter drives it:

- ``gating_output``: the caller's ``scores`` (bf16, fp16 or fp32), column
  stride 1 required (a ``ValueError`` otherwise). aiter's kernel reads row
  ``t`` at ``gating_output + t * E`` whatever the row stride, with 4-wide
  vector loads, so rows that are not dense, or a start that is not 16-byte
  aligned (a column slice of a wider buffer), are copied into a dense tensor
  first; dense inputs are passed as they are.
- ``correction_bias``: converted to the gating dtype first; aiter checks that
  the dtypes are equal and reads the bias as that dtype (sglang and vLLM
  convert the same way). An fp32 bias with bf16 logits is therefore rounded
  to bf16: ``covered`` leaves such calls out, since the contract ranks with
  the fp32 bias.
- ``topk_weights`` / ``topk_ids``: two fresh contiguous tensors. The kernel
  indexes both outputs with one row stride (``topk_ids.stride(0)``, checked
  equal to ``topk_weights.stride(0)``); fp32 and int32 are both 4 bytes, so two
  contiguous ``[M, topk]`` tensors have the same strides ``(topk, 1)``. (Two
  views of one allocation would also do; serving engines pass two tensors,
  and two tensors can be freed independently.)
- ``num_expert_group=1``, ``topk_group=1``: Kimi routes without groups. With
  one group of E > 32 experts aiter takes its generic kernel (one wave64
  selection round per output column), the kernel ``kernels.adapters.aiter_model``
  models; DeepSeek's grouped fast path is never reached from here. aiter's
  wrapper sends batches above 212 x (compute units) to another kernel
  (``moe_fused_gate``); ``covered`` stays below that on every supported GPU.
- ``need_renorm=renormalize``, ``routed_scaling_factor`` as given.

The facts about aiter's kernel above were read from the source of the PyPI
wheel amd-aiter 0.1.7.post2.dev18 (``csrc/kernels/topk_softmax_kernels_group.cu``,
``aiter/ops/topk.py``), not run: no AMD GPU was at hand.

Gates (none of them imports aiter unless the hardware can run it)::

    supported_hardware(device) -> (ok, why)   # a ROCm build of torch and a gfx942/gfx950 GPU
    available(device) -> (ok, why)            # the above, and ``import aiter`` works
    build(device)                             # one tiny call: aiter JIT-compiles its op on first use
    covered(*, rows, experts, topk, dtype, bias_dtype, logits_strides=None, bias_stride=None) -> bool

Test seam: the module imported as aiter is named by the environment variable
``ROUTER_AITER_MODULE`` (default ``aiter``) and read at every call by
``_import_aiter``. Tests point it at ``tests.standins.aiter_standin``, a
stand-in with aiter's signature built on the behavioural model; it is NOT
aiter. Production use leaves the variable unset.

This module never imports aiter at import time, so listing candidates or
importing ``kernels`` works on any host.
"""

from __future__ import annotations

import importlib
import importlib.util
import os

from .._args import check_route_args, serves_layout_any_bias

__all__ = [
    "ENV_MODULE",
    "SUPPORTED_ARCHS",
    "available",
    "build",
    "covered",
    "module_name",
    "route",
    "supported_hardware",
]

ENV_MODULE = "ROUTER_AITER_MODULE"
SUPPORTED_ARCHS = ("gfx942", "gfx950")  # MI300X/MI325X (CDNA3), MI350X/MI355X (CDNA4)
INSTALL_HINT = "pip install amd-aiter, or this project's extra: pip install -e '.[rocm]'"
# Experts per group must exceed 32 for the generic kernel; with one group that is E.
GENERIC_MIN_EXPERTS = 33
# Conservative: every shape we route (Kimi-K3 896 and 224, Kimi-K2 384, 256)
# is a multiple of 32; aiter's exact requirement on E was not verified on hardware.
EXPERT_MULTIPLE = 32
# The generic kernel's 64 lanes each write one output column.
MAX_TOPK = 64
# aiter's Python wrapper sends batches above 212 x (compute units) to another
# kernel (moe_fused_gate); 32 CUs is the smallest gfx942/gfx950 partition (a
# gfx950 XCD in CPX mode), so up to this many rows the generic kernel is taken.
GENERIC_MAX_ROWS = 212 * 32
# aiter loads 4 logits (and 4 bias values) at a time.
_ALIGN = 16
_DTYPES = ("torch.bfloat16", "torch.float16", "torch.float32")


def module_name() -> str:
    """The module imported as aiter: ``$ROUTER_AITER_MODULE`` (a test seam) or ``aiter``."""
    return os.environ.get(ENV_MODULE) or "aiter"


def _import_aiter():
    """Import aiter (or the test stand-in named by ``$ROUTER_AITER_MODULE``); the only import site."""
    return importlib.import_module(module_name())


def _installed(name: str) -> bool:
    # find_spec locates a top-level module without running it.
    try:
        return importlib.util.find_spec(name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def supported_hardware(device: str = "cuda") -> tuple[bool, str]:
    """(True, arch) on a ROCm build of torch with a gfx942/gfx950 GPU; (False, why) otherwise. Never raises."""
    try:
        import torch

        kind = str(device).split(":")[0]
        if kind != "cuda":
            return False, f"aiter runs on ROCm GPUs (torch device 'cuda'), not on {kind}"
        if not torch.version.hip:
            flavour = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU-only"
            return False, f"aiter needs a ROCm build of torch; this is torch {torch.__version__} ({flavour}, torch.version.hip is None)"
        if not torch.cuda.is_available():
            return False, f"no GPU: ROCm torch {torch.__version__} sees none (torch.cuda.is_available() is False)"
        index = torch.device(device).index
        props = torch.cuda.get_device_properties(torch.cuda.current_device() if index is None else index)
        arch = props.gcnArchName.split(":")[0]
        if arch not in SUPPORTED_ARCHS:
            return False, f"AMD device {arch} ({props.name}) is not a target here; aiter's router is checked on {', '.join(SUPPORTED_ARCHS)}"
        return True, f"{arch} ({props.name}), ROCm {torch.version.hip}"
    except Exception as exc:  # noqa: BLE001 -- a gate reports, it does not raise
        return False, f"{type(exc).__name__}: {exc}"


def available(device: str = "cuda") -> tuple[bool, str]:
    """(True, detail) when aiter imports on a supported host; else (False, the reason in one line). Never raises."""
    name = module_name()
    ok, why = supported_hardware(device)
    if not ok:
        if not _installed(name):
            why += f"; {name} is not installed either: {INSTALL_HINT}"
        return False, why
    if not _installed(name):
        return False, f"{name} is not installed: {INSTALL_HINT}"
    try:
        module = _import_aiter()
    except Exception as exc:  # noqa: BLE001
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return False, f"import {name} failed: {type(exc).__name__}: {first}"
    if not callable(getattr(module, "biased_grouped_topk", None)):
        version = getattr(module, "__version__", "unknown version")
        return False, f"{name} ({version}) has no biased_grouped_topk; install a release that has it: {INSTALL_HINT}"
    return True, f"{why}, {name} {getattr(module, '__version__', '')}".rstrip()


def build(device: str = "cuda") -> None:
    """Route one Kimi-shaped row so aiter JIT-compiles its op now, not inside a timed check. Raises on failure."""
    import torch

    scores = torch.zeros((1, 896), dtype=torch.bfloat16, device=device)
    bias = torch.zeros(896, dtype=torch.bfloat16, device=device)
    route(scores, bias, 16, True, 1.0)
    if scores.device.type == "cuda":
        torch.cuda.synchronize(scores.device)


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, logits_strides: tuple[int, int] | None = None,
            bias_stride: int | None = None) -> bool:  # fmt: skip
    """The calls aiter's generic path serves exactly as the contract poses them.

    E a multiple of 32 and > 32 (one group of more than 32 experts takes the
    generic kernel), 1 <= topk <= min(E, 64), at most ``GENERIC_MAX_ROWS``
    rows (larger batches go to another kernel), bf16/fp16/fp32 logits, and a bias of the
    logits dtype (aiter reads the bias in the gating dtype; an fp32 bias with
    bf16 logits would be rounded, so aiter would rank with another bias than
    the contract does); logits of column stride 1 and row stride >= E (what
    ``route``'s argument check takes; a bias of any stride is copied).
    """
    return (
        serves_layout_any_bias(rows=rows, experts=experts, logits_strides=logits_strides, bias_stride=bias_stride)
        and 0 <= rows <= GENERIC_MAX_ROWS
        and experts >= GENERIC_MIN_EXPERTS
        and experts % EXPERT_MULTIPLE == 0
        and 1 <= topk <= min(experts, MAX_TOPK)
        and str(dtype) in _DTYPES
        and bias_dtype == dtype
    )


def _check_args(scores, bias, topk, renormalize, routed_scaling_factor) -> float:
    """Validate ``route`` arguments, one line each; return the scaling factor as a float."""
    # aiter converts the bias to the logits dtype itself, so any float bias, in any layout, is fine.
    return check_route_args(
        scores, bias, topk, renormalize, routed_scaling_factor, dtypes=tuple(d.removeprefix("torch.") for d in _DTYPES),
        bias_dtypes=None, dtype_hint="aiter takes bfloat16, float16 or float32", bias_contiguous=False,
    )[3]  # fmt: skip


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0):
    """Route ``scores`` [M, E] with aiter's ``biased_grouped_topk``; return ``(weights fp32, ids int32)``.

    Inputs are not modified (the bias is converted, and strided logits copied,
    into new tensors when aiter could not read them as they are). Runs on aiter's current stream; M == 0 returns empty
    outputs without calling aiter.
    """
    import torch

    rsf = _check_args(scores, bias, topk, renormalize, routed_scaling_factor)
    M = scores.shape[0]
    weights = torch.empty((M, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    assert weights.stride() == ids.stride(), "the kernel indexes both outputs with one row stride"
    if M == 0:
        return weights, ids
    gating = _dense_aligned(scores)
    gating_bias = _dense_aligned(bias.to(scores.dtype))
    _import_aiter().biased_grouped_topk(gating, gating_bias, weights, ids, 1, 1, renormalize, rsf)
    return weights, ids


def _dense_aligned(t):
    """``t`` when aiter can read it in place (dense, 16-byte aligned start); else a dense copy."""
    import torch

    if t.is_contiguous() and t.data_ptr() % _ALIGN == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)
