"""``flashinfer-noaux``: FlashInfer 0.7.2's ``fused_topk_deepseek`` kernel (``noAuxTcKernels.cu``), built from the wheel.

What it computes (FlashInfer's ``deepseek_v3_topk_kernel``, one block per
row, compiled like FlashInfer's JIT does it, ``-use_fast_math``; the C ABI
is ``flashinfer_noaux_shim.cu``)::

    sig = 0.5 * tanhf(0.5 * x) + 0.5        # fp32; under -use_fast_math tanhf is tanh.approx.f32 (~2^-11 relative)
    choice = sig + bias
    grouped: group score = sum of the group's 2 largest choices; keep topk_group groups
    top-k of choice by warp reductions; equal values: lowest expert index
    w = sig[id] * routed_scaling_factor / (sum(sig[ids]) + 1e-20)     # always renormalized
    w stored in the logits dtype (bf16 logits -> bf16 weights); ids int32

Shapes (``invokeNoAuxTc``'s kernel selection, ``served``): one group with
E <= 384 and topk <= 8 (Kimi-K2: 384/8), or groups with E <= 256,
E / n_group <= 32, E / n_group * topk_group <= 128, topk_group <= 4, topk <= 8
(DeepSeek-V3: 256/8, 8 groups, 4 kept). Kimi-K3's 896 experts are not
served (FlashInfer's 896-expert routers are sm_100 only). Note that
FlashInfer's Python wrapper (``_check_dsv3_fused_routing_supported``) and
SGLang's dispatch also require ``topk_group * n_group >= topk``, which
rejects every one-group call (1 * 1 < 8): through them Kimi-K2 never
reaches this kernel. The shim calls ``invokeNoAuxTc`` below that check, so
the one-group kernel can be compared. It always renormalizes:
``covered(renormalize=False)`` is False and ``route`` raises.

Arguments as SGLang serves it (``biased_grouped_topk_gpu``'s FlashInfer
branch): fp32 logits (``gating_output.to(torch.float32)``), the bias as the
model keeps it (fp32, bf16 or fp16), ``launch_with_pdl=True``; so ``route``
widens the logits to fp32 and the weights come out fp32.
``route_native_dtype`` passes the logits' own dtype, as a direct caller of
``flashinfer.fused_moe.fused_topk_deepseek`` may: bf16 logits then give
bf16 weights (widened to fp32 exactly for the harness). ``bias=None``
passes a zero fp32 bias (``sig + 0.0`` is ``sig``).

Launch: on ``torch.cuda.current_stream()``; PDL on unless ``pdl=False``
(the PDL instructions are compiled in for sm_90+). FlashInfer lists
sm_89/90/100/103/107/120/121; this adapter builds for the current device.

Source files (found, never copied): ``flashinfer/data/csrc/fused_moe/noAuxTcKernels.cu``,
``moeTopKFuncs.cuh``, ``tvm_ffi_utils.h``, ``nv_internal`` (tensorrt_llm
common headers and the three ``.cpp`` FlashInfer links with it),
``flashinfer/data/include``, and tvm-ffi's headers.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from .._build import load_library
from ._common import check_args, dtype_name, layout_served
from ._cuda import HERE, arch_flags, build_arch, build_shim, cublas_include_flags, shim_failure, shim_gates
from ._locate import locate

__all__ = ["available", "bench_launch", "build", "covered", "route", "route_native_dtype", "sources", "supported_hardware"]

MIN_SM = 89
SHIM = HERE / "flashinfer_noaux_shim.cu"
CSRC = "flashinfer/data/csrc"
KERNEL = f"{CSRC}/fused_moe/noAuxTcKernels.cu"
INCLUDE = "flashinfer/data/include"
TVM_INCLUDE = "tvm_ffi/include"
LINKED = [f"{CSRC}/nv_internal/cpp/common/{name}" for name in ("logger.cpp", "stringUtils.cpp", "tllmException.cpp")]
# FlashInfer's gen_jit_spec defaults for this module (fast math included).
FLAGS = ["-std=c++17", "-O3", "-use_fast_math", "-DNDEBUG", "-DFLASHINFER_ENABLE_F16", "-DFLASHINFER_ENABLE_BF16",
         "-DFLASHINFER_ENABLE_FP8_E4M3", "-DFLASHINFER_ENABLE_FP8_E5M2"]  # fmt: skip
_DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2}
_STATUS = {1: "configuration not supported", 2: "unsupported dtype", 3: "bad argument", 4: "kernel launch failed"}


def sources() -> dict[str, Path]:
    """The engine files the shim compiles against (EngineUnavailable when one is missing)."""
    found = {"kernel": locate("flashinfer", KERNEL), "csrc": locate("flashinfer", CSRC),
             "include": locate("flashinfer", INCLUDE)}  # fmt: skip
    for rel in LINKED:
        locate("flashinfer", rel)
    found["tvm_include"] = locate("tvm-ffi", f"{TVM_INCLUDE}/tvm/ffi/container/tensor.h").parents[3]
    return found


def compile_flags(arch: str) -> tuple[list[str], str]:
    """nvcc flags and a note saying where the cuBLAS headers came from."""
    src = sources()
    target, _ = arch_flags(arch)
    csrc = src["csrc"]
    includes = [f"-I{csrc}", f"-I{csrc / 'nv_internal'}", f"-I{csrc / 'nv_internal' / 'include'}", f"-I{src['include']}",
                f"-I{src['tvm_include']}"]  # fmt: skip
    cublas, note = cublas_include_flags()
    return [*FLAGS, *target, *includes, *cublas], note


supported_hardware, available = shim_gates("flashinfer-noaux", MIN_SM, ("flashinfer", "tvm-ffi"), lambda: library())


def build(*, arch: str | None = None) -> Path:
    """Compile (or find cached) the shim for ``arch`` (default: the current device's); BuildError on failure."""
    arch = build_arch(arch, MIN_SM, "flashinfer-noaux")
    src = sources()
    flags, _ = compile_flags(arch)
    depends = [src["kernel"], src["csrc"] / "fused_moe" / "moeTopKFuncs.cuh", src["csrc"] / "tvm_ffi_utils.h",
               *(locate("flashinfer", rel) for rel in LINKED)]  # fmt: skip
    return build_shim(SHIM, flags=flags, depends=depends)


def build_note(arch: str = "sm_90") -> str:
    return compile_flags(arch)[1]


@functools.lru_cache(maxsize=None)
def _library(path: str) -> ctypes.CDLL:
    lib = load_library(Path(path))
    p, i, ll, d = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_double
    lib.rc_flashinfer_noaux_route.argtypes = [p, i, p, i, ll, ll, ll, ll, ll, d, i, p, p, p]
    lib.rc_flashinfer_noaux_route.restype = i
    lib.rc_flashinfer_noaux_error.argtypes, lib.rc_flashinfer_noaux_error.restype = [], ctypes.c_char_p
    return lib


def library() -> ctypes.CDLL:
    return _library(str(build()))


def served(experts: int, topk: int, num_expert_group: int = 1, topk_group: int = 1) -> bool:
    """The shapes ``invokeNoAuxTc`` launches a kernel for, within the kernel's fixed arrays.

    One group: E <= 384. Groups: E <= 256, E / groups <= 32, E / groups * topk_group <= 128,
    topk_group <= 4 (``MaxNumTopGroups``). Always topk <= 8 (``MaxNumTopExperts``).
    """
    groups, kept = num_expert_group or 1, topk_group or 1
    if experts % groups or kept > groups or topk > 8 or topk > experts:
        return False
    if groups == 1:
        return experts <= 384
    per_group = experts // groups
    return experts <= 256 and per_group <= 32 and per_group * kept <= 128 and kept <= 4 and kept * per_group >= topk


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, num_expert_group=1, topk_group=1,
            renormalize=True, **layout) -> bool:  # fmt: skip
    """The kernel's shapes (see ``served``), float logits and bias, and renormalize (it always renormalizes), in the
    layouts ``check_args`` takes (``_common.layout_served``)."""
    return (
        layout_served(rows=rows, experts=experts, **layout)
        and rows >= 0
        and bool(renormalize)
        and served(experts, topk, num_expert_group, topk_group)
        and dtype_name(dtype) in _DTYPES
        and (bias_dtype is None or dtype_name(bias_dtype) in _DTYPES)
    )


