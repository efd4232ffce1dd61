"""Kernel ``radix4``: the Kimi router's radix-4 top-k, one source for CUDA and HIP.

Contract ``aiter`` (docs/contracts.md#contract-aiter), per row of logits ``x[E]``
and bias ``b[E]``:

- ``sig = 1 / (1 + exp2(-log2(e) * x))`` in fp32 (IEEE division, no fast math;
  bf16 logits and bias widened exactly);
- ``r = sig + b`` in fp32; ``r`` only ranks;
- rank keys: order-preserving fp32 -> uint32, ``-0.0 == +0.0``, NaN below -inf;
- the ``topk`` largest keys, equal keys in aiter's wave64 tie order (expert 252
  first for E=896); output ordered by (key desc, tie priority asc);
- ``w = sig[id]``; with ``renormalize``, ``w / sum(w)`` only if ``sum(w) > 0``;
  then ``w * routed_scaling_factor``.

Outputs: ``weights`` fp32 ``[M, topk]`` and ``ids`` int32 ``[M, topk]``, contiguous.
Inputs: ``scores`` ``[M, E]`` bf16, fp16 or fp32, column stride 1, row stride >= E;
``bias`` ``[E]`` any float dtype, stride 1 (the kernel reads bf16 or fp32; any other is
widened to fp32 first). Shapes: (E, topk) = (896, 16) (Kimi-K3), (384, 8) (Kimi-K2),
(224, 16) (the pruned Kimi-K3 checkpoint), and the model shapes (256, 8), (160, 8),
(128, 6), (256, 6), (384, 6) (``SHAPES``); under the ungrouped model contracts also any
E in 8..1024 with topk in 1..min(16, E) (the generic path, ``GENERIC_EXPERTS``).

The model contracts (docs/radix4_models.md): ``router(contract)`` routes under one of
``MODEL_RULES`` (``kimi-k2``, ``glm4-moe``, ``dots1``, ``minimax-m2``, ``deepseek-v3``
with 8 groups keep 4 at (256, 8), ``deepseek-v4`` with sqrt(softplus(x)) scores, and
``aiter``): lowest-index ties, NaN last, sum + 1e-20 or the raw sum; the candidates
``radix4`` / ``radix4-pdl`` route under the contract ``--contract`` names.

::

    supported_hardware() -> tuple[bool, str]     # CUDA sm_80+ or ROCm gfx942/gfx950; never raises
    build(*, arch=None, defines=()) -> pathlib.Path   # BuildError on compiler error
    available() -> tuple[bool, str]              # never raises
    covered(*, rows, experts, topk, dtype, bias_dtype, num_expert_group=None, topk_group=None, contract=None) -> bool
    router(contract, *, pdl=False) -> route(scores, bias, topk, renormalize, routed_scaling_factor, *,
        num_expert_group=None, topk_group=None, launch_shape=None)
    route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, launch_shape=None, pdl=False)
        -> (weights, ids)

``arch`` is ``'sm_90'`` (nvcc) or ``'gfx942'`` (hipcc) and lets a machine without
a GPU compile the library. Launch shape: a block of 4 warps per token for small
batches (lowest latency), a warp per token above (least work per token), with
registers capped for more warps per SM for the largest; ``BATCH_SWITCH_POINTS``
holds the batch sizes where each shape starts, per (experts, topk)
(``launch_shape_for(rows, experts, topk)`` names the one taken); the
measurements behind them are in docs/radix4_tuning.md. ``route`` launches
on ``torch.cuda.current_stream``, so a CUDA graph captures it, and never modifies
its inputs. ``pdl=True`` (CUDA, compute capability 9.0+; ValueError elsewhere)
launches with programmatic dependent launch: the kernel may start while the
previous kernel in the stream finishes, and waits for it right before it loads
the logits (a graph captures it as a programmatic edge). Results are the same
bits either way.

Sibling modules, same functions: ``kernels.radix4.serial`` (contract ``serial``,
bit-identical to kernels.serial), ``kernels.radix4.pdl`` and
``kernels.radix4.serial_pdl`` (``route`` with ``pdl=True``, gated on sm_90+).

Sources (no torch headers): ``radix4_router.h`` (the algorithm and both
contracts, shared), ``tie_order.h`` (aiter's tie table), ``lanes_cuda.cuh`` /
``lanes_hip.h`` (the cross-lane primitives of each back end), ``radix4_entry.h``
(the C ABI), ``radix4.cu`` / ``radix4.hip`` (contract aiter) and
``radix4_serial.cu`` / ``radix4_serial.hip`` (contract serial), one translation
unit per back end and contract.
"""

