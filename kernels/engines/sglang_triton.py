"""``sglang-triton``: SGLang 0.5.23's Triton router, ``moe_fused_gate`` (``_router_triton_kernel``), from the installed file.

Source: ``sglang/kernels/ops/moe/moe_fused_gate.py`` of the installed
``sglang`` distribution (or ``--engine-path sglang=DIR``), loaded by
``kernels.engines._load`` without importing ``sglang``: ``moe_fused_gate``
itself and its ``@triton.jit`` kernels (kept: Triton compiles them from the
installed file's source). What the kernel computes, one program per row
(fp32 throughout; the logits and bias widen on load)::

    sig = tl.sigmoid(x); choice = sig + bias; NaN -> -1e30
    [grouped: group score = top-2 sum, keep topk_group groups (lowest group id on ties), others -> -inf]
    topk rounds of argmax; equal values: lowest expert id; output in selection order (value desc)
    w = sig[id]; w / (sum > 0 ? sum : 1) if renormalize; w * routed_scaling_factor

Stand-ins (documented choices, not SGLang code): ``moe_route_radix`` says
no input is covered, so ``moe_fused_gate`` never hands 896/16 to the radix
kernel (that kernel is ``sglang-radix``); ``debug_kernel_api`` (a logging
decorator) is stripped; ``is_arch_support_pdl`` is SGLang's rule (sm_90+;
``pdl=False`` turns it off); the ``sglang.srt.environ`` flag for an sm_120
special case reads False.

Arguments as SGLang's ``biased_grouped_topk_gpu`` passes them: the logits in
their dtype (bf16 passes through; grouped calls get fp32, which the kernel's
load makes the same), ``correction_bias.to(torch.float32)``,
``scoring_func="sigmoid"``; ``apply_routed_scaling_factor_on_output=True``
so the harness sees the scaling; ``bias=None`` passes a zero fp32 bias. Needs triton and an NVIDIA GPU; under
Triton's interpreter (``TRITON_INTERPRET=1`` before triton is imported)
``route`` also runs on CPU tensors, which is how the CPU tests check it
(``pdl=False`` there).
"""

from __future__ import annotations

import functools
import importlib.util
import os

from ._common import check_args, describe_roots, gate, layout_served
from ._load import load_definitions, stand_in
from ._locate import locate

__all__ = ["FILE", "available", "bench_launch", "build", "covered", "load", "route", "source", "supported_hardware"]

ENGINE = "sglang"
FILE = "sglang/kernels/ops/moe/moe_fused_gate.py"


def _arch():
    import torch

    major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
    return stand_in(major=major, minor=minor)


@functools.lru_cache(maxsize=4)
def _load(path: str, pdl: bool) -> dict:
    envs = stand_in(SGLANG_OPT_SM120_MTP_ROUTER_TOP22=stand_in(get=lambda: False))
    return load_definitions(
        path, ["moe_fused_gate"], module_name="router_contracts_engines.sglang_moe_fused_gate",
        decorators={"triton.jit": "keep", "debug_kernel_api": "strip"},
        provide={
            "moe_route_radix": stand_in(covered=lambda scores, bias, topk: False),
            "is_arch_support_pdl": (lambda: _arch().major >= 9) if pdl else (lambda: False),
            "get_jit_cuda_arch": _arch,
        },
        provide_modules={"sglang.srt.environ": stand_in(envs=envs)},
    )  # fmt: skip


def source():
    """The installed ``moe_fused_gate.py`` (EngineUnavailable when missing)."""
    return locate(ENGINE, FILE)


def load(*, pdl: bool = True) -> dict:
    """The namespace holding ``moe_fused_gate`` and its kernels (needs triton importable)."""
    return _load(str(source()), pdl)


def supported_hardware() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if importlib.util.find_spec("triton") is None:
        return False, "triton is not installed (sglang-triton runs SGLang's Triton kernel: pip install triton, on a GPU host)"
    if not torch.cuda.is_available() or torch.version.hip:
        return False, f"no NVIDIA GPU: torch {torch.__version__} sees none (sglang-triton needs one)"
    return describe_roots(ENGINE)


def build() -> None:
    load()


def available() -> tuple[bool, str]:
    ok, why = supported_hardware()
    if not ok:
        return ok, why
    return gate(load, lambda: why)


def covered(*, rows: int, experts: int, topk: int, num_expert_group=1, topk_group=1, **shape) -> bool:
    """Any ``E`` and ``topk`` the kernel compiles for (one row in a power-of-two block of ``E``), in the layouts
    ``check_args`` takes (``_common.layout_served``)."""
    return rows >= 0 and 1 <= topk <= experts and experts % (num_expert_group or 1) == 0 and layout_served(
        rows=rows, experts=experts, **shape)


def bench_launch(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                 topk_group=None, pdl=True):  # fmt: skip
    """``route`` split as SGLang serves it: the bias widened to fp32 once (``correction_bias.to(torch.float32)``
    before serving) and the kernel loaded; each call of the returned function is ``moe_fused_gate``, the one Triton
    launch SGLang makes per forward."""
    import torch

    _, E, groups, kept = check_args(scores, bias, topk, renormalize, routed_scaling_factor,
                                    num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    if scores.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"scores.device={scores.device} is not a CUDA device; sglang-triton runs on an NVIDIA GPU "
                         f"(or on the CPU under Triton's interpreter, TRITON_INTERPRET=1, for tests)")
    bias32 = torch.zeros(E, dtype=torch.float32, device=scores.device) if bias is None else bias.to(torch.float32)
    gate = load(pdl=bool(pdl))["moe_fused_gate"]

    def launch():
        return gate(scores, bias32, topk, scoring_func="sigmoid", num_fused_shared_experts=0, renormalize=renormalize,
                    routed_scaling_factor=float(routed_scaling_factor), apply_routed_scaling_factor_on_output=True,
                    num_expert_group=groups, topk_group=kept)  # fmt: skip

    return launch


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None,
          pdl=True):  # fmt: skip
    """SGLang's Triton router; ``(weights fp32, ids int32)``; PDL on sm_90+ unless ``pdl=False``."""
    return bench_launch(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group,
                        topk_group=topk_group, pdl=pdl)()  # fmt: skip
