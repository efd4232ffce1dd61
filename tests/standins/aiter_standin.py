"""STAND-IN for AMD aiter's ``biased_grouped_topk``: NOT aiter. For CPU tests only.

Same signature and conventions as the real op (docs/aiter.md#what-aiters-generic-kernel-does)::

    biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids,
                        num_expert_group, topk_group, need_renorm, routed_scaling_factor=1.0) -> None

It fills ``topk_weights`` (fp32) and ``topk_ids`` (int32) in place and
returns ``None``. It checks what the real op requires of its arguments
(raising ``RuntimeError`` as a failed ``TORCH_CHECK`` would, or as a wrong
read would go unnoticed on the GPU): dense rows for ``gating_output`` (the
kernel reads row ``t`` at ``t * E``) and 16-byte aligned logits and bias (it
loads 4 values at a time), a bias of the gating dtype, fp32/int32 outputs of
shape ``[M, topk]`` with one shared row stride. It serves only the generic
ungrouped path (``num_expert_group == topk_group == 1``, more than 32
experts) and computes it with ``kernels.adapters.aiter_model``, the project's
behavioural model of that kernel; so an adapter test against this module
proves argument handling, not agreement with aiter.

``calls`` records each call's arguments (dtypes, shapes, strides, data
pointers, scalars) for tests to inspect; ``calls.clear()`` resets it.

Use it through the adapter's test seam: ``ROUTER_AITER_MODULE=tests.standins.aiter_standin``.
"""

from __future__ import annotations

import torch

from kernels.adapters import aiter_model

__all__ = ["biased_grouped_topk", "calls", "check_call"]

__version__ = "stand-in (not aiter)"

calls: list[dict] = []


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise RuntimeError(f"stand-in aiter: {message}")


def check_call(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group, need_renorm, routed_scaling_factor) -> None:
    """aiter's argument requirements, as the stand-ins enforce them; records the call in ``calls``."""
    calls.append(
        {
            "gating_dtype": gating_output.dtype,
            "gating_stride": gating_output.stride(),
            "gating_ptr": gating_output.data_ptr(),
            "bias_dtype": correction_bias.dtype,
            "bias": correction_bias.clone(),
            "weights_ptr": topk_weights.data_ptr(),
            "ids_ptr": topk_ids.data_ptr(),
            "weights_stride": topk_weights.stride(),
            "ids_stride": topk_ids.stride(),
            "num_expert_group": num_expert_group,
            "topk_group": topk_group,
            "need_renorm": need_renorm,
            "routed_scaling_factor": routed_scaling_factor,
        }
    )
    rows, experts = gating_output.shape
    _require(gating_output.is_contiguous(), f"gating_output rows are dense (aiter reads row t at t * E; strides {gating_output.stride()})")
    _require(gating_output.data_ptr() % 16 == 0 and correction_bias.data_ptr() % 16 == 0, "gating_output and correction_bias are 16-byte aligned")
    _require(correction_bias.is_contiguous(), f"correction_bias is dense (stride {correction_bias.stride()})")
    _require(correction_bias.dtype == gating_output.dtype, f"correction_bias.dtype {correction_bias.dtype} == gating_output.dtype {gating_output.dtype}")
    _require(tuple(correction_bias.shape) == (experts,), f"correction_bias.shape {tuple(correction_bias.shape)} == ({experts},)")
    _require(topk_weights.dtype == torch.float32, f"topk_weights.dtype {topk_weights.dtype} == float32")
    _require(topk_ids.dtype == torch.int32, f"topk_ids.dtype {topk_ids.dtype} == int32")
    _require(topk_weights.shape == topk_ids.shape and topk_ids.shape[0] == rows, f"outputs [{rows}, topk], got {tuple(topk_weights.shape)} and {tuple(topk_ids.shape)}")
    _require(topk_ids.stride(0) == topk_weights.stride(0), f"topk_ids.stride(0) {topk_ids.stride(0)} == topk_weights.stride(0) {topk_weights.stride(0)}")
    _require(topk_ids.stride(1) == 1 and topk_weights.stride(1) == 1, "outputs have column stride 1")
    _require(isinstance(need_renorm, bool), f"need_renorm is a bool (got {need_renorm!r})")
    _require(isinstance(routed_scaling_factor, float), f"routed_scaling_factor is a float (got {routed_scaling_factor!r})")
    if (num_expert_group, topk_group) != (1, 1) or experts <= 32:
        raise NotImplementedError("the stand-in models only aiter's generic ungrouped path (1 group of > 32 experts)")


def biased_grouped_topk(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group, need_renorm, routed_scaling_factor=1.0):
    """Fill ``topk_weights``/``topk_ids`` in place with the behavioural model's answer; return None."""
    check_call(gating_output, correction_bias, topk_weights, topk_ids, num_expert_group, topk_group, need_renorm, routed_scaling_factor)
    weights, ids = aiter_model.route(gating_output, correction_bias, topk_ids.shape[1], need_renorm, routed_scaling_factor)
    topk_weights.copy_(weights)
    topk_ids.copy_(ids)