from __future__ import annotations

import ctypes
import os
import shutil
from pathlib import Path
from typing import NamedTuple

from .._args import check_route_args
from .._build import BuildError, compile_shared, load_library

__all__ = [
    "BATCH_SWITCH_POINTS",
    "MODEL_BATCH_SWITCH_POINTS",
    "switch_points_for",
    "CONTRACTS",
    "GENERIC_EXPERTS",
    "GENERIC_MAX_TOPK",
    "GROUPED_SHAPES",
    "KIMI_SHAPES",
    "MODEL_RULES",
    "MODEL_SHAPES",
    "SQRT_SOFTPLUS_SHAPES",
    "ModelRule",
    "LAUNCH_SHAPES",
    "MAX_ROWS",
    "NAME",
    "SHAPES",
    "available",
    "build",
    "contract_rule",
    "covered",
    "covered_kimi",
    "cuda_source",
    "headers",
    "hip_source",
    "launch_shape_for",
    "route",
    "route_contract",
    "router",
    "supported_hardware",
]

NAME = "radix4"
HERE = Path(__file__).resolve().parent
# (experts, topk); mirror radix4_entry.h's RADIX4_*_SHAPES. The Kimi shapes have three launch shapes
# (contracts aiter and serial); the others a warp per token at every batch.
KIMI_SHAPES = frozenset({(896, 16), (384, 8), (224, 16)})
MODEL_SHAPES = frozenset({(256, 8), (160, 8), (128, 6)})  # minimax-m2 / kimi-linear, glm4-moe, dots1
SQRT_SOFTPLUS_SHAPES = frozenset({(256, 6), (384, 6)})  # deepseek-v4 (flash), deepseek-v4 at 384 experts
SHAPES = KIMI_SHAPES | MODEL_SHAPES | SQRT_SOFTPLUS_SHAPES  # every ungrouped contract but serial serves these
# The grouped shapes: (experts, topk, n_group, topk_group), contracts deepseek-v3 and deepseek-v3-reference.
GROUPED_SHAPES = frozenset({(256, 8, 8, 4)})
# The generic path (radix4_entry.h's dispatch_generic): the ungrouped model contracts (entry "lowest") route any E
# in GENERIC_EXPERTS with topk in 1..min(GENERIC_MAX_TOPK, E), SHAPES at their own kernels, the rest through a
# warp-per-token kernel built for the next bound (128, 256, 512 or 1024 experts on CUDA) with phantom experts past E.
GENERIC_EXPERTS = range(8, 1025)
GENERIC_MAX_TOPK = 16
# contract -> (CUDA source, HIP source, C entry point): one library per source; "lowest" (the model contracts,
# sigmoid or sqrt(softplus(x)) by a flag), "grouped" (deepseek-v3) and "grouped_zero" (deepseek-v3-reference:
# dropped groups' experts rank 0.0, not -inf) are entries of the aiter library.
CONTRACTS = {
    "aiter": ("radix4.cu", "radix4.hip", "radix4_route"),
    "serial": ("radix4_serial.cu", "radix4_serial.hip", "radix4_serial_route"),
    "lowest": ("radix4.cu", "radix4.hip", "radix4_lowest_route"),
    "grouped": ("radix4.cu", "radix4.hip", "radix4_grouped_route"),
    "grouped_zero": ("radix4.cu", "radix4.hip", "radix4_grouped_zero_route"),
}


class ModelRule(NamedTuple):
    """How radix4 follows one routing contract: the entry (CONTRACTS' key), its score, its sum rule, its groups."""

    entry: str
    sqrt_softplus: bool = False
    raw_sum: bool = False  # divide by the raw sum (else sum + 1e-20)
    groups: tuple[int, int] | None = None  # (n_group, topk_group) the entry is built for


