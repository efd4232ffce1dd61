"""The trainers' own routers, from the installed packages, as routing functions: Megatron-core and Transformer Engine.

``route_for(family)`` runs megatron-core's ``topk_routing_with_score_function`` (the unfused torch path a Megatron
trainer runs, megatron/core/transformer/moe/moe_utils.py) with the family's router settings (``FAMILIES``: score
function, pre-/post-softmax, groups); ``te_route_for(family)`` runs Transformer Engine's fused kernel
``transformer_engine.pytorch.router.fused_topk_with_score_function`` with the same settings (CUDA only; TE cannot be
installed on this project's machines: its plumbing is tested against a stand-in module, ``module=``).

Both return a dense answer, ``(probs [tokens, E], routing_map [tokens, E] bool)``, with no column order.
``dense_route_for`` (the ``mcore-<family>`` candidates' route) answers it so, the probs as fp32: the harness reads it
(a malformed map is a validity finding there). ``route_for`` and ``te_route_for`` convert it with ``to_topk``: the
``k`` experts of the map, **by weight descending, equal weights by expert id ascending**, and the probs at those
experts as fp32 (the contracts the mcore candidates claim compare ids as a set: ``output_order = "any"``). A map
without exactly ``k`` experts in a row raises there.

Every route is ``fn(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group=None, topk_group=None)
-> (weights fp32 [M, k], ids int32 [M, k])`` (``dense_route_for``'s: ``(probs fp32 [M, E], routing_map bool [M, E])``). ``renormalize`` is not an argument of Megatron's routing: its sigmoid
router always divides by ``sum + 1e-20`` (when k > 1), its post-softmax router's weights are a softmax over the k
chosen; the call's flag is not passed on (the contract decides whether that is a mismatch). No megatron or TE code is
copied here; ``available()`` says why not in one line. Like the rest of ``kernels/``, nothing here imports ``oracle``
or ``contracts``.
"""

from __future__ import annotations

import importlib
import warnings
from dataclasses import dataclass

__all__ = ["FAMILIES", "MCORE_VERSION", "TE_MODULE", "TrainerRouter", "available", "dense_route_for", "route_for", "te_available", "te_route_for",
           "to_topk"]

MCORE_VERSION = "0.16.1"  # the release the mcore contracts cite (requirements: the trainers extra)
_MOE_UTILS = "megatron.core.transformer.moe.moe_utils"
TE_MODULE = "transformer_engine.pytorch.router"


@dataclass(frozen=True)
class TrainerRouter:
    family: str  # the inference contract of the family (oracle's built-in of that name)
    contract: str  # the mcore contract its arithmetic follows
    score_function: str  # "sigmoid" or "softmax" (Megatron's moe_router_score_function)
    use_pre_softmax: bool  # moe_router_pre_softmax
    experts: int  # the shape a candidate is checked at by default (its mcore contract's)
    topk: int


# family -> its Megatron router settings (the model's Megatron config: DeepSeek-V3 and Kimi-K2 route with sigmoid and
# an expert bias, DeepSeek-V3 with 8 groups, 4 kept; Qwen3-MoE and Mixtral with post-softmax, Megatron's default)
FAMILIES: dict[str, TrainerRouter] = {
    r.family: r
    for r in (
        TrainerRouter("deepseek-v3", "mcore-sigmoid", "sigmoid", False, 256, 8),
        TrainerRouter("kimi-k2", "mcore-sigmoid-ungrouped", "sigmoid", False, 384, 8),
        TrainerRouter("qwen3-moe", "mcore-softmax", "softmax", False, 128, 8),
        TrainerRouter("mixtral", "mcore-softmax", "softmax", False, 128, 8),
    )
}


def _import_quietly(name: str):
    with warnings.catch_warnings():  # megatron warns at import that TE and Apex are missing (it falls back to torch)
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def available() -> tuple[bool, str]:
    """``(True, what runs)`` or ``(False, why not, with the fix)`` for the megatron-core routers; never raises."""
    try:
        from importlib.metadata import PackageNotFoundError, version

        installed = version("megatron-core")
    except PackageNotFoundError:
        return False, f"megatron-core is not installed; pip install --no-deps 'megatron-core=={MCORE_VERSION}' (the trainers extra)"
    try:
        module = _import_quietly(_MOE_UTILS)
        module.topk_routing_with_score_function  # noqa: B018 - present in the installed release?
    except Exception as exc:  # an import error of its own dependencies, or a release without the function
        return False, f"megatron-core {installed}: {_MOE_UTILS}.topk_routing_with_score_function cannot be used ({type(exc).__name__}: {exc})"
    note = "" if installed == MCORE_VERSION else f" (the mcore contracts cite {MCORE_VERSION})"
    return True, f"megatron-core {installed} {_MOE_UTILS}.topk_routing_with_score_function{note}"


