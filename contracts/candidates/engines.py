"""The serving engines' own routers as candidates: one per adapter of ``kernels.engines.ADAPTERS``.

``sglang-torch``, ``vllm-torch``, ``lmdeploy-torch`` (the engines' published
torch routers), ``sglang-radix``, ``sglang-radix-unsorted``,
``sglang-triton``, ``flashinfer-noaux`` (their CUDA and Triton kernels).
``docs/engines.md`` says what each runs and where it finds the engine's files.

Registered when ``contracts.candidates`` is imported; nothing of an engine is
loaded then. Only ``kernels.engines`` itself is imported (its adapter table
and path settings: standard library only); each adapter module
(``kernels.engines.<module>``), and through it the engine's files, is
imported inside the gates and the route, on first use. The gates are the
adapter's own: ``supported_hardware()`` (the engine's files are found; a GPU
of the right architecture), ``build()`` (load the torch functions, compile
a CUDA shim), ``covered(**shape)``. ``bench`` times each through the adapter's bench path
(``prepare_launch``): the engine's launches per forward, prepared as the
engine prepares them at load (docs/engines.md, "What bench times").

Every engine candidate runs another project's code, so it is
``third_party``: ``check`` and ``matrix`` run it in a worker process by
default, where a crash or hang is a reported error.

Contract: each claims ``aiter``, the Kimi contract (896/16 and Kimi-K2's
384/8), and all but ``sglang-radix`` (896/16 only) also serve
``deepseek-v3``, the grouped contract of the DeepSeek-V3 path. The declared
deviations below are what the harness measured (``MEASURED_WITH`` names the
command), one clause per line with why: every clause the run saw broken is
declared, none that it did not see, and never ``validity`` (an answer with a
repeated or out-of-range expert id is broken, whoever returns it: FlashInfer's
noaux_tc under ``deepseek-v3`` does, on the ``few_valid`` family, and fails
there). The CUDA and Triton adapters declare what the H200 runs of
``benchmarks/gpu_all.sh matrix`` measured (``reports/baselines/h200-final``:
``matrix-k3``, ``matrix-k2``, ``matrix-dsv3``, ``engine-checks``, 20,000 rows
each).
"""

from __future__ import annotations

import importlib

from kernels.engines import ADAPTERS, ENV_ENGINE_PATH, Adapter
from kernels.engines import set_engine_path as _set_engine_path

from .lazy import LazyFunction
from .registry import Candidate, register

__all__ = ["CONTRACTS", "COVERAGE", "DESCRIPTIONS", "ENGINE_DECLARED_BOUNDS", "ENGINE_DEVIATIONS", "ENV_ENGINE_PATH", "MEASURED_WITH", "engine_candidate",
           "set_engine_path"]  # fmt: skip

DESCRIPTIONS = {
    "sglang-torch": "SGLang 0.5.23's torch router biased_grouped_topk_impl, loaded from the installed file (eager)",
    "vllm-torch": "vLLM 0.33.0's torch routers: fused_topk_bias's torch path (one group), grouped_topk (groups)",
    "lmdeploy-torch": "lmdeploy 0.18.0's DefaultRouterNoauxTCImpl (its torch noaux_tc router)",
    "sglang-radix": "SGLang 0.5.23's CUDA route_radix.cuh, sorted output (896/16, sm_90+)",
    "sglang-radix-unsorted": "SGLang 0.5.23's CUDA route_radix.cuh, sorted=False as SGLang serves it (896/16, sm_90+)",
    "sglang-triton": "SGLang 0.5.23's Triton moe_fused_gate",
    "flashinfer-noaux": "FlashInfer 0.7.2's noAuxTcKernels.cu (Kimi-K2 384/8, DeepSeek-V3 shapes; sm_89+)",
}