# The routing contracts (oracle/_builtin.py, by name) radix4 implements. kernels/ does not import the oracle:
# these restate the fields that matter here (tie_rule lowest, nan_rule last, sigmoid_formula correctly_rounded
# served by the aiter sigmoid within the contract's near-tie bound; renormalize eps or raw; groups).
MODEL_RULES: dict[str, ModelRule] = {
    "aiter": ModelRule("aiter"),
    "kimi-k2": ModelRule("lowest"),
    "glm4-moe": ModelRule("lowest"),
    "dots1": ModelRule("lowest"),
    "minimax-m2": ModelRule("lowest", raw_sum=True),
    "deepseek-v3": ModelRule("grouped", groups=(8, 4)),
    "deepseek-v3-reference": ModelRule("grouped_zero", groups=(8, 4)),  # dropped groups' experts rank 0.0
    "deepseek-v4": ModelRule("lowest", sqrt_softplus=True),
    "deepseek-v4-flash": ModelRule("lowest", sqrt_softplus=True),
}
# Rows per launch this kernel is meant for. On an H200 it beat torch-native
# routing at every batch measured up to 4096 rows (benchmarks/radix4_gpu_check.py);
# beyond that a library router may take over.
MAX_ROWS = 4096
# The launch shapes in the order the batch size walks through them: a block of
# warps per token, a warp per token, the register-capped (dense) warp per token.
LAUNCH_SHAPES = ("block", "warp", "dense")
# (experts, topk) -> the first batch size (rows) of each launch shape after the
# first: (first M of "warp", first M of "dense"). M < first_warp takes a block
# per token, first_warp <= M < first_dense a warp, M >= first_dense the dense
# kernel; equal points skip "warp", a point above MAX_ROWS is never reached.
# Both contracts (aiter, serial) use the same points. Chosen by measurement on
# the H200 (python -m kernels.radix4.shape_sweep: every M in 1..4096, each shape,
# both contracts; reports/baselines/h200-radix4-shapes/, docs/radix4_tuning.md); mirrors radix4_entry.h's
# RADIX4_FIRST_*_ROWS_<E>_<K> (tests/test_radix4_switch_points.py keeps them equal).
BATCH_SWITCH_POINTS: dict[tuple[int, int], tuple[int, int]] = {
    # a warp per token from M = 7: on average over 8 buffers of random rows the block shape loses from there (one
    # row in ~45 takes its slow path, +0.5 us: reports/baselines/h200-issue37-switch/); it won up to 61 on one buffer
    (896, 16): (7, 1585),
    (384, 8): (1, 3465),  # a warp per token wins from M = 1 (1.92 vs 1.96 us at M = 1)
    (224, 16): (1, 2677),  # 1.98 vs 2.16 us at M = 1
}
# The model contracts (entry "lowest", and at (256, 8) the grouped ones): (experts, topk) -> the first batch that
# takes a warp per token;
# smaller batches take a block per token, which spreads the float64 scores over more threads (384/6 at M = 1 on
# the H200: 3.61 -> 2.53 us). No dense kernel. The other shapes take a warp per token at every batch. Measured on
# the H200 (reports/baselines/h200-issue38-generic/model-launch-shapes.json); mirrors radix4_entry.h's
# RADIX4_MODEL_FIRST_WARP_ROWS_<E>_<K>.
MODEL_BATCH_SWITCH_POINTS: dict[tuple[int, int], int] = {
    (896, 16): 768,
    (384, 8): 1024,  # 3.56 vs 3.77 us at M = 768, 3.93 vs 3.81 at 1024
    (256, 8): 1024,
    (256, 6): 1024,
    (384, 6): 1024,
}


