"""Build a transformers router from a small config and feed it the logits unchanged (see the package docstring).

Per family, ``_CONFIG`` gives the config fields that set E and top-k (the
hidden size is E, so the identity projection maps the logits onto
themselves), and ``_CALL`` how one call sets the options and reads the
answer. The projection is bypassed, never emulated: ``_fed`` swaps the
modeling module's ``F`` for a namespace whose ``linear`` returns its input
(everything else is ``torch.nn.functional``) for the duration of a call, and
``_Passthrough`` replaces an ``nn.Linear`` submodule (keeping its ``weight``,
whose dtype some routers read). The caller's tensors are never written.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import threading
import types

import torch
from torch import nn

from ._table import MIN_TRANSFORMERS, Router

_LOCK = threading.Lock()  # _fed swaps a module global: one call at a time


def check_available(router: Router) -> tuple[bool, str]:
    try:
        import transformers
    except ImportError:
        return False, "transformers is not installed; pip install '.[models]' (transformers and safetensors)"
    version = tuple(int(p) for p in transformers.__version__.split(".")[:2] if p.isdigit())
    if version < tuple(int(p) for p in MIN_TRANSFORMERS.split(".")):
        return False, f"transformers {transformers.__version__} is older than {MIN_TRANSFORMERS}; pip install -U '.[models]'"
    try:
        module = _modeling(router)
        getattr(module, router.cls)
    except (ImportError, AttributeError) as exc:
        return False, f"transformers {transformers.__version__} has no {router.module}.{router.cls} ({exc})"
    return True, f"transformers {transformers.__version__} {router.module}.{router.cls}"


def _modeling(router: Router):
    return importlib.import_module(f"transformers.models.{router.module}.modeling_{router.module}")


class _Passthrough(nn.Module):
    """Stands in for a router's ``nn.Linear`` gate: returns its input, keeps the gate's ``weight`` (dtype checks)."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.weight = linear.weight

    def forward(self, x):
        return x


def _linear_passthrough(input, weight=None, bias=None):  # noqa: A002 - F.linear's own parameter name
    return input


@contextlib.contextmanager
def _fed(module):
    """The modeling module's ``F.linear`` returns its input, for one call."""
    original = module.__dict__.get("F")
    if original is None:
        yield
        return
    proxy = types.SimpleNamespace(**{k: getattr(original, k) for k in dir(original) if not k.startswith("__")})
    proxy.linear = _linear_passthrough
    with _LOCK:
        module.F = proxy
        try:
            yield
        finally:
            module.F = original


