"""A row example as sets of experts: for contracts whose output order is "any".

Under such a contract (``deepseek-v3``, ``deepseek-v3-reference``, ...) the column an expert lands in carries no
meaning, so comparing expected and actual slot by slot marks every slot of a reordered row and compares weights of
different experts. Here the row is read as the contract reads it: the experts both sides chose (``matched``, their
weights compared by expert id), those the contract expects and the router left out (``missing``), and those the router
chose and the contract does not (``extra``). report.md, report.html and the replay (``check --replay ... --row N``)
render the same list.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ExpertMatch", "expert_sets", "shown_as_sets"]


@dataclass(frozen=True)
class ExpertMatch:
    """One expert of a row: ``kind`` matched / missing / extra, the column it has on each side (None: not there), and
    its weight on each side."""

    kind: str
    expert: int
    expected_column: int | None
    actual_column: int | None
    expected_weight: float | None
    actual_weight: float | None

    @property
    def same_weight(self) -> bool:
        a, b = self.expected_weight, self.actual_weight
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return a == b


def shown_as_sets(d) -> bool:
    """Whether a row detail is shown as sets: its contract leaves the output order open and both sides have ids."""
    return getattr(d, "output_order", None) == "any" and d.expected_ids is not None and d.actual_ids is not None


def expert_sets(d) -> list[ExpertMatch]:
    """The row's experts: matched ones in the contract's column order, then missing ones (the contract's order), then
    extra ones (the router's order). A repeated actual id (a validity failure) is matched once and extra after."""
    exp_ids, act_ids = list(d.expected_ids or []), list(d.actual_ids or [])
    exp_w, act_w = list(d.expected_weights or []), list(d.actual_weights or [])

    def weight(seq, j):
        return seq[j] if j < len(seq) else None

    unmatched = {}  # actual id -> its first column not yet matched
    for j, e in enumerate(act_ids):
        unmatched.setdefault(e, []).append(j)
    matched, missing = [], []
    for i, e in enumerate(exp_ids):
        columns = unmatched.get(e)
        if columns:
            j = columns.pop(0)
            matched.append(ExpertMatch("matched", e, i, j, weight(exp_w, i), weight(act_w, j)))
        else:
            missing.append(ExpertMatch("missing", e, i, None, weight(exp_w, i), None))
    left = sorted(j for columns in unmatched.values() for j in columns)
    extra = [ExpertMatch("extra", act_ids[j], None, j, None, weight(act_w, j)) for j in left]
    return matched + missing + extra
