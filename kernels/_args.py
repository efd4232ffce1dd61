"""The route() argument checks every kernel wrapper and adapter shares.

One line per argument; each error names the argument, its value and the fix.
(kernels/ keeps its own copy of these rules rather than importing the
harness's: a serving engine can use a kernel without the harness.)
"""

from __future__ import annotations

import math
import numbers

__all__ = ["check_route_args", "serves_layout", "serves_layout_any_bias"]


def serves_layout(*, rows: int, experts: int, logits_strides: tuple[int, int] | None = None, bias_stride: int | None = None,
                  bias_contiguous: bool = True, **_options) -> bool:  # fmt: skip
    """Whether ``check_route_args`` takes logits of these strides and a bias of this stride (``Candidate.covers``'
    ``logits_strides`` and ``bias_stride``; None: not told, a dense layout): column stride 1, row stride >= E (with
    more than one row), and with ``bias_contiguous`` bias stride 1. A gate of a route that checks its arguments with
    ``check_route_args`` adds this, so the harness skips (and counts) what the route would refuse. The call's other
    options (``_options``: a gate's whole shape may be passed on) do not matter here."""
    if logits_strides is not None:
        row_stride, column_stride = logits_strides
        if experts > 1 and column_stride != 1:
            return False
        if rows > 1 and row_stride < experts:
            return False
    return not (bias_contiguous and bias_stride is not None and experts > 1 and bias_stride != 1)


def serves_layout_any_bias(**shape) -> bool:
    """``serves_layout`` for a route that reads or copies the bias through torch (``check_route_args`` with
    ``bias_contiguous=False``): logits of column stride 1 and row stride >= E, a bias of any stride."""
    return serves_layout(**shape, bias_contiguous=False)


def check_route_args(
    scores,
    bias,
    topk,
    renormalize,
    routed_scaling_factor,
    *,
    dtypes: tuple[str, ...] = ("float32", "bfloat16"),
    bias_dtypes: tuple[str, ...] | None = None,
    dtype_hint: str = "pass bfloat16 or float32 (scores.float())",
    bias_contiguous: bool = True,
    logits_rows: bool = True,
) -> tuple[int, int, int, float]:
    """Validate ``route`` arguments; return ``(M, E, row_stride, routed_scaling_factor as float)``.

    ``dtypes``: accepted logits dtypes by name (``str(dtype)`` without ``torch.``);
    ``bias_dtypes``: accepted bias dtypes (``None``: any floating type);
    ``bias_contiguous``: the bias must have stride 1; ``logits_rows``: the
    logits must be rows a kernel reads from a pointer and a row stride (column
    stride 1, row stride >= E); False for a route that reads any layout
    through torch (the row stride returned is then meaningless).
    """
    import torch

    if not isinstance(scores, torch.Tensor):
        raise ValueError(f"scores={type(scores).__name__} is not a tensor; pass a torch.Tensor of shape [M, E]")
    if not isinstance(bias, torch.Tensor):
        raise ValueError(f"bias={type(bias).__name__} is not a tensor; pass a torch.Tensor of shape [E]")
    if scores.dim() != 2:
        raise ValueError(f"scores.shape={tuple(scores.shape)} is not 2-D; pass logits of shape [M, E]")
    M, E = scores.shape
    if str(scores.dtype).removeprefix("torch.") not in dtypes:
        raise ValueError(f"scores.dtype={scores.dtype} is not supported; {dtype_hint}")
    if bias_dtypes is None:
        if not bias.dtype.is_floating_point:
            raise ValueError(f"bias.dtype={bias.dtype} is not a floating type; pass the model's float bias")
    elif str(bias.dtype).removeprefix("torch.") not in bias_dtypes:
        raise ValueError(f"bias.dtype={bias.dtype} is not supported; pass bfloat16 or float32 (bias.float())")
    if E < 1:
        raise ValueError(f"scores.shape={tuple(scores.shape)} has no experts; pass E >= 1 columns")
    if tuple(bias.shape) != (E,):
        raise ValueError(f"bias.shape={tuple(bias.shape)} does not match E={E}; pass a bias of shape [{E}]")
    if bias.device != scores.device:
        raise ValueError(f"bias.device={bias.device} differs from scores.device={scores.device}; move bias there")
    if scores.device.type == "meta":
        raise ValueError("scores.device=meta holds no values; pass a cpu or cuda tensor")
    if logits_rows and E > 1 and scores.stride(1) != 1:
        raise ValueError(f"scores.stride(1)={scores.stride(1)} is not 1; pass scores.contiguous()")
    if bias_contiguous and E > 1 and bias.stride(0) != 1:
        raise ValueError(f"bias.stride(0)={bias.stride(0)} is not 1; pass bias.contiguous()")
    row_stride = scores.stride(0) if M > 1 else E
    if logits_rows and row_stride < E:
        raise ValueError(f"scores.stride(0)={row_stride} is smaller than E={E}; pass scores.contiguous()")
    if isinstance(topk, bool) or not isinstance(topk, numbers.Integral):
        raise ValueError(f"topk={topk!r} is not an integer; pass an int in 1..{E} (16 for Kimi-K3's E=896)")
    if not 1 <= topk <= E:
        raise ValueError(f"topk={topk} is outside 1..E={E}; pass a topk no larger than the number of experts")
    if not isinstance(renormalize, bool):
        raise ValueError(f"renormalize={renormalize!r} is not a bool; pass True or False")
    if isinstance(routed_scaling_factor, bool) or not isinstance(routed_scaling_factor, numbers.Real):
        raise ValueError(f"routed_scaling_factor={routed_scaling_factor!r} is not a number; pass a float such as 1.0")
    rs = float(routed_scaling_factor)
    if not math.isfinite(rs):
        raise ValueError(f"routed_scaling_factor={rs} is not finite; pass a finite float such as 1.0")
    return M, E, row_stride, rs
