"""The adapters' argument check: the shared kernel rules (``kernels._args``), any float logits."""

from __future__ import annotations

from .._args import check_route_args

__all__ = ["check_args"]


def check_args(scores, bias, topk, renormalize, routed_scaling_factor) -> None:
    check_route_args(
        scores, bias, topk, renormalize, routed_scaling_factor, dtypes=("bfloat16", "float16", "float32"),
        bias_dtypes=("bfloat16", "float16", "float32"), dtype_hint="pass bfloat16, float16 or float32", bias_contiguous=False,
    )  # fmt: skip
