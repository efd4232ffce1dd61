"""The backward check: a differentiable router's gradient against autograd of its contract in float64.

- ``clauses``: the backward clauses (names and statements) and ``GradTolerance`` (the comparison's bounds, as data);
- ``cases``: the seeded inputs (logits, bias, the upstream gradient dL/dweights, the call options);
- ``attribution``: which clause a mismatched row breaks (the first one whose counterfactual explains it);
- ``declared``: the backward deviations a candidate declares;
- ``check``: ``check_backward(candidate, contract, ...) -> BackwardResult``;
- ``report``: the console lines, summary.json and report.md of a result.

docs/backward.md says what it checks and what it does not.
"""

from .check import BackwardResult, GradMismatch, check_backward
from .clauses import GRAD_CLAUSES, GradTolerance

__all__ = ["GRAD_CLAUSES", "BackwardResult", "GradMismatch", "GradTolerance", "check_backward"]