def switch_points_for(contract: str, experts: int, topk: int) -> tuple[int, ...]:
    """The batch sizes at which radix4 changes launch shape at ``(experts, topk)`` under routing contract
    ``contract`` (a MODEL_RULES name, or "serial"): the points of the library entry that serves it (what
    ``launch_shape_for`` walks through); none for a contract radix4 does not implement."""
    rule = MODEL_RULES.get(contract)
    entry = "serial" if contract == "serial" else rule.entry if rule else None
    if entry in ("aiter", "serial"):
        return tuple(BATCH_SWITCH_POINTS.get((experts, topk), ()))
    if entry is not None:
        point = MODEL_BATCH_SWITCH_POINTS.get((experts, topk))
        return (point,) if point else ()
    return ()


CUDA_COMPILER = "nvcc"
HIP_COMPILER = "hipcc"
# No fast math, no fused multiply-add: ids must stay comparable with the contract.
CUDA_FLAGS = ["-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-fmad=false", "-ftz=false", "-prec-div=true"]
HIP_FLAGS = ["-O3", "-std=c++17", "-shared", "-fPIC", "-ffp-contract=off"]
HIP_SUPPORTED = ("gfx942", "gfx950")

_DTYPE_CODES = {"float32": 0, "bfloat16": 1, "float16": 2}  # logits; the kernel reads a bias of the first two
_KERNEL_BIAS_DTYPES = ("float32", "bfloat16")
_RENORMALIZE = 1
_RAW_SUM = 32
_SQRT_SOFTPLUS = 64
_LAUNCH_SHAPES = {None: 0, "block": 2, "warp": 4, "dense": 16}  # mirrors radix4_entry.h's flags
_PROGRAMMATIC_LAUNCH = 8
_STATUS = {
    1: "unsupported (experts, topk)",
    2: "unsupported dtype",
    3: "bad argument",
    4: "kernel launch failed",
    5: "programmatic dependent launch unsupported",
}


def _contract(contract: str) -> tuple[str, str, str]:
    if contract not in CONTRACTS:
        raise ValueError(f"contract={contract!r} is not one of {sorted(CONTRACTS)}")
    return CONTRACTS[contract]


def cuda_source(contract: str = "aiter") -> Path:
    return HERE / _contract(contract)[0]


def hip_source(contract: str = "aiter") -> Path:
    return HERE / _contract(contract)[1]


def headers(backend: str) -> list[Path]:
    """The headers a back end's translation unit includes (``'cuda'`` or ``'hip'``)."""
    lanes = {"cuda": "lanes_cuda.cuh", "hip": "lanes_hip.h"}[backend]
    return [HERE / name for name in ("radix4_router.h", "tie_order.h", "radix4_entry.h", lanes)]


# ---------------------------------------------------------------- hardware


def _device_arch() -> tuple[str, str]:
    """``('cuda', 'sm_90')`` or ``('hip', 'gfx942')`` of the current device; needs torch with a GPU."""
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if torch.version.hip:
        return "hip", props.gcnArchName.split(":")[0]
    return "cuda", f"sm_{props.major}{props.minor}"


def supported_hardware(*, cuda_only: bool = False, min_cuda_arch: int = 80) -> tuple[bool, str]:
    """(True, what) on CUDA sm_80+ or ROCm gfx942/gfx950 with its compiler; (False, why) otherwise. Never raises.

    ``cuda_only`` refuses ROCm and ``min_cuda_arch`` raises the CUDA floor (the
    serial contract and the PDL modules use them).
    """
    try:
        try:
            import torch
        except ImportError:
            return False, "torch is not installed"
        if not torch.cuda.is_available():
            return False, f"no GPU: torch {torch.__version__} sees none (torch.cuda.is_available() is False)"
        backend, arch = _device_arch()
        if backend == "hip":
            if cuda_only:
                return False, f"ROCm device {arch}: this kernel is CUDA only"
            if arch not in HIP_SUPPORTED:
                return False, f"ROCm device {arch} is not a CDNA3/4 target; radix4 supports {', '.join(HIP_SUPPORTED)}"
            compiler = HIP_COMPILER
        else:
            if int(arch[3:].rstrip("a")) < 80:
                return False, f"CUDA device {arch} is older than sm_80 (radix4 needs redux.sync)"
            if int(arch[3:].rstrip("a")) < min_cuda_arch:
                return False, f"CUDA device {arch} is older than sm_{min_cuda_arch} (programmatic dependent launch)"
            compiler = CUDA_COMPILER
        if shutil.which(compiler) is None:
            return False, f"{compiler} is not on PATH; install it to build radix4 for {arch}"
        return True, f"{arch} with {compiler}"
    except Exception as exc:  # noqa: BLE001 -- this function reports, it does not raise
        return False, f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- building


