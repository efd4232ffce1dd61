"""Argument checks for the routing API: one line per argument, each error
names the argument, its value and the fix."""

from __future__ import annotations

import math

import torch

__all__ = ["FIELD_RANGES", "LOGIT_DTYPES", "RoutingArgumentError", "check_expert_scale", "check_route_args", "resolve_groups"]

# Sane ranges of a contract's numeric fields (inclusive), so that a contract file's number is refused in
# one line instead of failing later (experts = 10**12: a MemoryError building the tie table; near_tie_ulp =
# 10**29: an OverflowError at the first mismatch). Why each bound:
FIELD_RANGES: dict[str, tuple[float, float]] = {
    "experts": (1, 65_536),  # the largest router of a released model has 512; tie tables are built per E
    "topk": (1, 65_536),  # and <= experts
    "n_group": (1, 65_536),  # and divides experts
    "topk_group": (1, 65_536),  # and <= n_group
    "near_tie_ulp": (0, 2**23),  # 2**23 ULP spans a whole binade: any larger bound excuses every value
    "near_tie_x_ulp": (0.0, 2.0**23),
    "weight_rtol": (0.0, 1.0),  # a relative tolerance of 100 % accepts any weight of the right sign
    "weight_atol": (0.0, 1.0),
    "renorm_eps": (0.0, 1.0),
    "routed_scaling_factor": (-1e6, 1e6),
    "floor": (-3.4e38, 3.4e38),  # finite fp32
    "softcap": (0.0, 1e6),
    "renorm_p": (0.0, 1e3),  # L_p norms beyond p = 1000 are the max norm to fp32 precision
    "zero_experts": (0, 65_535),
}

LOGIT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class RoutingArgumentError(ValueError):
    """A routing argument is malformed (the message says which and how to fix it)."""


def _fail(message: str) -> None:
    raise RoutingArgumentError(message)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_route_args(scores, bias, topk, renormalize, routed_scaling_factor, *, bias_required: bool = True) -> None:
    if not isinstance(scores, torch.Tensor):
        _fail(f"scores must be a torch.Tensor of shape [M, E], got {type(scores).__name__}")
    if scores.dim() != 2:
        _fail(f"scores.shape={tuple(scores.shape)} must be 2-D [M, E]; reshape to (-1, E)")
    if scores.dtype not in LOGIT_DTYPES:
        _fail(f"scores.dtype={scores.dtype} is not supported; use torch.bfloat16, torch.float16 or torch.float32")
    if scores.device.type == "meta":
        _fail("scores is on the 'meta' device, which holds no values; pass a cpu or cuda tensor")
    experts = scores.shape[1]
    if experts < 1:
        _fail(f"scores.shape={tuple(scores.shape)} has no experts (E=0); E must be >= 1")
    if bias is not None or bias_required:  # a contract without a bias takes None (a tensor is checked, then ignored)
        if not isinstance(bias, torch.Tensor):
            why = "; this contract ranks with a correction bias" if bias is None else ""
            _fail(f"bias must be a torch.Tensor of shape [E]={experts}, got {type(bias).__name__}{why}")
        _check_bias(bias, scores, experts)
    _check_options(topk, renormalize, routed_scaling_factor, experts)


def _check_bias(bias, scores, experts) -> None:
    if bias.dim() != 1 or bias.shape[0] != experts:
        _fail(f"bias.shape={tuple(bias.shape)} must be [{experts}] (one correction bias per expert, E={experts})")
    if bias.dtype not in LOGIT_DTYPES:
        _fail(f"bias.dtype={bias.dtype} is not supported; use torch.float32, torch.bfloat16 or torch.float16")
    if bias.device != scores.device:
        _fail(f"bias.device={bias.device} differs from scores.device={scores.device}; move both to one device")


def _check_options(topk, renormalize, routed_scaling_factor, experts) -> None:
    if isinstance(topk, bool) or not isinstance(topk, int):
        _fail(f"topk={topk!r} must be an int")
    if not 1 <= topk <= experts:
        _fail(f"topk={topk} must satisfy 1 <= topk <= E={experts}")
    if not isinstance(renormalize, bool):
        _fail(f"renormalize={renormalize!r} must be a bool")
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)):
        _fail(f"routed_scaling_factor={routed_scaling_factor!r} must be a float")
    if not math.isfinite(routed_scaling_factor):
        _fail(f"routed_scaling_factor={routed_scaling_factor!r} must be finite")


def check_expert_scale(expert_scale, contract, scores):
    """The ``[E]`` per-expert weight scale of a call: as given, all ones when omitted, None when the contract has none."""
    experts = scores.shape[1]
    if contract.weight_scale == "none":
        if expert_scale is not None:
            _fail(f"expert_scale is given but contract {contract.name!r} has no per-expert weight scale; leave it out")
        return None
    if expert_scale is None:
        return torch.ones(experts, dtype=torch.float32, device=scores.device)
    if not isinstance(expert_scale, torch.Tensor) or expert_scale.shape != (experts,):
        shape = tuple(expert_scale.shape) if isinstance(expert_scale, torch.Tensor) else type(expert_scale).__name__
        _fail(f"expert_scale={shape} must be a tensor of shape [{experts}] (one weight scale per expert)")
    return expert_scale


def resolve_groups(contract, experts: int, num_expert_group, topk_group) -> tuple[int, int]:
    """``(n_group, topk_group)`` of one call: the arguments, else the contract's default group shape."""
    if num_expert_group is None and topk_group is None:
        n_group, kept = contract.n_group, contract.topk_group
    elif topk_group is None and num_expert_group == 1:
        n_group, kept = 1, 1
    elif num_expert_group is None or topk_group is None:
        _fail(f"num_expert_group={num_expert_group!r}, topk_group={topk_group!r}: pass both or neither "
              f"(neither takes contract {contract.name!r}'s {contract.n_group} / {contract.topk_group})")
    else:
        n_group, kept = num_expert_group, topk_group
    if not _is_int(n_group) or n_group < 1:
        _fail(f"num_expert_group={n_group!r} must be a positive int")
    if not _is_int(kept) or not 1 <= kept <= n_group:
        _fail(f"topk_group={kept!r} must be an int with 1 <= topk_group <= num_expert_group={n_group}")
    if experts % n_group:
        _fail(f"num_expert_group={n_group} does not divide E={experts}; groups are contiguous blocks of E / num_expert_group "
              f"(contract {contract.name!r}; pass num_expert_group=1, topk_group=1 for no groups)")
    if n_group > 1 and contract.group_score == "top2_sum" and experts // n_group < 2:
        _fail(f"num_expert_group={n_group} leaves {experts // n_group} expert per group; group_score top2_sum needs >= 2")
    return n_group, kept
