"""The backward clauses (a closed vocabulary of their own) and the gradient tolerance, as data.

The forward clauses (``oracle.ClauseName``) judge what a router returns; these judge the derivative of what it
returns. They are kept apart: a forward report never counts a backward clause, and a declared backward deviation
excuses only its own clause, never a forward one.

Tolerance: a gradient entry ``a`` matches the float64 reference ``e`` of its row when

    |a - e| <= atol * scale + rtol * |e|,    scale = |routed_scaling_factor| * max |upstream of the row|

(``scale`` is the size of the gradient the row's weights receive: an fp32 backward of the same formula errs by a
few ULPs of it, in whatever order it sums). Like the forward's ``weight_rtol`` / ``weight_atol``, both bounds are
data (``GradTolerance``), range-checked on construction: a relative bound of 1 would accept any gradient of the
right sign.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CATCH_ALL", "GRAD_CLAUSES", "GradTolerance", "statement"]

# In attribution order: a mismatched row is filed under the first clause whose test explains it.
GRAD_CLAUSES: tuple[str, ...] = (
    "grad_unselected",
    "grad_bias",
    "grad_scaling",
    "grad_renormalization",
    "grad_score_function",
    "grad_accuracy",
)
CATCH_ALL = "grad_accuracy"  # the bounded catch-all, as the forward's weight_accuracy

_STATEMENTS = {
    "grad_unselected": "No gradient flows into an expert that was not chosen (its weight does not depend on it), "
                       "unless the score function couples the experts (a softmax over all of them).",
    "grad_bias": "The correction bias receives no gradient: it only ranks (bias='ranks_only'). Under bias='in_weight' "
                 "its gradient is the weights' own.",
    "grad_scaling": "The routed scaling factor multiplies the gradient exactly once, as it multiplies the weights.",
    "grad_renormalization": "Renormalization differentiates by the quotient rule: the denominator (the weights' sum) "
                            "is a function of the logits, not a constant.",
    "grad_score_function": "The score function's derivative is its own: s * (1 - s) for a sigmoid, the softmax's "
                           "Jacobian (cross terms included) for a softmax.",
    "grad_accuracy": "Each gradient entry equals autograd of the contract in float64 within the tolerance "
                     "(|a - e| <= atol * scale + rtol * |e|).",
}


def statement(clause: str) -> str:
    return _STATEMENTS[clause]


# Inclusive ranges of the tolerance fields, as oracle._validate.FIELD_RANGES bounds the forward's.
_RANGES = {"rtol": (0.0, 2.0**-4), "atol": (0.0, 2.0**-4)}


@dataclass(frozen=True)
class GradTolerance:
    """How far an fp32 backward may be from the float64 reference (see the module docstring).

    The defaults, 2^-12 relative and 2^-16 of the row's scale, are an fp32 backward of the contract's formula in
    another order (a sum over k weights, a quotient, a sigmoid's derivative: tens of ULPs at most), with room;
    the defects the check exists for are off by 10 % or more."""

    rtol: float = 2.0**-12
    atol: float = 2.0**-16

    def __post_init__(self) -> None:
        for field, (low, high) in _RANGES.items():
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not low <= value <= high:
                raise ValueError(f"GradTolerance.{field}={value!r} is not allowed; use a finite number in [{low:g}, {high:g}] "
                                 "(a relative bound of 1/16 already accepts a gradient 6 % off)")
            object.__setattr__(self, field, float(value))

    def as_dict(self) -> dict:
        return {"rtol": self.rtol, "atol": self.atol}
