"""``sglang-radix``: SGLang 0.5.23's CUDA radix-select router (``route_radix.cuh``), built from the installed wheel.

What it computes (SGLang's kernel, one 224-thread block per row; see
``sglang_radix_shim.cu`` for the C ABI)::

    sig = 1 / (1 + exp(-x))            # fp32, __expf and __fdividef (not IEEE), bf16 logits widened exactly
    key = sig + bias (fp32); NaN -> -1e30; -0.0 -> +0.0
    the 16 largest keys by 8-bit radix select; equal keys: lowest expert id
    w = sig[id]; w / (sum > 0 ? sum : 1) if renormalize; w * routed_scaling_factor
    output: expert-id order (``route_unsorted``, what SGLang's dispatch uses)
            or (key desc, id asc) (``route``, SGLang's ``sorted=True``)

Its sigmoid flushes to 0 where ``1 + __expf(-x)`` exceeds 2^126 (``__fdividef`` returns 0 there, as CUDA documents):
logits of about -87.3 to -88.7, whose sigmoid the contract keeps near 1e-38. The harness reports that as a failure
of family ``sigmoid_underflow`` (docs/engines.md), not declared.

Shape: 896 experts, top-16 only (Kimi-K3), no groups; bf16 or fp32 logits
with column stride 1; the bias is passed as fp32 (SGLang's caller does
``correction_bias.to(torch.float32)``; a bf16 bias widens exactly). Rows
whose start is not 16-byte aligned, or whose stride is not a multiple of 4
elements, are copied into a dense tensor first: SGLang's own gate would send
them to its Triton router instead, and the kernel reads the same values
either way. A bias that does not start on 16 bytes (a view into a larger
buffer) is copied too: the kernel reads it by 16-byte vector loads and faults
with "misaligned address" otherwise (seen on an H100), while SGLang's bias is
always a parameter of its own allocation. ``bias=None`` (contracts without a bias) passes a zero fp32
bias: ``sig + 0.0`` is ``sig`` exactly, so the ranking is the sigmoid's.

Arguments as SGLang serves Kimi-K3: ``biased_grouped_topk_gpu`` passes bf16
logits through untouched (fp32 logits from K3's fp32 router stay fp32) and
``moe_fused_gate`` dispatches here for every covered call with
``sorted=False``, PDL on sm_90+; ``routed_scaling_factor`` is applied in the
kernel (``apply_scale``) so the harness sees it.

Launch: on ``torch.cuda.current_stream()`` (a CUDA graph captures it), PDL
(programmatic stream serialization) on sm_90+ unless ``pdl=False``.

Source files (found, never copied): ``sglang/kernels/jit/csrc/moe/route_radix.cuh``
and SGLang's ``sgl_kernel`` headers, plus tvm-ffi's headers (``apache-tvm-ffi``)
that they include. Needs an NVIDIA GPU sm_90+ (PDL, ``__reduce_add_sync``)
and nvcc; ``build(arch="sm_90")`` compiles without a GPU.
"""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

from .._build import BuildError, load_library
from ._common import check_args, dtype_name, layout_served
from ._cuda import HERE, arch_flags, build_arch, build_shim, shim_failure, shim_gates
from ._locate import locate

__all__ = ["EXPERTS", "TOPK", "available", "bench_launch", "bench_launch_unsorted", "build", "covered", "route", "route_unsorted", "sources", "supported_hardware"]

EXPERTS, TOPK = 896, 16
MIN_SM = 90
SHIM = HERE / "sglang_radix_shim.cu"
KERNEL = "sglang/kernels/jit/csrc/moe/route_radix.cuh"
CSRC = "sglang/kernels/jit/csrc"
INCLUDE = "sglang/kernels/jit/include"
TVM_INCLUDE = "tvm_ffi/include"
# SGLang's JIT flags (kernels/jit/utils: DEFAULT_CFLAGS, get_default_target_flags); no fast math.
FLAGS = ["-std=c++20", "-O3", "--expt-relaxed-constexpr"]
_DTYPES = {"float32": 0, "bfloat16": 1}
_RENORMALIZE, _APPLY_SCALE, _SORTED, _PDL = 1, 2, 4, 8
_STATUS = {2: "unsupported dtype", 3: "bad argument", 4: "kernel launch failed"}


def sources() -> dict[str, Path]:
    """The engine files the shim compiles against (EngineUnavailable when one is missing)."""
    return {
        "kernel": locate("sglang", KERNEL),
        "csrc": locate("sglang", CSRC),
        "include": locate("sglang", INCLUDE),
        "tvm_include": locate("tvm-ffi", f"{TVM_INCLUDE}/tvm/ffi/container/tensor.h").parents[3],
    }


def compile_flags(arch: str) -> list[str]:
    src = sources()
    target, number = arch_flags(arch)
    includes = [f"-I{src['csrc']}", f"-I{src['include']}", f"-I{src['tvm_include']}"]
    return [*FLAGS, f"-DSGL_CUDA_ARCH={number}", *target, *includes]


supported_hardware, available = shim_gates("sglang-radix", MIN_SM, ("sglang", "tvm-ffi"), lambda: library())


def build(*, arch: str | None = None) -> Path:
    """Compile (or find cached) the shim for ``arch`` (default: the current device's); BuildError on failure."""
    arch = build_arch(arch, MIN_SM, "sglang-radix")
    src = sources()
    depends = [src["kernel"], *sorted(src["include"].glob("sgl_kernel/*.*"))]
    return build_shim(SHIM, flags=compile_flags(arch), depends=depends)


