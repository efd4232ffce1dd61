"""The fp32 -> rank-key twiddle, in one place.

A rank key is an int32 whose signed order is the order of the fp32 values:
``a < b`` as numbers iff ``key(a) < key(b)``. The bit pattern of a
non-negative float already orders correctly; for a negative float the
magnitude bits are flipped so that more negative means smaller.
``-0.0`` is first turned into ``+0.0`` (adding ``+0.0`` does that in IEEE
round-to-nearest), so both zeros share one key. NaN gets ``NAN_KEY``, the
smallest int32, strictly below ``key(-inf)``.

(Kernels use the unsigned variant of the same map, ``key ^ 0x80000000``,
where NaN becomes 0; the order is the same.)
"""

from __future__ import annotations

import torch

__all__ = ["NAN_KEY", "ordered_keys", "rank_keys"]

NAN_KEY = -(2**31)


def ordered_keys(values: torch.Tensor) -> torch.Tensor:
    """The twiddle alone: int32 keys of fp32 ``values``, NaN left as its bits (the caller places it).

    ``bits ^ 0x7FFFFFFF`` for negative floats, written as a shift, a mask and
    an xor on one new tensor (no select, no second buffer).
    """
    bits = (values + 0.0).view(torch.int32)
    return (bits >> 31).bitwise_and_(0x7FFFFFFF).bitwise_xor_(bits)


def rank_keys(values: torch.Tensor) -> torch.Tensor:
    """int32 rank keys of fp32 ``values`` (any shape); see the module docstring."""
    if values.dtype != torch.float32:
        raise TypeError(f"values.dtype={values.dtype} must be torch.float32 (rank keys are defined on fp32)")
    return ordered_keys(values).masked_fill_(torch.isnan(values), NAN_KEY)
