"""``sglang-torch``: SGLang 0.5.23's torch router, ``biased_grouped_topk_impl``, called from the installed file.

Source: ``sglang/srt/layers/moe/topk.py`` of the installed ``sglang``
distribution (or ``--engine-path sglang=DIR``), loaded by
``kernels.engines._load`` without importing ``sglang``. What it computes,
in the engine's own code (``x`` the logits, in their dtype)::

    scores = x.sigmoid()                        # in the logits dtype: bf16 logits -> bf16 sigmoid
    choice = scores + bias                      # torch promotion: bf16 + fp32 bias -> fp32, bf16 + bf16 -> bf16
    group score = sum of the 2 largest choice values per group; keep topk_group groups (torch.topk sorted=False)
    choice of the other groups -> -inf
    ids = torch.topk(choice, topk, sorted=False).indices      # ties and order: whatever torch.topk does
    w = scores.gather(ids); w = w / (w.sum(dtype=fp32) + 1e-20) if renormalize; w *= routed_scaling_factor
    -> (w.float(), ids.int())

With ``bias=None`` it calls SGLang's unbiased ``grouped_topk_gpu``
(``scoring_func="sigmoid"``: group score = the group's max, others masked
with 0.0) instead.

Which SGLang path this is: Kimi-K3 (896/16) and Kimi-K2 (384/8) are served
with ``use_grouped_topk=True, num_expert_group=1, topk_group=1``; on CUDA
``biased_grouped_topk_gpu`` then sends them to a kernel (the Triton/radix
router, ``sglang-triton`` / ``sglang-radix``; FlashInfer for DeepSeek-V3),
and this torch function is the path of every other case: CPU and other
platforms, per-token (dynamic) bias, shapes no kernel covers. Arguments:

- ``route``: the harness's logits and bias as given, so bf16 cases show the
  engine's bf16 sigmoid. ``routed_scaling_factor`` is applied in the router
  (``apply_routed_scaling_factor_on_output=True``; SGLang may instead fold
  it into the MoE output, which the harness cannot see).
- ``route_as_served``: as SGLang's Kimi-K3 model feeds it: fp32 router
  logits (its fused front GEMM writes fp32) and an fp32 bias (converted
  once after loading), so the sigmoid and ranking are fp32.
- ``route_compiled``: the function under its published decorator,
  ``torch.compile(dynamic=True, backend="inductor")`` (SGLang's
  ``get_compiler_backend()`` on CUDA and CPU). ``route`` and
  ``route_as_served`` strip that decorator (eager): the compiled version
  fuses the bf16 arithmetic differently and routes differently on bf16 near
  ties (docs/contracts.md#how-other-routers-differ).

Measured on a CPU (torch 2.13, tests/test_engines_torch.py): bf16 logits
give a bf16 sigmoid (ids differ from an fp32 sigmoid on random rows); a zero
sum gives weights 0 (the 1e-20), not NaN; ``sorted=False`` output order.

Gates: ``available()`` (the file is found and loads), ``covered(**shape)``
(every shape: torch handles any; logits of column stride 1 and row stride
>= E, as ``check_args`` takes them), any device torch runs on.
"""

from __future__ import annotations

import functools

from ._common import check_args, empty_result, layout_served, torch_router_gates
from ._load import load_definitions
from ._locate import locate

__all__ = ["FILE", "available", "bench_launch", "build", "covered", "load", "route", "route_as_served", "route_compiled",
           "supported_hardware"]  # fmt: skip

ENGINE = "sglang"
FILE = "sglang/srt/layers/moe/topk.py"
FUNCTIONS = ("biased_grouped_topk_impl", "grouped_topk_gpu")


@functools.lru_cache(maxsize=4)
def _load(path: str, compiled: bool) -> dict:
    provide = {}
    if compiled:
        # The decorator's own arguments: backend=get_compiler_backend(), disable=_is_npu.
        provide = {"get_compiler_backend": lambda mode=None: "inductor", "_is_npu": False}
    return load_definitions(path, FUNCTIONS, provide=provide,
                            decorators={"torch.compile": "keep" if compiled else "strip"},
                            module_name="router_contracts_engines.sglang_topk")  # fmt: skip


def load(*, compiled: bool = False) -> dict:
    """The namespace holding SGLang's functions (EngineUnavailable / LoadError when missing)."""
    return _load(str(locate(ENGINE, FILE)), compiled)


supported_hardware, build, available = torch_router_gates(ENGINE, load)


def covered(**shape) -> bool:
    """Every shape (torch handles any), in the layouts ``check_args`` takes (``_common.layout_served``)."""
    return layout_served(**shape)


def _route(ns, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group):
    M, _, groups, kept = check_args(scores, bias, topk, renormalize, routed_scaling_factor,
                                    num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    if M == 0:
        return empty_result(topk, scores.device)
    rs = float(routed_scaling_factor)
    if bias is None:
        return ns["grouped_topk_gpu"](scores, scores, topk, renormalize, groups, kept, num_fused_shared_experts=0,
                                      routed_scaling_factor=rs, apply_routed_scaling_factor_on_output=True,
                                      scoring_func="sigmoid")  # fmt: skip
    # hidden_states is only checked for its row count: the logits stand in for it.
    return ns["biased_grouped_topk_impl"](scores, scores, bias, topk, renormalize, groups, kept,
                                          num_fused_shared_experts=0, routed_scaling_factor=rs,
                                          apply_routed_scaling_factor_on_output=True)  # fmt: skip


def bench_launch(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                 topk_group=None):  # fmt: skip
    """What SGLang runs per forward, as a launch: its eager router (``route``) on the logits and bias as given;
    nothing is prepared at load (the torch router reads the bias as the model keeps it)."""
    ns = load()
    return lambda: _route(ns, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group)


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None,
          compiled=False):  # fmt: skip
    """SGLang's torch router on the logits and bias as given; ``(weights fp32, ids int32)``. Eager, or with
    ``compiled`` (``route_compiled``) the published ``torch.compile(dynamic=True)`` version (compiles on first
    call: seconds)."""
    return _route(load(compiled=compiled), scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group,
                  topk_group)  # fmt: skip


def route_as_served(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                    topk_group=None):  # fmt: skip
    """As SGLang's Kimi-K3 model calls it: fp32 logits and fp32 bias, then the eager router."""
    bias = None if bias is None else bias.float()
    return route(scores.float(), bias, topk, renormalize, routed_scaling_factor, num_expert_group=num_expert_group,
                 topk_group=topk_group)  # fmt: skip


route_compiled = functools.partial(route, compiled=True)
