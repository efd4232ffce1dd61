"""``lmdeploy-torch``: lmdeploy 0.18.0's default noaux_tc router, ``DefaultRouterNoauxTCImpl``, from the installed file.

Source: ``lmdeploy/pytorch/backends/default/moe_router.py`` (and its base
class from ``lmdeploy/pytorch/backends/moe_router.py``) of the installed
``lmdeploy`` distribution (or ``--engine-path lmdeploy=DIR``), loaded by
``kernels.engines._load`` without importing ``lmdeploy``.

Which path this is: lmdeploy's CUDA backend builds
``TritonRouterNoauxTCImpl``, which uses its own Triton kernels only for a
power-of-two expert count (and a fused single-group kernel only for 192/8);
Kimi-K3 (896) and Kimi-K2 (384) fall through to this class's ``forward``,
the torch code below, on CUDA as on every other backend. Called as lmdeploy
builds it: ``scoring_func="sigmoid"``, ``n_group``/``topk_group`` as given
(1/1 for Kimi), ``router_n_groups=-1``::

    scores = x.sigmoid()                              # logits dtype: bf16 logits -> bf16 sigmoid
    choice = scores + bias[None]                      # torch promotion
    group score = top-2 sum per group; keep topk_group groups (torch.topk sorted=False)
    choice of the other groups -> 0.0                 # 0.0, like DeepSeek's reference (SGLang and vLLM use -inf)
    ids = torch.topk(choice, topk, sorted=False).indices
    w = scores.gather(ids); w = w / (w.sum() + 1e-20) if renormalize; w = w * routed_scaling_factor

The weights come out in the logits' dtype (bf16 for bf16 logits, the sum
and division too) and the ids as int64; the adapter widens the weights to
fp32 (exact) and narrows the ids to int32. The logits and bias are passed as
given. lmdeploy has no router without a bias here: ``bias=None`` is a
ValueError. No ``torch.compile`` decorator to decide about.
"""

from __future__ import annotations

import functools

from ._common import check_args, empty_result, layout_served, torch_router_gates
from ._load import load_definitions
from ._locate import locate

__all__ = ["FILES", "available", "bench_launch", "build", "covered", "load", "route", "supported_hardware"]

ENGINE = "lmdeploy"
FILES = {"impl": "lmdeploy/pytorch/backends/default/moe_router.py", "base": "lmdeploy/pytorch/backends/moe_router.py"}


@functools.lru_cache(maxsize=2)
def _load(impl_path: str, base_path: str) -> type:
    base = load_definitions(base_path, ["RouterNoauxTCImpl"], decorators={"abstractmethod": "keep"},
                            module_name="router_contracts_engines.lmdeploy_moe_router")  # fmt: skip
    impl = load_definitions(impl_path, ["DefaultRouterNoauxTCImpl"], provide={"RouterNoauxTCImpl": base["RouterNoauxTCImpl"]},
                            decorators={"functools.lru_cache": "keep"},
                            module_name="router_contracts_engines.lmdeploy_default_moe_router")  # fmt: skip
    return impl["DefaultRouterNoauxTCImpl"]


def load() -> type:
    """lmdeploy's ``DefaultRouterNoauxTCImpl`` class (EngineUnavailable / LoadError when missing)."""
    return _load(str(locate(ENGINE, FILES["impl"])), str(locate(ENGINE, FILES["base"])))


supported_hardware, build, available = torch_router_gates(ENGINE, load)


def covered(*, bias_dtype="unknown", **shape) -> bool:
    """Every shape, but only with a bias (lmdeploy's noaux_tc router has no unbiased form), in the layouts
    ``check_args`` takes (``_common.layout_served``)."""
    return bias_dtype is not None and layout_served(**shape)


def _impl(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group):
    M, E, groups, kept = check_args(scores, bias, topk, renormalize, routed_scaling_factor, bias_required=True,
                                    num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    impl = load()(scoring_func="sigmoid", top_k=int(topk), n_group=groups, topk_group=kept, n_routed_experts=E,
                  routed_scaling_factor=float(routed_scaling_factor), renormalize=renormalize, router_n_groups=-1)  # fmt: skip
    return M, impl


def bench_launch(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None,
                 topk_group=None):  # fmt: skip
    """What lmdeploy runs per forward, as a launch: the router object built once (lmdeploy builds it with the model),
    then ``impl.forward(logits, bias)``; without ``route``'s widening of its outputs to fp32 / int32 for the harness."""
    _, impl = _impl(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group)
    return lambda: impl.forward(scores, bias)


def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None):
    """lmdeploy's default noaux_tc router on the logits and bias as given; ``(weights fp32, ids int32)``."""
    import torch

    M, *_ = check_args(scores, bias, topk, renormalize, routed_scaling_factor, bias_required=True,
                       num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    if M == 0:
        return empty_result(topk, scores.device)
    _, impl = _impl(scores, bias, topk, renormalize, routed_scaling_factor, num_expert_group, topk_group)
    weights, ids = impl.forward(scores, bias)
    return weights.to(torch.float32), ids.to(torch.int32)
