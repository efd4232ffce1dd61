"""Adapters that call the serving engines' own routers: SGLang, vLLM, lmdeploy, FlashInfer.

Every adapter finds the engine's files where pip installed them (or in a
directory named with ``set_engine_path`` / ``ROUTER_ENGINE_PATH``) and runs
the engine's own code: torch functions loaded from the installed source file
(``_load``: the engine's package is never imported), CUDA kernels compiled
from the installed CUDA source through a small C shim of ours (``_cuda``).
No engine code is copied into this repository.

=====================  ==================================  ==========================  ===========
adapter                module: route functions             engine files                devices
=====================  ==================================  ==========================  ===========
sglang-torch           sglang_torch: route,                sglang 0.5.23               cpu, cuda
                       route_as_served, route_compiled
vllm-torch             vllm_torch: route, route_compiled   vllm 0.33.0                 cpu, cuda
lmdeploy-torch         lmdeploy_torch: route               lmdeploy 0.18.0             cpu, cuda
sglang-radix           sglang_radix: route (sorted),       sglang 0.5.23,              cuda sm_90+
                       route_unsorted                      apache-tvm-ffi 0.1.11
sglang-triton          sglang_triton: route                sglang 0.5.23, triton       cuda
flashinfer-noaux       flashinfer_noaux: route,            flashinfer-python 0.7.2,    cuda sm_89+
                       route_native_dtype                  apache-tvm-ffi 0.1.11
=====================  ==================================  ==========================  ===========

Each module has ``supported_hardware()``, ``build()`` (CUDA ones: ``build(arch=)``),
``available() -> (ok, why)`` (never raises; the reason names the missing
package, version or file and the fix), ``bench_launch(...)`` (``route``'s
arguments; returns the launch ``contracts bench`` times: what the engine runs
per forward, with what it prepares at load done once in the call; see
docs/engines.md, "What bench times") and ``covered(rows=, experts=, topk=,
dtype=, bias_dtype=, num_expert_group=1, topk_group=1, ...)``. Every route
is ``fn(scores, bias, topk, renormalize, routed_scaling_factor, *,
num_expert_group=None, topk_group=None) -> (weights fp32 [M, k], ids int32 [M, k])``;
``bias`` may be None. The module docstrings say what each engine computes
and which arguments follow what the engine does in serving.

Like the rest of ``kernels/``, nothing here imports ``oracle`` or ``contracts``.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._locate import ENV_ENGINE_PATH, PACKAGES, EngineUnavailable, engine_paths, set_engine_path

__all__ = ["ADAPTERS", "ENV_ENGINE_PATH", "PACKAGES", "Adapter", "EngineUnavailable", "engine_paths", "set_engine_path"]


@dataclass(frozen=True)
class Adapter:
    name: str  # the candidate name the harness registers
    module: str  # kernels.engines.<module>
    route: str  # the route function in that module
    packages: tuple[str, ...]  # PACKAGES keys whose files it reads
    devices: tuple[str, ...]
    # The module's bench path: ``bench(scores, bias, topk, renormalize, rsf) -> launch``, the call preparing once
    # what the engine prepares at load, ``launch()`` making the launches the engine makes per forward.
    bench: str = "bench_launch"


ADAPTERS: dict[str, Adapter] = {
    a.name: a
    for a in (
        Adapter("sglang-torch", "kernels.engines.sglang_torch", "route", ("sglang",), ("cpu", "cuda")),
        Adapter("vllm-torch", "kernels.engines.vllm_torch", "route", ("vllm",), ("cpu", "cuda")),
        Adapter("lmdeploy-torch", "kernels.engines.lmdeploy_torch", "route", ("lmdeploy",), ("cpu", "cuda")),
        Adapter("sglang-radix", "kernels.engines.sglang_radix", "route", ("sglang", "tvm-ffi"), ("cuda",)),
        Adapter("sglang-radix-unsorted", "kernels.engines.sglang_radix", "route_unsorted", ("sglang", "tvm-ffi"), ("cuda",),
                "bench_launch_unsorted"),
        Adapter("sglang-triton", "kernels.engines.sglang_triton", "route", ("sglang",), ("cuda",)),
        Adapter("flashinfer-noaux", "kernels.engines.flashinfer_noaux", "route", ("flashinfer", "tvm-ffi"), ("cuda",)),
    )
}