def _compile(source: Path, arch: str, *, depends: list[Path], defines: tuple[str, ...] = ()) -> Path:
    """Compile a radix4 translation unit for ``arch`` into the cache; BuildError on compiler error."""
    extra = [f"-D{d}" for d in defines]
    if arch.startswith("sm_") and arch[3:].rstrip("a").isdigit():
        return compile_shared(source, compiler=CUDA_COMPILER, flags=[*CUDA_FLAGS, *extra, f"-arch={arch}"],
                              depends=depends)  # fmt: skip
    if arch.startswith("gfx"):
        env = {**os.environ, "HIP_PLATFORM": "amd"}  # nvcc may be installed too; hipcc would pick it
        return compile_shared(source, compiler=HIP_COMPILER, flags=[*HIP_FLAGS, *extra, f"--offload-arch={arch}"],
                              depends=depends, env=env)  # fmt: skip
    raise ValueError(f"arch={arch!r} is neither a CUDA ('sm_90') nor an AMD ('gfx942') architecture")


def build(*, arch: str | None = None, defines: tuple[str, ...] = (), contract: str = "aiter") -> Path:
    """Compile (or find cached) the library for ``arch`` (default: the current device's).

    ``defines`` are preprocessor definitions such as ``("RADIX4_TOKENS_PER_BLOCK=2",)``
    (the benchmark times them); ``contract`` picks the translation unit ('aiter' or
    'serial'). Raises BuildError if the compiler rejects the source or is missing.
    """
    if arch is None:
        ok, why = supported_hardware()
        if not ok:
            raise BuildError(f"cannot pick an architecture: {why}; pass arch='sm_90' or arch='gfx942'")
        _, arch = _device_arch()
    backend = "hip" if arch.startswith("gfx") else "cuda"
    source = hip_source(contract) if backend == "hip" else cuda_source(contract)
    return _compile(source, arch, depends=headers(backend), defines=tuple(defines))


class ContractLibrary:
    """One contract's view of a loaded library: ``route`` is that contract's C entry; any other name is the
    library's own (``radix4_status_string``, the lab builds' clocks).

    Several contracts share one shared object (CONTRACTS: aiter, lowest, grouped and grouped_zero are entries of
    radix4.cu), which the loader hands out once; each view holds its own function pointer, so routing under one
    contract never rebinds another's entry."""

    def __init__(self, lib: ctypes.CDLL, entry_name: str):
        p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        self._lib = lib
        self.route = lib[entry_name]  # indexing makes a new function pointer; attribute access would share one
        self.route.argtypes, self.route.restype = [p, i, i64, p, i, i64, i, i, i, f, p, p, p], i
        lib.radix4_status_string.argtypes, lib.radix4_status_string.restype = [i], ctypes.c_char_p
        lib.radix4_runtime_error_string.argtypes, lib.radix4_runtime_error_string.restype = [], ctypes.c_char_p

    def __getattr__(self, name: str):
        return getattr(self._lib, name)


_libraries: dict[tuple[str, str, tuple[str, ...]], ContractLibrary] = {}


def library(*, defines: tuple[str, ...] = (), contract: str = "aiter") -> ContractLibrary:
    """The loaded library for the current device, built on first use; its route entry is ``lib.route``."""
    _, arch = _device_arch()
    key = (contract, arch, tuple(defines))
    if key not in _libraries:
        lib = load_library(build(arch=arch, defines=tuple(defines), contract=contract))
        _libraries[key] = ContractLibrary(lib, _contract(contract)[2])
    return _libraries[key]


