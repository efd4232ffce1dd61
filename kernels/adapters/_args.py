"""The adapters' argument check: the shared kernel rules (``kernels._args``), any float logits."""

from __future__ import annotations

from .._args import check_route_args, serves_layout

__all__ = ["check_args", "serves"]


def serves(*, rows: int, experts: int, logits_strides: tuple[int, int] | None = None, bias_stride: int | None = None) -> bool:
    """The layouts ``check_args`` takes: logits of column stride 1 and row stride >= E, a bias of any stride."""
    return serves_layout(rows=rows, experts=experts, logits_strides=logits_strides, bias_stride=bias_stride, bias_contiguous=False)


def check_args(scores, bias, topk, renormalize, routed_scaling_factor, *, logits_rows: bool = True) -> None:
    """``logits_rows=False``: any layout of the logits (a route that reads them through torch only)."""
    check_route_args(
        scores, bias, topk, renormalize, routed_scaling_factor, dtypes=("bfloat16", "float16", "float32"),
        bias_dtypes=("bfloat16", "float16", "float32"), dtype_hint="pass bfloat16, float16 or float32", bias_contiguous=False,
        logits_rows=logits_rows,
    )  # fmt: skip