# What each adapter's covered() serves, in words (the skip reason of the rows it does not), and the contracts
# whose shapes it routes (`--candidate all --contract X` checks the candidates that serve X). Every adapter checks its
# arguments with kernels._args (``_common.check_args``), which refuses logits of column stride != 1 or row stride < E:
# each gate declines those layouts (any bias stride is served), and says so.
_LAYOUTS = "logits of column stride 1 and row stride >= E only (the adapter's argument check refuses others)"
COVERAGE = {
    name: f"{what}; {_LAYOUTS}" for name, what in {
        "sglang-torch": "SGLang's torch router serves every shape",
        "vllm-torch": "vLLM's torch routers serve every shape",
        "lmdeploy-torch": "lmdeploy's noaux_tc router always takes a correction bias",
        "sglang-radix": "SGLang's radix router serves 896 experts, top-16, no groups, bf16 or fp32 logits",
        "sglang-radix-unsorted": "SGLang's radix router serves 896 experts, top-16, no groups, bf16 or fp32 logits",
        "sglang-triton": "SGLang's Triton router serves any E and top-k whose groups divide E",
        "flashinfer-noaux": "FlashInfer's noaux_tc kernel serves one group with E <= 384 and top-k <= 8, or DeepSeek-V3's "
                            "grouped shapes, bf16/fp16/fp32",
    }.items()
}  # fmt: skip
CONTRACTS = {name: ("aiter",) if name.startswith("sglang-radix") else ("aiter", "deepseek-v3") for name in ADAPTERS}

# What measured each candidate's deviations, per contract (CPU, torch 2.13.0, the engines installed with
# scripts/engines.sh install; 20,000 rows over every family that applies to the contract). Under aiter the same
# run at --experts 384 --topk 8 (Kimi-K2) breaks the same clauses.
MEASURED_WITH = {
    name: {contract: f"python -m contracts check --candidate {name} --contract {contract} --rows 20000 --no-isolate"
           for contract in ("aiter", "deepseek-v3")}
    for name in ("sglang-torch", "vllm-torch", "lmdeploy-torch")
}  # fmt: skip

# What all three torch routers share: `scores = logits.sigmoid()` in the logits' dtype, then
# `torch.topk(scores + bias, k, sorted=False)` (docs/engines.md, each adapter).
_TORCH_ROUTER = {
    "selection": "sigmoid and ranking add in the logits' dtype: bf16 logits rank bf16 sigmoids, "
                 "which choose other experts than the fp32 sigmoid",
    "weight_accuracy": "the weights are those bf16 sigmoids (8-bit mantissa), widened to fp32 only at the end",
    "tie_order": "torch.topk breaks exact ties in its own order, not aiter's lane order",
    "nan_last": "torch.topk ranks NaN above every number",
    "output_order": "torch.topk(sorted=False): the slots are not in ranking order",
}  # fmt: skip

# The grouped (DeepSeek-V3) path of the same routers: group scores are top-2 sums of those bf16 values.
_GROUPED_TORCH_ROUTER = {
    **{k: v for k, v in _TORCH_ROUTER.items() if k != "output_order"},  # deepseek-v3 compares the ids as a set
    "group_mask": "group scores summed in bf16 keep other groups than the fp32 sums, and torch.topk breaks exact "
                  "group-score ties in its own order: experts of groups the contract drops are chosen",
    "group_selection": "bf16 group sums keep other groups than the contract's fp32 sums (family random_bf16 on the CPU, "
                       "tie_pool_above on CUDA)",
    "group_tie_order": "torch.topk keeps, among groups whose scores tie exactly, its own pick, not the lowest group "
                       "index (bf16 group sums tie: family random_bf16, 1 row of 8,337 in a 700-row CPU check with "
                       "the pinned cases at 1,024 rows)",
}  # fmt: skip

