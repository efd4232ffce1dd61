"""The backward deviations a candidate declares: ``{clause: why}`` per contract, as the forward's declarations.

A candidate declares them in a ``backward_deviations`` attribute (``{contract: {clause: why}}``, the shape of
``Candidate.expected_deviations``), kept apart from the forward ones so that neither report counts the other's
clauses. A declared clause excuses only the rows filed under it. ``grad_accuracy``, the catch-all, is bounded as the
forward's ``weight_accuracy`` is: a ``contracts.compare.tolerance.Bounded`` why carries its bound (default 2^-16),
and a row is excused only if every entry lies within ``bound * scale + bound * |expected|`` of the reference.
"""

from __future__ import annotations

from contracts.compare.tolerance import DECLARED_BOUND, Bounded

from .clauses import CATCH_ALL, GRAD_CLAUSES

__all__ = ["backward_deviations"]


def backward_deviations(candidate, contract: str) -> dict[str, str]:
    """``{clause: why}`` the candidate declares for the backward check under ``contract``; refuses unknown clauses."""
    declared = dict((getattr(candidate, "backward_deviations", None) or {}).get(contract, {}))
    for clause in declared:
        if clause not in GRAD_CLAUSES:
            raise ValueError(f"candidate {candidate.name!r}: backward_deviations[{contract!r}] names {clause!r}; "
                             f"the backward clauses are {', '.join(GRAD_CLAUSES)}")
    if CATCH_ALL in declared and not isinstance(declared[CATCH_ALL], Bounded):
        declared[CATCH_ALL] = Bounded(declared[CATCH_ALL], DECLARED_BOUND)
    return declared
