"""Counting one pair of the matrix over its cases: rows compared and routed differently, by family and cause, why
each side departs, and a few differing rows side by side with their replay lines (``MatrixPair``)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Callable

from ..cases import CaseSpec
from ..reports.matrix_schema import MatrixPair, PairExample, PairFamily
from ..reports.schema import AgainstSides

__all__ = ["EXAMPLES_PER_CAUSE", "EXAMPLES_PER_PAIR", "PairTally"]

EXAMPLES_PER_PAIR = 8
EXAMPLES_PER_CAUSE = 2


class PairTally:
    def __init__(self, a: str, b: str, *, replay: Callable[[CaseSpec, int, str, str | None], str]):
        self.pair = MatrixPair(a=a, b=b)
        self.replay = replay
        self._sides = Counter()
        self._shown = Counter()

    def departures(self, causes) -> None:
        """Add one case's ``PairDeparture`` counts (``contracts.compare.departures.pair_causes``) to the pair's."""
        p = self.pair
        merged = {(d.departs, d.a_key, d.b_key, d.a, d.b): d for d in p.departures}
        for d in causes:
            key = (d.departs, d.a_key, d.b_key, d.a, d.b)
            if key in merged:
                merged[key].rows += d.rows
            else:
                merged[key] = dataclasses.replace(d)
            if d.unexplained:
                p.unexplained_rows += d.rows
        p.departures = sorted(merged.values(), key=lambda d: -d.rows)

    def not_compared(self, rows: int, why: str) -> None:
        p = self.pair
        p.rows_not_compared += rows
        p.not_compared[why] = p.not_compared.get(why, 0) + rows

    def add(self, case, outcome, *, oracle_ids, oracle_weights, declared: bool = False, sides=None, departs: str | None = None,
            reference: str | None = None) -> None:  # fmt: skip
        """One case's comparison of ``departs`` (the actual side, default a) against ``reference`` (a candidate; None: the oracle)."""
        p, v = self.pair, outcome.verdict_counts
        near = v.get("near_tie", 0)
        differing = v.get("mismatch", 0) + v.get("expected", 0) + near
        causes = Counter(outcome.clause_rows) + Counter(outcome.expected_rows) + Counter({"near_tie": near})
        fam = p.families.setdefault(case.family, PairFamily())
        for counts in (p, fam):
            counts.rows_compared += outcome.rows
            counts.rows_differing += differing
            counts.near_tie_rows += near
            counts.causes = dict(Counter(counts.causes) + causes)
        if declared:
            p.declared_rows += v.get("expected", 0)
        p.clauses_broken = dict(Counter(p.clauses_broken) + Counter(outcome.clauses_broken) + Counter(outcome.expected_clauses))
        if sides is not None:
            self._sides.update(sides)
            p.oracle_agrees = AgainstSides(**{k: self._sides[k] for k in ("candidate", "against", "neither")})
        for d in outcome.rows_detail:
            self._example(case, d, oracle_ids, oracle_weights, departs or p.a, reference)

    def _example(self, case, d: dict, oracle_ids, oracle_weights, departs: str, reference: str | None) -> None:
        cause = d["clause"] if d["verdict"] != "near_tie" else "near_tie"
        if len(self.pair.examples) >= EXAMPLES_PER_PAIR or self._shown[cause] >= EXAMPLES_PER_CAUSE or d.get("actual_ids") is None:
            return
        self._shown[cause] += 1
        row = d["row"]
        actual, expected = (d["actual_ids"], d["actual_weights"]), (d["expected_ids"], d["expected_weights"])
        (a_ids, a_w), (b_ids, b_w) = (actual, expected) if departs == self.pair.a else (expected, actual)
        self.pair.examples.append(PairExample(
            family=case.family, case=case.spec.replay_id, row=row, cause=cause, reason=d["reason"], departs=departs,
            a_ids=a_ids, b_ids=b_ids, a_weights=a_w, b_weights=b_w,
            oracle_ids=oracle_ids[row].tolist(), oracle_weights=oracle_weights[row].tolist(),
            renormalize=case.renormalize, routed_scaling_factor=case.routed_scaling_factor,
            replay=self.replay(case.spec, row, departs, reference),
        ))  # fmt: skip