def available(*, contract: str = "aiter", cuda_only: bool = False, min_cuda_arch: int = 80) -> tuple[bool, str]:
    """supported_hardware, then a build and load; (False, why) instead of raising."""
    ok, why = supported_hardware(cuda_only=cuda_only, min_cuda_arch=min_cuda_arch)
    if not ok:
        return ok, why
    try:
        library(contract=contract)
    except Exception as exc:  # noqa: BLE001 -- report build failures as data
        return False, f"{type(exc).__name__}: {exc}".splitlines()[0]
    return True, why


# ---------------------------------------------------------------- routing


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def launch_shape_for(rows: int, experts: int, topk: int, *, entry: str = "aiter") -> str:
    """The launch shape library entry ``entry`` (CONTRACTS' key) takes by default for a batch of ``rows`` (one of
    LAUNCH_SHAPES): aiter and serial by BATCH_SWITCH_POINTS, the model contracts ("lowest", "grouped",
    "grouped_zero") by MODEL_BATCH_SWITCH_POINTS; every other shape a warp per token at every batch."""
    if entry in ("lowest", "grouped", "grouped_zero"):
        first_warp = MODEL_BATCH_SWITCH_POINTS.get((experts, topk), 1)
        return "block" if rows < first_warp else "warp"
    if entry not in ("aiter", "serial") or (experts, topk) not in BATCH_SWITCH_POINTS:
        return "warp"
    first_warp, first_dense = BATCH_SWITCH_POINTS[(experts, topk)]
    return "dense" if rows >= first_dense else "warp" if rows >= first_warp else "block"


_FLOAT_DTYPES = ("float32", "bfloat16", "float16", "float64")


def _entry_serves(entry: str, experts: int, topk: int) -> bool:
    """Whether library entry ``entry`` (CONTRACTS' key) takes (experts, topk): radix4_entry.h's ``served``."""
    if (experts, topk) in _SERVED[entry]:
        return True
    return entry == "lowest" and experts in GENERIC_EXPERTS and 1 <= topk <= min(GENERIC_MAX_TOPK, experts)


def covered(*, rows: int, experts: int, topk: int, dtype, bias_dtype, num_expert_group: int | None = None,
            topk_group: int | None = None, contract: str | None = None, logits_strides: tuple[int, int] | None = None,
            bias_stride: int | None = None) -> bool:  # fmt: skip
    """Whether radix4 serves this call under routing contract ``contract`` (a MODEL_RULES name; None: under any
    it implements): ungrouped, (experts, topk) in SHAPES, or under the ungrouped model contracts any E in
    GENERIC_EXPERTS with 1 <= topk <= min(16, E); grouped (``num_expert_group`` > 1), (experts, topk, n_group,
    topk_group) in GROUPED_SHAPES; 0 <= rows <= MAX_ROWS; logits bf16, fp16 or fp32; any float bias (a bias
    that is not bf16 or fp32 is widened to fp32 before the launch, as the contracts read it); logits of column
    stride 1 and row stride >= E, a bias of stride 1 (``logits_strides``, ``bias_stride``: what route takes)."""
    from .._args import serves_layout  # here: the module's imports are the kernel's

    if not serves_layout(rows=rows, experts=experts, logits_strides=logits_strides, bias_stride=bias_stride):
        return False
    grouped = num_expert_group is not None and num_expert_group > 1
    if contract is not None and contract not in MODEL_RULES:
        return False
    rules = [MODEL_RULES[contract]] if contract is not None else list(MODEL_RULES.values())
    if grouped:
        shape_ok = any(rule.groups == (num_expert_group, topk_group) for rule in rules) and (
            experts, topk, num_expert_group, topk_group) in GROUPED_SHAPES  # fmt: skip
    else:
        shape_ok = any(rule.groups is None and _entry_serves(rule.entry, experts, topk) for rule in rules)
    return (
        shape_ok
        and 0 <= rows <= MAX_ROWS
        and _dtype_name(dtype) in _DTYPE_CODES
        and _dtype_name(bias_dtype) in _FLOAT_DTYPES
    )