# family -> config fields (E and k); every config also gets hidden_size = E and one attention head
_CONFIG = {
    "deepseek-v4": lambda e, k: dict(num_local_experts=e, n_routed_experts=e, num_experts_per_tok=k),
    "llama4": lambda e, k: dict(num_local_experts=e, num_experts_per_tok=k),
    "glm4-moe": lambda e, k: dict(n_routed_experts=e, num_experts_per_tok=k),
    "kimi-k2": lambda e, k: dict(n_routed_experts=e, num_experts_per_tok=k, n_group=1, topk_group=1),
    "deepseek-v3": lambda e, k: dict(n_routed_experts=e, num_experts_per_tok=k, n_group=8, topk_group=4),
    "minimax-m2": lambda e, k: dict(num_local_experts=e, num_experts_per_tok=k),
    "qwen3-next": lambda e, k: dict(num_experts=e, num_experts_per_tok=k),
    "qwen2-moe": lambda e, k: dict(num_experts=e, num_experts_per_tok=k),
    "olmoe": lambda e, k: dict(num_experts=e, num_experts_per_tok=k),
    "dbrx": lambda e, k: dict(ffn_config=dict(moe_num_experts=e, moe_top_k=k)),
    "gemma4": lambda e, k: dict(num_experts=e, top_k_experts=k, enable_moe_block=True),
    "ernie4.5": lambda e, k: dict(num_experts=e, num_experts_per_tok=k),
    # LongCat's router covers n_routed_experts + zero_expert_num ids; the split does not change its routing
    "longcat-flash": lambda e, k: dict(n_routed_experts=e - e // 3, zero_expert_num=e // 3, num_experts_per_tok=k),
    "mistral4": lambda e, k: dict(n_routed_experts=e, num_local_experts=e, num_experts_per_tok=k),
    "deepseek-v2": lambda e, k: dict(n_routed_experts=e, num_experts_per_tok=k, topk_method="group_limited_greedy"),
    "hunyuan-moe": lambda e, k: dict(num_experts=e, moe_topk=k),
    "dots1": lambda e, k: dict(n_routed_experts=e, num_experts_per_tok=k),
    "jamba": lambda e, k: dict(num_experts=e, num_experts_per_tok=k),
    "granite-moe": lambda e, k: dict(num_local_experts=e, num_experts_per_tok=k),
    "qwen3-moe": lambda e, k: dict(num_experts=e, num_experts_per_tok=k),
    "mixtral": lambda e, k: dict(num_local_experts=e, num_experts_per_tok=k),
    "gpt-oss": lambda e, k: dict(num_local_experts=e, num_experts_per_tok=k),
}


def _config(router: Router, experts: int, topk: int):
    import transformers

    fields = dict(hidden_size=experts, num_attention_heads=1, num_key_value_heads=1, **_CONFIG[router.family](experts, topk))
    return getattr(transformers, router.config)(**fields)


def _llama4_router(cls):
    """Llama4Router is an ``nn.Linear`` whose forward calls ``super().forward``: a class between it and
    ``nn.Linear`` makes that call return the logits (the rest of its forward runs unchanged)."""

    class _PassthroughLinear(nn.Linear):
        def forward(self, x):
            return x

    return type("FedLlama4Router", (cls, _PassthroughLinear), {})


@functools.lru_cache(maxsize=64)
def _build(router: Router, experts: int, topk: int, device: str):
    module = _modeling(router)
    cls = getattr(module, router.cls)
    if router.family == "llama4":
        cls = _llama4_router(cls)
    config = _config(router, experts, topk)
    if router.family == "dbrx":  # the routing is DbrxFFN.route_tokens_to_experts(logits): called on its own fields
        instance = types.SimpleNamespace(top_k=topk, moe_normalize_expert_weights=config.ffn_config.moe_normalize_expert_weights)
        instance.route = functools.partial(cls.route_tokens_to_experts, instance)
        return module, instance
    instance = cls(config).to(device).eval()
    for name in ("layer", "wg", "classifier", "proj"):  # a gate held as an nn.Linear submodule
        if isinstance(getattr(instance, name, None), nn.Linear):
            setattr(instance, name, _Passthrough(getattr(instance, name)))
    if router.family == "gemma4":  # its RMSNorm and input scale sit before the projection: identity for the logits
        instance.norm = nn.Identity()
        instance.scalar_root_size = 1.0
    return module, instance


def _set_bias(instance, family: str, bias, experts: int, device) -> None:
    if family == "minimax-m2":
        return  # passed to forward as an argument
    target = instance.moe_statics.e_score_correction_bias if family == "ernie4.5" else getattr(instance, "e_score_correction_bias", None)
    if target is None:
        return
    with torch.no_grad():
        if bias is None:
            target.zero_()
        else:
            target.copy_(bias.to(device=device, dtype=target.dtype).view(target.shape))


def _call(family, instance, x, bias, renormalize, rsf, n_group, topk_group):
    """One call of the model's router on logits ``x``: ``(weights, ids)`` as its code returns them."""
    for attr, value in (("norm_topk_prob", renormalize), ("routed_scaling_factor", rsf), ("num_group", n_group), ("topk_group", topk_group)):
        if hasattr(instance, attr):
            setattr(instance, attr, value)
    if family == "dbrx":
        instance.moe_normalize_expert_weights = 1.0 if renormalize else None
        return instance.route(x)
    if family == "llama4":
        scores, _ = instance(x)  # dense [M, E]: sig(chosen logit), sig(-inf) = 0 elsewhere
        ids = torch.topk(x, instance.top_k, dim=1).indices  # the same call on the same logits as its forward
        return scores.gather(1, ids), ids
    if family == "gemma4":
        _, weights, ids = instance(x)
        return weights, ids
    if family == "minimax-m2":
        _, weights, ids = instance(x, bias.float() if bias is not None else torch.zeros(x.shape[1], device=x.device))
        return weights, ids
    _, weights, ids = instance(x)
    return weights, ids


def _set_expert_scale(instance, family: str, expert_scale, experts: int, device) -> None:
    """Gemma 4's ``per_expert_scale`` parameter: the call's scale, or the model's initial value (ones) when none is
    given (the router is cached between calls, so every call sets it)."""
    if family != "gemma4":
        if expert_scale is not None:
            raise ValueError(f"expert_scale: {family}'s router has no per-expert weight scale; leave it out")
        return
    with torch.no_grad():
        if expert_scale is None:
            instance.per_expert_scale.fill_(1.0)
        else:
            if tuple(expert_scale.shape) != (experts,):
                raise ValueError(f"expert_scale.shape={tuple(expert_scale.shape)} must be [{experts}] (one weight scale per expert)")
            instance.per_expert_scale.copy_(expert_scale.to(device=device, dtype=instance.per_expert_scale.dtype))


def make_route(router: Router):
    def route(scores, bias, topk, renormalize=True, routed_scaling_factor=1.0, *, num_expert_group=None, topk_group=None,
              expert_scale=None):  # fmt: skip
        experts = scores.shape[1]
        module, instance = _build(router, experts, topk, str(scores.device))
        _set_bias(instance, router.family, bias, experts, scores.device)
        _set_expert_scale(instance, router.family, expert_scale, experts, scores.device)
        # the routers reshape with .view: a row-strided, column-strided or transposed input needs its own contiguous
        # copy (a plain clone keeps a transposed tensor's strides)
        x = scores.clone(memory_format=torch.contiguous_format)
        # no autograd graph unless the caller differentiates (the backward check passes logits that require grad)
        with torch.set_grad_enabled(scores.requires_grad), _fed(module):
            weights, ids = _call(router.family, instance, x, bias, bool(renormalize), float(routed_scaling_factor),
                                 num_expert_group or 1, topk_group or 1)  # fmt: skip
        return weights.float(), ids.to(torch.int32)

    route.__qualname__ = f"route[{router.family}]"
    return route
