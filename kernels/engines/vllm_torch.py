"""``vllm-torch``: vLLM 0.33.0's torch routers, ``fused_topk_bias`` (its torch path) and ``grouped_topk``.

Sources: ``vllm/model_executor/layers/fused_moe/router/fused_topk_bias_router.py``
and ``grouped_topk_router.py`` of the installed ``vllm`` distribution (or
``--engine-path vllm=DIR``), loaded by ``kernels.engines._load`` without
importing ``vllm`` (which needs its compiled ``vllm._C`` and a GPU runtime).

Which function serves which call, as vLLM's ``create_fused_moe_router``
decides: one group (Kimi-K3 896/16, Kimi-K2 384/8; ``num_expert_group=1``
and ``topk_group=1`` are degenerate grouping) goes to
``FusedTopKBiasRouter`` -> ``fused_topk_bias``; real groups (DeepSeek-V3)
go to ``GroupedTopKRouter`` -> ``grouped_topk``. Both have a compiled CUDA
op in front of their torch code; the stand-ins pick the torch code:

- ``fused_topk_bias``: on CUDA sigmoid routing runs ``ops.topk_sigmoid``
  (vllm._C). Its torch path is the branch vLLM takes on ROCm with aiter's
  fused MoE enabled and no aiter kernel for the shape; the stand-ins say
  exactly that (``rocm_aiter_ops.is_fused_moe_enabled() -> True``,
  ``_aiter_can_use_biased_grouped_topk -> False``). The CUDA/aiter ops are
  stand-ins that raise if reached.
- ``grouped_topk``: ``envs.VLLM_USE_FUSED_MOE_GROUPED_TOPK`` is False in the
  stand-in ``envs`` (vLLM's default is True on CUDA, which calls
  ``ops.grouped_topk``); ``VLLM_BATCH_INVARIANT`` is False (vLLM's default),
  so ``torch.topk(sorted=False)``.

What the torch code does (``x`` the logits, in their dtype)::

    scores = x.sigmoid()                        # logits dtype: bf16 logits -> bf16 sigmoid
    choice = scores + bias                      # torch promotion (bf16 + fp32 -> fp32)
    [grouped: top-2 sum per group, keep topk_group groups, others -> -inf]
    ids = torch.topk(choice, topk, sorted=False).indices
    w = scores.gather(ids); w = w / w.sum()  if renormalize   # the raw sum: a zero sum gives NaN weights
    w = w.float(); w *= routed_scaling_factor if it is not 1.0

``route`` passes the harness's logits and bias as given and the harness's
``routed_scaling_factor`` to the function (``FusedTopKBiasRouter`` does the
same). ``route_compiled`` keeps ``grouped_topk``'s published decorator,
``torch.compile(dynamic=True, backend="inductor",
options={"graph_partition": False})`` (vLLM's ``simple_compile_backend`` on
CUDA and ``maybe_disable_graph_partition`` on torch >= 2.9);
``fused_topk_bias`` has no decorator. Without a bias, ``fused_topk_bias``'s
torch path ranks the sigmoid alone.

Measured on a CPU (tests/test_engines_torch.py): bf16 sigmoid, a zero
sum -> NaN weights, ``sorted=False`` output order.
"""

from __future__ import annotations

import functools

from ._common import check_args, empty_result, layout_served, torch_router_gates
from ._load import load_definitions, stand_in
from ._locate import locate

__all__ = ["FILES", "available", "bench_launch", "build", "covered", "load", "route", "route_compiled", "supported_hardware"]

ENGINE = "vllm"
ROUTER = "vllm/model_executor/layers/fused_moe/router"
FILES = {"fused_topk_bias": f"{ROUTER}/fused_topk_bias_router.py", "grouped_topk": f"{ROUTER}/grouped_topk_router.py"}


def _compiled_op(name: str):
    def call(*_args, **_kwargs):
        raise RuntimeError(f"{name} is vLLM's compiled op (vllm._C / aiter); the adapter's stand-ins select the torch path")

    call.__name__ = name
    return call