def bench_launch(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                 topk_group=None, pdl=None, widen=True):  # fmt: skip
    """``route`` as a launch prepared once: the checks and what a server does once at load (the bias made dense, the
    outputs allocated). Each call of the returned function is what SGLang's FlashInfer branch launches per forward:
    with ``widen``, ``gating_output.to(torch.float32)`` (a kernel for bf16 logits), then ``fused_topk_deepseek``'s
    kernel, on the current stream; ``(weights in the logits' launch dtype, ids)``."""
    import torch

    M, E, groups, kept = check_args(scores, bias, topk, renormalize, routed_scaling_factor,
                                    num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    if not renormalize:
        raise ValueError("renormalize=False: FlashInfer's fused_topk_deepseek always renormalizes; pass renormalize=True")
    if not served(E, topk, groups, kept):
        raise ValueError(f"(E, topk, groups, topk_group)=({E}, {topk}, {groups}, {kept}) is outside FlashInfer's "
                         f"kernel (topk <= 8; one group: E <= 384; groups: E <= 256, E/groups <= 32, "
                         f"E/groups*topk_group <= 128, topk_group <= 4)")  # fmt: skip
    if scores.device.type != "cuda":
        raise ValueError(f"scores.device={scores.device} is not a CUDA device; flashinfer-noaux runs on an NVIDIA GPU")
    scores = scores.contiguous()  # FlashInfer requires dense tensors (its check raises on strided views)
    launch_dtype = torch.float32 if widen else scores.dtype
    bias = torch.zeros(E, dtype=torch.float32, device=scores.device) if bias is None else bias.contiguous()
    weights = torch.empty((M, topk), dtype=launch_dtype, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    if M == 0:
        return lambda: (weights, ids)
    with torch.cuda.device(scores.device):
        lib = library()
    device, code = scores.device, _DTYPES[dtype_name(launch_dtype)]
    tail = (bias.data_ptr(), _DTYPES[dtype_name(bias.dtype)], M, E, groups, kept, topk, float(routed_scaling_factor),
            1 if pdl is None or pdl else 0, weights.data_ptr(), ids.data_ptr())  # fmt: skip

    def launch():
        logits = scores.to(torch.float32) if widen else scores
        rc = lib.rc_flashinfer_noaux_route(logits.data_ptr(), code, *tail, torch.cuda.current_stream(device).cuda_stream)
        if rc != 0:
            raise shim_failure(lib, "rc_flashinfer_noaux", rc, _STATUS, detailed=(1, 4))
        return weights, ids

    launch.keep = (scores, bias)  # the tensors the launch reads stay alive as long as it does
    return launch


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None,
          pdl=None, widen=True):  # fmt: skip
    """As SGLang calls FlashInfer: fp32 logits (widened here), the bias as given, PDL on. Without ``widen``
    (``route_native_dtype``) the logits in their own dtype: bf16 logits give bf16 weights (returned widened to
    fp32)."""
    weights, ids = bench_launch(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group,
                                topk_group=topk_group, pdl=pdl, widen=widen)()  # fmt: skip
    return weights.float(), ids


route_native_dtype = functools.partial(route, widen=False)