# candidate -> contract -> {clause: bound}: how far its declared bounded clauses reach
# (contracts.compare.tolerance; default 2^-16, an fp32 computation in another order). The torch routers rank and
# weigh bf16 sigmoids, and underflowed (subnormal) bf16 sigmoids keep few bits: each bound is the worst measured over
# 20,000 rows (CPU, torch 2.13, the engines of requirements/engines.txt; the rows blamed on that clause), times four,
# rounded up to a power of two. Weights: sglang-torch 2^-7.50 (aiter) and 2^-7.36 (deepseek-v3), vllm-torch 2^-6.90
# (aiter), lmdeploy-torch, which also sums, divides and scales in bf16, 2^-6.58 and 2^-6.57. Selection (how far past
# the contract's cutoff a chosen or left-out expert lies, relative to |sigmoid| + |bias|): sglang-torch 2^-6.57 under
# aiter (--rows 2000 and the pinned cases, 310,187 rows), which three bf16 roundings on each of two experts explain;
# the other two rank the same bf16 values and get the same 2^-4 (not measured separately).
# vllm-torch under deepseek-v3 gets its aiter bounds (its sigmoid_underflow rows, once blamed on `scaling`, are its
# declared renorm_guard in bf16 arithmetic since aa9b69b). The GPU kernels' bounds come from their arithmetic: fp32
# weights that differ beyond the tolerance in a few rows 2^-10, sglang-triton's choice among near-equal bf16 values
# 2^-6. Measured on the H200 on 2026-12-05 (reports/baselines/h200-contexts-engine-bounds/): weights 2^-14.2 at
# worst (flashinfer-noaux), none for sglang-triton; selections beyond the bounds in rows that are other deviations
# (flashinfer's zero sigmoids below 1.2e-37, ties among -inf groups and experts), which fail, and no others.
# Groups (group_selection, group_mask under deepseek-v3: how far the best group left out lies above the worst kept,
# attribution.group_departure): the torch routers' bf16 group sums 2^-5.36 at worst of 3,000 rows each (the same row
# in all three), bound 2^-4. The GPU kernels', measured on an H100 on 2026-12-05 (20,000 rows and the pinned cases,
# reports/baselines/h100-engine-group-bounds/): flashinfer-noaux's excused group rows depart by at most 2^-16 (the
# default bound; its rows beyond are its zero sigmoids, which fail); sglang-triton's 811 rows within its 2^-6 (set from
# its arithmetic, as its selection bound), and 3,377 beyond, in the tie families: where every expert of the kept groups
# ties, it takes experts of dropped groups (group_all_equal: all 1,450 rows), a finding that fails.
_FP32_KERNEL = {"weight_accuracy": 2.0**-10}
_BF16_GROUP_SUMS = {"group_selection": 2.0**-4, "group_mask": 2.0**-4}
ENGINE_DECLARED_BOUNDS: dict[str, dict[str, dict[str, float]]] = {
    "sglang-torch": {"aiter": {"weight_accuracy": 2.0**-5, "selection": 2.0**-4},
                     "deepseek-v3": {"weight_accuracy": 2.0**-5, "selection": 2.0**-4, **_BF16_GROUP_SUMS}},
    "vllm-torch": {"aiter": {"weight_accuracy": 2.0**-4, "selection": 2.0**-4},
                   "deepseek-v3": {"weight_accuracy": 2.0**-4, "selection": 2.0**-4, **_BF16_GROUP_SUMS}},
    "lmdeploy-torch": {"aiter": {"weight_accuracy": 2.0**-4, "selection": 2.0**-4},
                       "deepseek-v3": {"weight_accuracy": 2.0**-4, "selection": 2.0**-4, **_BF16_GROUP_SUMS}},
    "sglang-radix": {"aiter": _FP32_KERNEL},
    "sglang-triton": {"deepseek-v3": {**_FP32_KERNEL, "selection": 2.0**-6, "group_selection": 2.0**-6}},
    "flashinfer-noaux": {"aiter": _FP32_KERNEL, "deepseek-v3": _FP32_KERNEL},
    "sglang-radix-unsorted": {"aiter": _FP32_KERNEL},
}

