"""The built-in candidates, registered by name when ``contracts.candidates`` is imported.

Kernel modules (and the oracle) are imported lazily inside the gates and the
route, so that listing candidates never compiles or loads GPU code, nor torch.
"""

from __future__ import annotations

import importlib

from .lazy import LazyFunction
from .registry import Candidate, register

_TORCH_NATIVE_DEVIATIONS = {
    "tie_order": "torch.topk breaks exact ties in an unspecified, device-dependent order",
    "nan_last": "torch.topk ranks NaN above every number",
    "renorm_guard": "divides by the sum of the weights with no guard (a zero sum gives NaN)",
}

_AITER_MODEL_DEVIATIONS = {
    "renorm_guard": "aiter divides by the sum with no guard: a zero sum gives NaN weights",
    "nan_last": "aiter emits the round index as the expert id when no value > -inf remains",
    "weight_accuracy": "aiter computes w * (rsf / sum), not (w / sum) * rsf: ULP-level differences",
}


def _kernel(name, module, *, contract, devices, description, gates_take_device=True, coverage="", pdl_variant="") -> Candidate:
    """A candidate for one of our kernel modules (route, supported_hardware, build, covered), imported lazily."""

    def gate(fn):
        def call(device):
            args = (device,) if gates_take_device else ()
            return getattr(importlib.import_module(module), fn)(*args)

        return call

    return Candidate(
        name=name,
        route=LazyFunction(module, "route"),
        contract=contract,
        devices=devices,
        description=description,
        supported_hardware=gate("supported_hardware"),
        build=gate("build"),
        covered=LazyFunction(module, "covered"),
        origin=module,
        coverage=coverage,
        pdl_variant=pdl_variant,
    )


# Our kernels and the adapters of other kernels (aiter, its model) check their arguments with
# kernels._args.check_route_args, which refuses logits of column stride != 1 (every other column of a buffer, a
# transposed one) or row stride < E, and the kernels a bias of stride != 1: their gates decline those layouts (rows
# skipped and counted, not an error), and their coverage says so. torch-native reads any layout.
_LOGITS_LAYOUT = "logits of column stride 1 and row stride >= E only"
_KERNEL_LAYOUT = f"{_LOGITS_LAYOUT}, a bias of stride 1"


def _oracle_route(contract):
    def route(scores, bias, topk, renormalize, routed_scaling_factor, **groups):
        import oracle  # not at import: listing candidates loads no torch

        return oracle.route(
            scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract=contract, **groups
        )

    return route


register(
    Candidate(
        name="oracle",
        route=_oracle_route("aiter"),
        contract="aiter",
        description="the oracle itself, under the contract being checked (a self-check of the harness)",
        origin="oracle",
        contracts=("*",),
        route_for_contract=_oracle_route,
    )
)
register(
    Candidate(
        name="torch-native",
        route=LazyFunction("kernels.adapters.torch_native", "route"),
        contract="aiter",
        description="sigmoid + bias + torch.topk + gather + renormalize, as serving engines' fallback",
        expected_deviations={
            "aiter": dict(_TORCH_NATIVE_DEVIATIONS),
            "serial": {
                **_TORCH_NATIVE_DEVIATIONS,
                "tie_order": "torch.topk does not break ties to the lowest index",
                "sentinel_fallback": "torch.topk has no -1e30 sentinel and no expert-0 fallback",
            },
        },
        origin="kernels.adapters.torch_native",  # reads every layout through torch: its gate serves all
    )
)
register(
    Candidate(
        name="aiter-model",
        route=LazyFunction("kernels.adapters.aiter_model", "route"),
        contract="aiter",
        description="pure-torch behavioural model of AMD aiter's generic biased_grouped_topk",
        expected_deviations={"aiter": dict(_AITER_MODEL_DEVIATIONS)},
        # aiter reads the bias in the logits dtype: calls with an fp32 bias and bf16
        # logits would round the bias, so they are outside what aiter serves.
        covered=LazyFunction("kernels.adapters.aiter_model", "covered"),
        coverage="aiter reads the bias in the logits' dtype, so only calls whose bias has the logits' dtype are checked; "
                 f"{_LOGITS_LAYOUT}, as aiter's adapter takes them",
        origin="kernels.adapters.aiter_model",
    )
)
# radix4 follows the contract --contract names (kernels.radix4.MODEL_RULES; its covered gate is the union
# of what they serve, which every one of its libraries serves ungrouped).
_RADIX4_CONTRACTS = ("aiter", "kimi-k2", "glm4-moe", "dots1", "minimax-m2", "deepseek-v3", "deepseek-v3-reference",
                     "deepseek-v4", "deepseek-v4-flash")  # fmt: skip
