"""With --against, every row where the two differ is counted by the side the oracle agrees with, and the examples say it."""

from __future__ import annotations

import pytest

import oracle
from contracts.candidates import Candidate
from contracts.candidates.registry import get_candidate
from contracts.cases.plan import plan
from contracts.run.candidate_check import check_candidate


def _reversing(scores, bias, topk, renormalize, rsf):
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf)
    return w.flip(1).contiguous(), ids.flip(1).contiguous()


def _rolled(scores, bias, topk, renormalize, rsf):
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf)
    return w.roll(1, 1).contiguous(), ids.roll(1, 1).contiguous()


REVERSED, ROLLED = Candidate("reversed", _reversing), Candidate("rolled", _rolled)


@pytest.mark.parametrize("candidate,against,side", [
    (get_candidate("oracle"), REVERSED, "candidate"),
    (REVERSED, get_candidate("oracle"), "against"),
    (REVERSED, ROLLED, "neither"),
])  # fmt: skip
def test_every_differing_row_is_counted_by_the_side_the_oracle_takes(candidate, against, side):
    specs = plan(["random_fp32"], 1500, 0, 64, 8)
    result = check_candidate(candidate, specs, contract="aiter", device="cpu", against=against)
    sides = result.summary.against_sides
    counts = {"candidate": sides.candidate, "against": sides.against, "neither": sides.neither}
    assert counts == {**dict.fromkeys(counts, 0), side: 1500}
    assert result.details and {d.oracle_agrees_with for d in result.details} == {side}