@functools.lru_cache(maxsize=None)
def _library(path: str) -> ctypes.CDLL:
    lib = load_library(Path(path))
    p, i, ll, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_float
    lib.rc_sglang_radix_route.argtypes = [p, i, ll, p, ll, f, i, p, p, p]
    lib.rc_sglang_radix_route.restype = i
    lib.rc_sglang_radix_error.argtypes, lib.rc_sglang_radix_error.restype = [], ctypes.c_char_p
    lib.rc_sglang_radix_shape.argtypes = [ctypes.POINTER(i)] * 3
    shape = [i(), i(), i()]
    lib.rc_sglang_radix_shape(*shape)
    if (shape[0].value, shape[1].value) != (EXPERTS, TOPK):
        raise BuildError(f"route_radix.cuh is built for {shape[0].value}/{shape[1].value}, not {EXPERTS}/{TOPK}")
    return lib


def library() -> ctypes.CDLL:
    return _library(str(build()))


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, num_expert_group=1, topk_group=1, **layout) -> bool:
    """896 experts, top-16, ungrouped, bf16/fp32 logits, any float bias (passed as fp32), in the layouts ``check_args``
    takes (``_common.layout_served``)."""
    return (
        layout_served(rows=rows, experts=experts, **layout)
        and (experts, topk) == (EXPERTS, TOPK)
        and (num_expert_group or 1) == 1
        and (topk_group or 1) == 1
        and rows >= 0
        and dtype_name(dtype) in _DTYPES
        and (bias_dtype is None or dtype_name(bias_dtype) in ("float32", "bfloat16", "float16"))
    )


def aligned_operands(scores, bias):
    """``(scores, row_stride, bias32)`` as the kernel can read them: rows that start on 16 bytes with a stride of a
    multiple of 4 elements, and an fp32 bias that starts on 16 bytes (it is read as ``AlignedVector<fp32x2_t, 2>``).
    Anything else is copied into a fresh allocation. ``clone``, not ``contiguous``: a contiguous view that starts one
    element into its buffer is returned as it is by ``contiguous`` and faulted with "misaligned address" on an H100
    (``random_bf16:442551064:1:logits_offset-1``). SGLang's own gate sends such rows to its Triton router, and its
    bias is a parameter of its own allocation, so the copy reads the same values the engine would."""
    import torch

    M, E = scores.shape
    row_stride = scores.stride(0) if M > 1 else E
    if row_stride % 4 or scores.stride(1) != 1 or scores.data_ptr() % 16:
        scores, row_stride = scores.clone(memory_format=torch.contiguous_format), E
    bias32 = torch.zeros(E, dtype=torch.float32, device=scores.device) if bias is None else bias.float()
    if bias32.stride(0) != 1 or bias32.data_ptr() % 16:
        bias32 = bias32.clone(memory_format=torch.contiguous_format)
    return scores, row_stride, bias32


def bench_launch(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                 topk_group=None, pdl=None, sorted_output=True):  # fmt: skip
    """``route``'s kernel as a launch prepared once: the checks, then what SGLang does at load (the bias widened to
    fp32 once, ``correction_bias.to(torch.float32)``; the outputs allocated). Each call of the returned function is
    the one launch SGLang makes per forward, on the current stream, returning ``(weights, ids)``.
    ``sorted_output``: SGLang's ``sorted`` flag (``bench_launch_unsorted`` passes False)."""
    import torch

    M, E, groups, kept = check_args(scores, bias, topk, renormalize, routed_scaling_factor, dtypes=tuple(_DTYPES),
                                    num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    if (E, topk, groups, kept) != (EXPERTS, TOPK, 1, 1):
        raise ValueError(f"(E, topk, groups)=({E}, {topk}, {groups}) is not served: SGLang's radix router takes "
                         f"E={EXPERTS}, topk={TOPK}, no groups; use sglang-triton for other shapes")  # fmt: skip
    if scores.device.type != "cuda":
        raise ValueError(f"scores.device={scores.device} is not a CUDA device; sglang-radix runs on an NVIDIA GPU")
    scores, row_stride, bias32 = aligned_operands(scores, bias)
    weights = torch.empty((M, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    if M == 0:
        return lambda: (weights, ids)
    if pdl is None:
        pdl = torch.cuda.get_device_capability(scores.device)[0] >= 9
    flags = _APPLY_SCALE | (_RENORMALIZE if renormalize else 0) | (_SORTED if sorted_output else 0) | (_PDL if pdl else 0)
    with torch.cuda.device(scores.device):
        lib = library()
    args = (scores.data_ptr(), _DTYPES[dtype_name(scores.dtype)], row_stride, bias32.data_ptr(), M,
            float(routed_scaling_factor), flags, weights.data_ptr(), ids.data_ptr())  # fmt: skip
    device = scores.device

    def launch():
        rc = lib.rc_sglang_radix_route(*args, torch.cuda.current_stream(device).cuda_stream)
        if rc != 0:
            raise shim_failure(lib, "rc_sglang_radix", rc, _STATUS, detailed=(4,))
        return weights, ids

    launch.keep = (scores, bias32)  # the tensors the launch reads stay alive as long as it does
    return launch


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None,
          pdl=None, sorted_output=True):  # fmt: skip
    """SGLang's radix router, one launch. ``sorted_output=True`` (SGLang's ``sorted=True``): output by (key desc,
    lowest id); False (its production dispatch, ``route_unsorted``): in expert-id order."""
    return bench_launch(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group,
                        topk_group=topk_group, pdl=pdl, sorted_output=sorted_output)()  # fmt: skip


# sglang-radix-unsorted's route and bench path: the same kernel with sorted=False, the launch SGLang's
# moe_fused_gate makes per forward.
route_unsorted = functools.partial(route, sorted_output=False)
bench_launch_unsorted = functools.partial(bench_launch, sorted_output=False)