def covered_kimi(*, rows: int, experts: int, topk: int, dtype, bias_dtype, logits_strides: tuple[int, int] | None = None,
                 bias_stride: int | None = None) -> bool:  # fmt: skip
    """``covered`` of the serial contract's modules: the Kimi shapes, bf16 or fp32 logits and bias, in the layouts
    ``covered`` serves."""
    from .._args import serves_layout

    return (
        serves_layout(rows=rows, experts=experts, logits_strides=logits_strides, bias_stride=bias_stride)
        and (experts, topk) in KIMI_SHAPES
        and 0 <= rows <= MAX_ROWS
        and _dtype_name(dtype) in ("float32", "bfloat16")
        and _dtype_name(bias_dtype) in ("float32", "bfloat16")
    )


# The (experts, topk) each library entry serves (radix4_entry.h's `served`).
_GROUPED_EK = frozenset((e, k) for e, k, _, _ in GROUPED_SHAPES)
_SERVED = {"aiter": SHAPES, "serial": KIMI_SHAPES, "lowest": SHAPES, "grouped": _GROUPED_EK, "grouped_zero": _GROUPED_EK}


def _check_args(scores, bias, topk, renormalize, routed_scaling_factor, name: str = NAME,
                contract: str = "aiter") -> tuple[int, int, int, float]:  # fmt: skip
    """Validate route() arguments; return ``(M, E, row_stride, rs)``."""
    logits = tuple(_DTYPE_CODES) if contract != "serial" else _KERNEL_BIAS_DTYPES
    M, E, row_stride, rs = check_route_args(scores, bias, topk, renormalize, routed_scaling_factor, dtypes=logits,
                                            bias_dtypes=None if contract != "serial" else _KERNEL_BIAS_DTYPES,
                                            dtype_hint=f"pass {', '.join(logits)} logits")  # fmt: skip
    if not _entry_serves(contract, E, int(topk)):
        shapes = ", ".join(f"E={e} with topk={k}" for e, k in sorted(_SERVED[contract]))
        if contract == "lowest":
            shapes += f", and any E in {GENERIC_EXPERTS.start}..{GENERIC_EXPERTS.stop - 1} with topk in 1..min({GENERIC_MAX_TOPK}, E)"
        raise ValueError(f"(E, topk)=({E}, {topk}) is not supported; {name} takes {shapes}; use the oracle or aiter")
    if M >= 2**31 - 16:
        raise ValueError(f"M={M} rows is more than one launch takes; split the batch below 2**31 - 16 rows")
    if scores.device.type != "cuda":
        raise ValueError(f"scores.device={scores.device} is not a GPU; {name} runs on CUDA or ROCm devices")
    return M, E, row_stride, rs


def _check_pdl(pdl, device, name: str) -> None:
    if not isinstance(pdl, bool):
        raise ValueError(f"pdl={pdl!r} is not a bool; pass True or False")
    if pdl:
        import torch

        with torch.cuda.device(device):
            backend, arch = _device_arch()
        if backend != "cuda" or int(arch[3:].rstrip("a")) < 90:
            raise ValueError(f"pdl=True needs CUDA sm_90 or newer (this device is {arch}); {name} runs without it: pass pdl=False")


def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0, *,
          launch_shape: str | None = None, pdl: bool = False):  # fmt: skip
    """Route GPU ``scores`` [M, E] under contract ``aiter``; return ``(weights, ids)``.

    Launches on ``torch.cuda.current_stream(scores.device)``, so a CUDA graph
    captures it. Inputs are not modified. ``launch_shape`` ('block': a block
    per token, 'warp': a warp per token, 'dense': the register-capped warp per
    token) overrides the choice by batch size, for benchmarks and tests; all
    give the same results. ``pdl=True``: a
    programmatic dependent launch (CUDA sm_90+), the same results.
    """
    return route_contract("aiter", scores, bias, topk, renormalize, routed_scaling_factor,
                          launch_shape=launch_shape, pdl=pdl)  # fmt: skip