def te_available(module: str = TE_MODULE) -> tuple[bool, str]:
    """``(True, what runs)`` or ``(False, why not)`` for Transformer Engine's fused router; never raises."""
    try:
        fn = getattr(_import_quietly(module), "fused_topk_with_score_function")
    except Exception as exc:
        return False, (f"Transformer Engine is not installed ({module}: {type(exc).__name__}); it is a 276 MB CUDA wheel that "
                       "this project's machines cannot install: te-fused is not verified here (docs/training.md)")
    return True, f"{module}.{fn.__name__}"


def to_topk(probs, routing_map, topk: int):
    """``(weights fp32 [M, k], ids int32 [M, k])`` from a dense answer: the map's experts by weight descending, equal
    weights by expert id ascending."""
    import torch

    counts = routing_map.sum(dim=1)
    if routing_map.shape != probs.shape or bool((counts != topk).any()):
        raise ValueError(f"routing_map must mark exactly topk={topk} experts in each row (got {sorted(set(counts.tolist()))[:4]})")
    members = torch.sort(routing_map.to(torch.int8), dim=1, descending=True, stable=True).indices[:, :topk]  # ids ascending
    weights = probs.gather(1, members).float()
    order = torch.sort(weights, dim=1, descending=True, stable=True).indices  # equal weights keep ids ascending
    return weights.gather(1, order).contiguous(), members.gather(1, order).to(torch.int32).contiguous()


def _settings(router: TrainerRouter, bias, topk, routed_scaling_factor, num_expert_group, topk_group) -> dict:
    grouped = num_expert_group is not None and num_expert_group > 1
    return dict(
        topk=topk,
        use_pre_softmax=router.use_pre_softmax,
        num_groups=num_expert_group if grouped else None,
        group_topk=topk_group if grouped else None,
        scaling_factor=float(routed_scaling_factor),
        score_function=router.score_function,
        expert_bias=bias if router.score_function == "sigmoid" else None,
    )


def _make(router: TrainerRouter, fn, name: str, dense: bool = False):
    def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None):
        import torch

        # Megatron's router views its logits as [tokens, E] and writes nothing; a copy keeps the caller's tensor whole
        logits = scores.clone(memory_format=torch.contiguous_format)
        # no autograd graph unless the caller differentiates (the backward check passes logits that require grad)
        with torch.set_grad_enabled(scores.requires_grad):
            probs, routing_map = fn(logits, **_settings(router, bias, topk, routed_scaling_factor, num_expert_group, topk_group))
        if dense:  # as the trainer's dispatcher gets it; the probs in fp32, the weights' dtype the harness asks for
            return probs.float(), routing_map
        return to_topk(probs, routing_map, topk)

    route.__qualname__ = name
    return route


def route_for(family: str, *, dense: bool = False):
    """megatron-core's routing of ``family`` (megatron is imported on the first call); ``dense``: its answer as it
    gives it, ``(probs fp32 [M, E], routing_map bool [M, E])``, not read into ``[M, k]`` here."""
    router = FAMILIES[family]
    state = {}

    def fn(logits, **kwargs):
        if "f" not in state:
            state["f"] = _import_quietly(_MOE_UTILS).topk_routing_with_score_function
        return state["f"](logits, **kwargs)

    return _make(router, fn, f"route_for({family!r}{', dense=True' if dense else ''})", dense)


def dense_route_for(family: str):
    """``route_for(family, dense=True)``: the ``mcore-<family>`` candidates' route (the harness reads a dense answer as
    a set of k experts, a malformed map as a validity finding: contracts/compare/dense.py)."""
    return route_for(family, dense=True)


def te_route_for(family: str, *, module: str = TE_MODULE):
    """Transformer Engine's fused routing of ``family`` from ``module`` (a stand-in's name in the tests)."""
    router = FAMILIES[family]
    state = {}

    def fn(logits, **kwargs):
        if "f" not in state:
            state["f"] = _import_quietly(module).fused_topk_with_score_function
        return state["f"](logits=logits, **kwargs)

    return _make(router, fn, f"te_route_for({family!r})")
