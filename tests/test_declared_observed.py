"""A declared deviation counts as seen when any row breaks it, not only when it is a row's primary clause."""

import torch

import oracle
from contracts.candidates import Candidate
from contracts.cases import iter_plan
from contracts.run.candidate_check import check_candidate


def _last_expert_replaced(scores, bias, topk, renormalize, routed_scaling_factor):
    w, ids = oracle.route(scores, bias, topk + 1, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract="aiter")
    ids = torch.cat([ids[:, : topk - 1], ids[:, topk:]], 1)  # the next expert instead of the last: a selection finding
    return w[:, :topk] * 1.01, ids  # and weights off by 1 %: weight_accuracy behind it


def test_a_declared_clause_behind_another_declared_one_is_seen():
    # Both catch-alls declared with bounds wide enough for the planted defects (the next expert instead of the last;
    # weights renormalized over k + 1 experts and 1 % off): each bound's own test is tests/compare/test_row_whole.py.
    cand = Candidate(name="replaced", route=_last_expert_replaced,
                     expected_deviations={"aiter": {"selection": "planted", "weight_accuracy": "planted"}},
                     declared_bounds={"aiter": {"selection": 0.5, "weight_accuracy": 0.5}})  # fmt: skip
    s = check_candidate(cand, list(iter_plan(["random_fp32"], 300, 0, 896, 16)), contract="aiter", device="cpu").summary
    seen = s.expected_deviations
    assert s.mismatched_rows == 0 and seen["selection"].rows == s.rows_checked
    assert seen["weight_accuracy"].rows == 0 and seen["weight_accuracy"].observed