def route_contract(contract: str, scores, bias, topk: int, renormalize: bool = True,
                   routed_scaling_factor: float = 1.0, *, launch_shape: str | None = None, pdl: bool = False,
                   name: str = NAME, extra_flags: int = 0):  # fmt: skip
    """``route`` for one library entry (CONTRACTS: 'aiter', 'serial', 'lowest', 'grouped', 'grouped_zero'); ``name`` goes
    into error messages; ``extra_flags``: the model contracts' sum and score flags (``router``)."""
    import torch

    _contract(contract)
    if launch_shape not in _LAUNCH_SHAPES:
        raise ValueError(f"launch_shape={launch_shape!r} is not one of None, 'block', 'warp', 'dense'; leave it None")
    M, E, row_stride, rs = _check_args(scores, bias, topk, renormalize, routed_scaling_factor, name, contract)
    _check_pdl(pdl, scores.device, name)
    if _dtype_name(bias.dtype) not in _KERNEL_BIAS_DTYPES:
        bias = bias.float()  # fp16 / fp64: the contracts rank with the bias in fp32 (exact for fp16)
    weights = torch.empty((M, topk), dtype=torch.float32, device=scores.device)
    ids = torch.empty((M, topk), dtype=torch.int32, device=scores.device)
    if M == 0:
        return weights, ids
    flags = (_RENORMALIZE if renormalize else 0) | _LAUNCH_SHAPES[launch_shape] | (_PROGRAMMATIC_LAUNCH if pdl else 0)
    flags |= extra_flags
    with torch.cuda.device(scores.device):
        lib = library(contract=contract)
        stream = torch.cuda.current_stream(scores.device).cuda_stream
        rc = lib.route(
            scores.data_ptr(), _DTYPE_CODES[_dtype_name(scores.dtype)], row_stride,
            bias.data_ptr(), _DTYPE_CODES[_dtype_name(bias.dtype)], M, E, topk,
            flags, rs, weights.data_ptr(), ids.data_ptr(), stream,
        )  # fmt: skip
    if rc != 0:
        detail = lib.radix4_status_string(rc).decode(errors="replace")
        if rc == 4:
            detail += ": " + lib.radix4_runtime_error_string().decode(errors="replace")
        raise RuntimeError(f"{_contract(contract)[2]} returned {rc} ({_STATUS.get(rc, 'unknown')}): {detail}")
    return weights, ids


def contract_rule(contract: str) -> ModelRule:
    """How radix4 follows routing contract ``contract`` (a MODEL_RULES name); ValueError names the choices."""
    if contract not in MODEL_RULES:
        raise ValueError(f"contract={contract!r} is not one radix4 implements; pick one of {sorted(MODEL_RULES)}")
    return MODEL_RULES[contract]


def router(contract: str, *, pdl: bool = False, name: str = NAME):
    """``route(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group=None, topk_group=None,
    launch_shape=None)`` under routing contract ``contract`` (MODEL_RULES), with PDL when ``pdl``.

    A grouped contract takes exactly its built groups (or none given: the contract's); an ungrouped one
    refuses groups. The results follow the contract (docs/radix4_models.md)."""
    rule = contract_rule(contract)
    extra = (_RAW_SUM if rule.raw_sum else 0) | (_SQRT_SOFTPLUS if rule.sqrt_softplus else 0)

    def route(scores, bias, topk: int, renormalize: bool = True, routed_scaling_factor: float = 1.0, *,
              num_expert_group: int | None = None, topk_group: int | None = None, launch_shape: str | None = None):  # fmt: skip
        asked = (num_expert_group, topk_group)
        if rule.groups is None:
            if num_expert_group not in (None, 1) or topk_group not in (None, 1):
                raise ValueError(f"num_expert_group={num_expert_group}, topk_group={topk_group}: {name} routes contract "
                                 f"{contract} ungrouped; pass neither (or 1 and 1)")  # fmt: skip
        elif asked != (None, None) and asked != rule.groups:
            raise ValueError(f"(num_expert_group, topk_group)={asked}: {name} is built for contract {contract}'s "
                             f"{rule.groups}; pass those or neither")  # fmt: skip
        return route_contract(rule.entry, scores, bias, topk, renormalize, routed_scaling_factor,
                              launch_shape=launch_shape, pdl=pdl, name=name, extra_flags=extra)  # fmt: skip

    route.__qualname__ = f"{name}[{contract}]"
    return route
