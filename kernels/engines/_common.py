"""What every engine adapter shares: argument checks (grouped routing included) and gate helpers."""

from __future__ import annotations

import numbers

from .._args import check_route_args
from .._args import serves_layout_any_bias as layout_served  # every adapter's gate: what check_args takes
from ._locate import EngineUnavailable, root

__all__ = ["check_args", "describe_roots", "dtype_name", "empty_result", "gate", "layout_served", "torch_router_gates"]

FLOAT_DTYPES = ("bfloat16", "float16", "float32")


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def check_args(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group=None, topk_group=None,
               dtypes=FLOAT_DTYPES, bias_required=False) -> tuple[int, int, int, int]:  # fmt: skip
    """Validate a candidate call; return ``(M, E, num_expert_group, topk_group)`` (1, 1 when ungrouped).

    ``bias`` may be None (contracts without a bias) unless ``bias_required``.
    """
    import torch

    if bias is None:
        if bias_required:
            raise ValueError("bias=None: this engine's router always takes a correction bias; pass a bias of shape [E]")
        probe = torch.zeros(scores.shape[-1] if isinstance(scores, torch.Tensor) and scores.dim() == 2 else 1,
                            dtype=torch.float32, device=getattr(scores, "device", "cpu"))  # fmt: skip
    else:
        probe = bias
    M, E, _, _ = check_route_args(scores, probe, topk, renormalize, routed_scaling_factor, dtypes=dtypes,
                                  bias_dtypes=FLOAT_DTYPES, dtype_hint="pass bfloat16, float16 or float32",
                                  bias_contiguous=False)  # fmt: skip
    groups = 1 if num_expert_group is None else num_expert_group
    kept = 1 if topk_group is None else topk_group
    for name, value in (("num_expert_group", groups), ("topk_group", kept)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name}={value!r} is not a positive integer; pass 1 for ungrouped routing")
    if E % groups:
        raise ValueError(f"num_expert_group={groups} does not divide E={E}; pass a divisor of E (8 for DeepSeek-V3's 256)")
    if kept > groups:
        raise ValueError(f"topk_group={kept} is larger than num_expert_group={groups}; pass topk_group <= num_expert_group")
    if topk > kept * (E // groups):
        raise ValueError(f"topk={topk} is more than the {kept * (E // groups)} experts of {kept} kept groups; raise topk_group")
    return M, E, int(groups), int(kept)


def describe_roots(*keys: str) -> tuple[bool, str]:
    """``(True, "sglang 0.5.23 from installed sglang 0.5.23; ...")`` or ``(False, the first missing package)``."""
    parts = []
    for key in keys:
        try:
            parts.append(root(key).describe())
        except EngineUnavailable as exc:
            return False, str(exc)
    return True, "; ".join(parts)


def gate(load, detail) -> tuple[bool, str]:
    """Run ``load()`` (a loader or builder): ``(True, detail())``, or ``(False, one line)``; never raises."""
    try:
        load()
        return True, detail()
    except Exception as exc:  # noqa: BLE001 -- a gate reports, it does not raise
        text = str(exc).strip().splitlines()
        first = text[0] if text else ""
        return False, first if isinstance(exc, EngineUnavailable) else f"{type(exc).__name__}: {first}"


def torch_router_gates(engine: str, load):
    """``(supported_hardware, build, available)`` of an adapter that runs an engine's torch code.

    Such a router runs on any device torch does: the hardware gate only says
    which installed engine was found, and building is loading its file.
    """

    def supported_hardware() -> tuple[bool, str]:
        return describe_roots(engine)

    def build() -> None:
        load()

    def available() -> tuple[bool, str]:
        return gate(load, lambda: describe_roots(engine)[1])

    return supported_hardware, build, available


def empty_result(topk: int, device):
    """``(weights, ids)`` for an empty batch: the torch routers' ``view(0, -1)`` fails on 0 rows, and the
    engines' MoE layers never call them with none (SGLang's TopK returns an empty output first)."""
    import torch

    return torch.empty((0, topk), dtype=torch.float32, device=device), torch.empty((0, topk), dtype=torch.int32, device=device)
