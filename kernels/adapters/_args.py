"""Argument checks shared by the adapters (a kernel package keeps its own copy:
it never imports the harness). Each error names the argument, its value and the fix."""

from __future__ import annotations

import math

import torch

__all__ = ["check_args"]

_FLOATS = (torch.bfloat16, torch.float16, torch.float32)


def check_args(scores, bias, topk, renormalize, routed_scaling_factor) -> None:
    if not isinstance(scores, torch.Tensor) or scores.dim() != 2:
        raise ValueError(f"scores must be a 2-D tensor [M, E], got {getattr(scores, 'shape', type(scores).__name__)}")
    if scores.dtype not in _FLOATS:
        raise ValueError(f"scores.dtype={scores.dtype} is not supported; use torch.bfloat16 or torch.float32")
    if scores.device.type == "meta":
        raise ValueError("scores is on the 'meta' device, which holds no values; pass a cpu or cuda tensor")
    experts = scores.shape[1]
    if experts < 1:
        raise ValueError(f"scores.shape={tuple(scores.shape)} has no experts; E must be >= 1")
    if not isinstance(bias, torch.Tensor) or bias.dim() != 1 or bias.shape[0] != experts:
        raise ValueError(f"bias must be a 1-D tensor of E={experts} values, got {getattr(bias, 'shape', type(bias).__name__)}")
    if bias.dtype not in _FLOATS:
        raise ValueError(f"bias.dtype={bias.dtype} is not supported; use torch.float32 or torch.bfloat16")
    if bias.device != scores.device:
        raise ValueError(f"bias.device={bias.device} differs from scores.device={scores.device}; move both to one device")
    if isinstance(topk, bool) or not isinstance(topk, int) or not 1 <= topk <= experts:
        raise ValueError(f"topk={topk!r} must be an int with 1 <= topk <= E={experts}")
    if not isinstance(renormalize, bool):
        raise ValueError(f"renormalize={renormalize!r} must be a bool")
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, (int, float)) or not math.isfinite(routed_scaling_factor):
        raise ValueError(f"routed_scaling_factor={routed_scaling_factor!r} must be a finite float")