_RADIX4_COVERAGE = ("radix4 serves up to 4,096 rows, logits bf16/fp16/fp32, any float bias, ungrouped (E, k) = (896, 16), "
                    "(384, 8), (224, 16), (256, 8), (160, 8), (128, 6), (256, 6), (384, 6), under the ungrouped model "
                    "contracts any E in 8..1024 with top-k up to min(16, E), and grouped (256, 8) with 8 groups keep 4 "
                    f"(deepseek-v3, deepseek-v3-reference); {_KERNEL_LAYOUT}")  # fmt: skip


def _radix4_router(name: str, pdl: bool):
    def route_for_contract(contract: str):
        def route(*args, **kwargs):
            return importlib.import_module("kernels.radix4").router(contract, pdl=pdl, name=name)(*args, **kwargs)

        route.__qualname__ = f"kernels.radix4.router({contract!r})"
        return route

    return route_for_contract


def _radix4(name: str, module: str, description: str, *, pdl: bool, pdl_variant: str = "") -> Candidate:
    base = _kernel(name, module, contract="aiter", devices=("cuda",), gates_take_device=False, coverage=_RADIX4_COVERAGE,
                   description=description, pdl_variant=pdl_variant)  # fmt: skip
    base.contracts = _RADIX4_CONTRACTS
    base.route_for_contract = _radix4_router(name, pdl)
    base.gate_takes_contract = True  # kernels.radix4.covered(..., contract=): the generic path is the model contracts'
    return base


register(_radix4("radix4", "kernels.radix4", "our radix-4 select kernel (CUDA warp32 / HIP wave64): aiter tie order "
                 "under contract aiter, lowest index under the model contracts", pdl=False, pdl_variant="radix4-pdl"))  # fmt: skip
register(_radix4("radix4-pdl", "kernels.radix4.pdl", "radix4 launched with programmatic dependent launch (CUDA sm_90+): "
                 "it starts while the kernel before it ends", pdl=True))  # fmt: skip
_RADIX4_SERIAL_COVERAGE = f"radix4-serial serves (E, k) = (896, 16), (384, 8), (224, 16) up to 4,096 rows, bf16 or fp32; {_KERNEL_LAYOUT}"
register(_kernel("radix4-serial", "kernels.radix4.serial", contract="serial", devices=("cuda",), gates_take_device=False,
                 coverage=_RADIX4_SERIAL_COVERAGE,
                 description="the radix-4 select kernel under the serial contract (CUDA), bit for bit the serial scan",
                 pdl_variant="radix4-serial-pdl"))
register(_kernel("radix4-serial-pdl", "kernels.radix4.serial_pdl", contract="serial", devices=("cuda",), gates_take_device=False,
                 coverage=_RADIX4_SERIAL_COVERAGE,
                 description="radix4-serial launched with programmatic dependent launch (CUDA sm_90+)"))
register(_kernel("serial", "kernels.serial.scan", contract="serial", devices=("cpu", "cuda"),
                 coverage=f"serial takes bf16 or fp32 logits and bias; {_KERNEL_LAYOUT}",
                 description="serial scan, one thread per row (host build on CPU, CUDA kernel on GPU)"))
register(_kernel("block-argmax", "kernels.serial.block_argmax", contract="serial", devices=("cuda",),
                 coverage=f"block-argmax takes up to 4,096 experts, bf16 or fp32 logits and bias; {_KERNEL_LAYOUT}",
                 description="block-parallel argmax, one block per row, lowest-index ties"))

# AMD aiter itself (ROCm, gfx942/gfx950), through kernels.adapters.aiter. Its
# ``available`` gate (hardware, then ``import aiter``) stands in the hardware
# slot so the one-line reason says which is missing; ``build`` makes one call
# so aiter's JIT compile happens before the check starts. The deviations are
# aiter's, the ones its behavioural model declares; ``--against aiter-model``
# compares the two with none declared (model drift).
register(
    Candidate(
        name="aiter",
        route=LazyFunction("kernels.adapters.aiter", "route"),
        contract="aiter",
        devices=("cuda",),
        description="AMD aiter's biased_grouped_topk, generic path (ROCm gfx942/gfx950; pip install amd-aiter)",
        supported_hardware=LazyFunction("kernels.adapters.aiter", "available"),
        build=LazyFunction("kernels.adapters.aiter", "build"),
        covered=LazyFunction("kernels.adapters.aiter", "covered"),
        coverage="aiter's generic path serves E a multiple of 32 above 32, top-k up to 64, up to its row limit, a bias of "
                 f"the logits' dtype; {_LOGITS_LAYOUT}",
        expected_deviations={"aiter": dict(_AITER_MODEL_DEVIATIONS)},
        origin="kernels.adapters.aiter",
    )
)
