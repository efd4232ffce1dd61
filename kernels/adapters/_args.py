"""The adapters' argument check: the shared kernel rules (``kernels._args``), any float logits."""

from __future__ import annotations

from .._args import check_route_args
from .._args import serves_layout_any_bias as serves  # the layouts check_args takes: any bias stride

__all__ = ["check_args", "serves"]


def check_args(scores, bias, topk, renormalize, routed_scaling_factor, *, logits_rows: bool = True) -> None:
    """``logits_rows=False``: any layout of the logits (a route that reads them through torch only)."""
    check_route_args(
        scores, bias, topk, renormalize, routed_scaling_factor, dtypes=("bfloat16", "float16", "float32"),
        bias_dtypes=("bfloat16", "float16", "float32"), dtype_hint="pass bfloat16, float16 or float32", bias_contiguous=False,
        logits_rows=logits_rows,
    )  # fmt: skip