# contract -> {clause: why}, per candidate. Measured with MEASURED_WITH[name][contract]: every clause a row of the
# run broke (rows counted under each clause they break: the families' clauses_broken, expected_clauses once
# declared), with the family that shows each where it is not every bf16 one.
ENGINE_DEVIATIONS: dict[str, dict[str, dict[str, str]]] = {
    "sglang-torch": {
        "aiter": {
            **_TORCH_ROUTER,
            "renorm_guard": "divides by sum + 1e-20: a sum of underflowed (subnormal) sigmoids is not "
                            "renormalized to 1 (family sigmoid_underflow)",
        },
        "deepseek-v3": dict(_GROUPED_TORCH_ROUTER),
    },
    "vllm-torch": {
        "aiter": {
            **_TORCH_ROUTER,
            "weight_accuracy": _TORCH_ROUTER["weight_accuracy"] + "; underflowed (subnormal) bf16 sigmoids keep few "
                               "bits or none, which the raw division shows (family sigmoid_underflow)",
            "renorm_guard": "divides by the raw sum (w / w.sum()): a zero sum gives NaN weights "
                            "(families zero_sum, subnormal, all_equal)",
        },
        "deepseek-v3": {
            **_GROUPED_TORCH_ROUTER,
            "renorm_guard": "grouped_topk divides by the raw sum: a zero sum gives NaN weights (families zero_sum, subnormal)",
        },
    },
    # Measured on the H200 (reports/baselines/h200-final/matrix-k3: benchmarks/gpu_all.sh matrix, 20,000 rows, each
    # candidate against the oracle under aiter at 896/16). sglang-radix stopped at a strided case with a CUDA
    # "misaligned address" error (16,534 rows answered); that error stays an error, it is not declared.
    "sglang-radix": {
        "aiter": {
            "tie_order": "breaks exact ties in its own order, not aiter's lane order (7,166 of 16,534 rows on the H200)",
            "nan_last": "does not rank NaN below every number the contract's way (781 rows of the NaN families on the H200)",
            "weight_accuracy": "its fp32 weights differ beyond the tolerance in 1 row of 16,534 on the H200",
        },
    },
    "sglang-triton": {
        "aiter": {
            "tie_order": "breaks exact ties in its own order, not aiter's lane order (7,169 of 20,000 rows on the H200)",
            "nan_last": "does not rank NaN below every number the contract's way (781 rows of the NaN families on the H200)",
        },
        # matrix-dsv3: 20,000 rows under deepseek-v3 (256/8, 8 groups, 4 kept) on the H200
        "deepseek-v3": {
            "group_selection": "keeps other groups than the contract's fp32 top-2 sums where they lie within 2^-6 (811 rows "
                               "of 20,000 on an H100); not where every expert of the kept groups ties, where it takes experts "
                               "of dropped groups (group_all_equal, saturated, tie_pool_*: a failure)",
            "group_tie_order": "breaks exact group-score ties in its own order (588 rows, mostly group_score_ties and saturated)",
            "tie_order": "breaks exact expert ties in its own order (77 rows, tie_pool_straddle)",
            "selection": "chooses other experts among near-equal bf16 values (3 rows: bf16_near_ties, few_valid)",
            "nan_last": "does not rank NaN below every number (782 rows: nan_dense, nan_neg_inf_bias, few_valid)",
            "renorm_guard": "a sum of underflowed sigmoids is not renormalized the contract's way (363 rows)",
            "weight_accuracy": "underflowed (subnormal) sigmoids lose their bits (293 rows, sigmoid_underflow)",
        },
    },
    # engine-checks / matrix-k2: 20,000 rows at 384/8 under aiter (12,887 served), and matrix-dsv3 (13,268 served)
    "flashinfer-noaux": {
        "aiter": {
            "tie_order": "breaks exact ties by the lower expert index, not aiter's lane order (4,087 rows)",
            "nan_last": "does not rank NaN below every number (466 rows: nan_sparse, nan_dense, nan_neg_inf_bias)",
            "selection": "flushes subnormal ranking values to zero and rounds its sigmoids its own way: other experts "
                         "(409 rows: subnormal, sigmoid_underflow, and 2 rows of random_bf16 / random_fp32)",
            "weight_accuracy": "its weights differ beyond the tolerance (68 rows: tie_pool_above, few_valid)",
            "renorm_guard": "a sum of underflowed sigmoids is not renormalized the contract's way (22 rows, sigmoid_underflow)",
            "output_order": "near-equal experts in another order (4 rows: random_fp32, batch_sizes)",
        },
        "deepseek-v3": {
            "selection": "flushes subnormal values to zero: other experts (551 rows: subnormal, sigmoid_underflow, "
                         "and 2 rows of random_bf16 / batch_sizes)",
            "nan_last": "does not rank NaN below every number (425 rows: nan_dense, nan_neg_inf_bias, nan_sparse)",
            "weight_accuracy": "its weights differ beyond the tolerance (79 rows, tie_pool_above)",
            "group_selection": "keeps other groups where subnormal values decide (62 rows: sigmoid_underflow, 1 strided)",
            "group_mask": "experts of dropped groups are chosen where subnormal values decide (42 rows: subnormal, sigmoid_underflow)",
        },
    },
    # checks-k3: 16,534 rows under aiter before the strided case's "misaligned address" error (not declared)
    "sglang-radix-unsorted": {
        "aiter": {
            "output_order": "sorted=False: the slots are not in ranking order (10,048 rows)",
            "tie_order": "breaks exact ties in its own order, not aiter's lane order (5,297 rows)",
            "nan_last": "does not rank NaN below every number (1,181 rows: nan_dense, nan_neg_inf_bias, few_valid)",
            "weight_accuracy": "underflowed sigmoids lose their bits (14 rows, sigmoid_underflow)",
        },
    },
    "lmdeploy-torch": {
        "aiter": {
            **_TORCH_ROUTER,
            "weight_accuracy": _TORCH_ROUTER["weight_accuracy"] + "; the sum, the division and the scaling also in bf16 "
                               "(families all_equal, all_zero)",
            "renorm_guard": "divides by sum + 1e-20: a sum of underflowed (subnormal) sigmoids is not "
                            "renormalized to 1 (family sigmoid_underflow)",
        },
        "deepseek-v3": {
            **_GROUPED_TORCH_ROUTER,
            "group_mask": _GROUPED_TORCH_ROUTER["group_mask"] + "; dropped groups are masked with 0.0, not -inf, "
                          "so a negative ranking value loses to a masked expert",
        },
    },
}  # fmt: skip