def _envs():
    return stand_in(VLLM_BATCH_INVARIANT=False, VLLM_USE_FUSED_MOE_GROUPED_TOPK=False, VLLM_MOE_SKIP_PADDING=False)


@functools.lru_cache(maxsize=4)
def _load(bias_path: str, grouped_path: str, compiled: bool) -> dict:
    ops = ("vllm_topk_softmax", "vllm_topk_sigmoid", "vllm_topk_softplus_sqrt", "dsv4_topk")
    bias_ns = load_definitions(
        bias_path, ["fused_topk_bias"], module_name="router_contracts_engines.vllm_fused_topk_bias",
        provide={
            "envs": _envs(),
            "rocm_aiter_ops": stand_in(is_fused_moe_enabled=lambda: True, biased_grouped_topk=_compiled_op("aiter")),
            "_aiter_get_num_expert_group": lambda num_experts: 1,
            "_aiter_can_use_biased_grouped_topk": lambda num_experts, topk: False,
            "_get_padding_mask": lambda num_tokens: None,
            "can_use_dsv4_topk": lambda *args, **kwargs: False,
            **{name: _compiled_op(name) for name in ops},
        },
    )  # fmt: skip
    platform = stand_in(simple_compile_backend="inductor", is_cuda=lambda: False, is_xpu=lambda: False)
    grouped_ns = load_definitions(
        grouped_path, ["grouped_topk"], module_name="router_contracts_engines.vllm_grouped_topk",
        decorators={"torch.compile": "keep" if compiled else "strip"},
        provide={
            "envs": _envs(),
            "current_platform": platform,
            "fused_grouped_topk": _compiled_op("ops.grouped_topk"),
            "maybe_disable_graph_partition": lambda backend: {"graph_partition": False} if backend == "inductor" else {},
        },
    )  # fmt: skip
    return {"fused_topk_bias": bias_ns["fused_topk_bias"], "grouped_topk": grouped_ns["grouped_topk"]}


def load(*, compiled: bool = False) -> dict:
    """``{"fused_topk_bias": fn, "grouped_topk": fn}`` (EngineUnavailable / LoadError when missing)."""
    return _load(str(locate(ENGINE, FILES["fused_topk_bias"])), str(locate(ENGINE, FILES["grouped_topk"])), compiled)


supported_hardware, build, available = torch_router_gates(ENGINE, load)


def covered(**shape) -> bool:
    """Every shape (torch handles any), in the layouts ``check_args`` takes (``_common.layout_served``)."""
    return layout_served(**shape)


def _route(fns, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group):
    M, _, groups, kept = check_args(scores, bias, topk, renormalize, routed_scaling_factor,
                                    num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    if M == 0:
        return empty_result(topk, scores.device)
    rs = float(routed_scaling_factor)
    if groups == 1 and kept == 1:
        return fns["fused_topk_bias"](scores, scores, "sigmoid", bias, topk, renormalize, routed_scaling_factor=rs)
    return fns["grouped_topk"](scores, scores, topk, renormalize, num_expert_group=groups, topk_group=kept,
                               scoring_func="sigmoid", routed_scaling_factor=rs, e_score_correction_bias=bias)  # fmt: skip


def bench_launch(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                 topk_group=None):  # fmt: skip
    """What vLLM runs per forward, as a launch: its eager router (``route``) on the logits and bias as given;
    nothing is prepared at load."""
    fns = load()
    return lambda: _route(fns, scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group)


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None,
          compiled=False):  # fmt: skip
    """vLLM's torch router on the logits and bias as given; ``(weights fp32, ids int32)``. Eager, or with
    ``compiled`` (``route_compiled``) ``grouped_topk`` under its published ``torch.compile`` (grouped calls only
    differ)."""
    return _route(load(compiled=compiled), scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group,
                  topk_group)  # fmt: skip


route_compiled = functools.partial(route, compiled=True)