def set_engine_path(spec: str | None) -> None:
    """Directories of engine files, ``"sglang=DIR,flashinfer=DIR2"`` or ``"DIR"`` (``--engine-path``).

    Sets ``ROUTER_ENGINE_PATH`` too, so worker processes started afterwards
    find the same files. ValueError names a key that is not an engine.
    """
    _set_engine_path(spec)


def _gate(module: str, fn: str):
    def call(_device):  # the adapters' gates look at the current device themselves
        return getattr(importlib.import_module(module), fn)()

    call.__qualname__ = f"{module}.{fn}"
    return call


def engine_candidate(adapter: Adapter) -> Candidate:
    """The candidate for one adapter: its route and gates imported on first use."""
    return Candidate(
        name=adapter.name,
        route=LazyFunction(adapter.module, adapter.route),
        contract="aiter",
        devices=adapter.devices,
        description=DESCRIPTIONS.get(adapter.name, f"{adapter.module}.{adapter.route}"),
        supported_hardware=_gate(adapter.module, "supported_hardware"),
        build=_gate(adapter.module, "build"),
        covered=LazyFunction(adapter.module, "covered"),
        expected_deviations={contract: dict(d) for contract, d in ENGINE_DEVIATIONS.get(adapter.name, {}).items()},
        declared_bounds={contract: dict(b) for contract, b in ENGINE_DECLARED_BOUNDS.get(adapter.name, {}).items()},
        third_party=True,
        origin=adapter.module,
        coverage=COVERAGE.get(adapter.name, ""),
        contracts=CONTRACTS[adapter.name],
        prepare_launch=LazyFunction(adapter.module, adapter.bench),
    )


for _adapter in ADAPTERS.values():
    register(engine_candidate(_adapter))
