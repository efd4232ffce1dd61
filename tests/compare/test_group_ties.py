"""Where group ties are read as resolved another way (``contracts.compare.group_ties``) and where they are not."""

import functools
import json
import math

import torch

from contracts.check import main


def zero_mask_unsorted(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    """lmdeploy 0.18's torch noaux_tc router as its adapter's docstring (kernels/engines/lmdeploy_torch.py) describes
    it: the logits' dtype throughout, groups by their top-2 sum, dropped groups' choices set to 0.0, torch.topk
    unsorted for the groups and the experts."""
    rows, experts = scores.shape
    sig = scores.sigmoid()
    choice = sig + bias[None]
    grouped = choice.view(rows, num_expert_group, -1)
    kept = grouped.topk(2, dim=-1).values.sum(-1).topk(topk_group, dim=-1, sorted=False).indices
    keep = torch.zeros(rows, num_expert_group, dtype=torch.bool, device=scores.device).scatter_(1, kept, True)
    ids = grouped.masked_fill(~keep.unsqueeze(2), 0.0).view(rows, experts).topk(topk, dim=-1, sorted=False).indices
    w = sig.gather(1, ids)
    if renormalize:
        w = w / (w.sum(1, keepdim=True) + 1e-20)
    return (w * routed_scaling_factor).float(), ids.to(torch.int32)


def test_a_zero_mask_leak_among_groups_tied_at_the_cutoff_stays_group_mask(tmp_path):
    # few_valid:877335192:1 under deepseek-v3: the groups this 0.0-mask router takes experts from all tie the kept
    # ones' score, so they look like another resolution of that tie; but the experts it takes there rank below the
    # contract's within those groups, which no tie explains. b3adf41 read the row as group_tie_order with selection
    # (lmdeploy-torch then failed test_matrix's grouped matrix on it); the mask leak is the cause: group_mask.
    out = tmp_path / "bundle"
    code = main(["--candidate", "tests.compare.test_group_ties:zero_mask_unsorted", "--contract", "deepseek-v3", "--experts", "256",
                 "--topk", "8", "--replay", "few_valid:877335192:1", "--no-isolate", "--device", "cpu", "--out", str(out),
                 "--quiet"])  # fmt: skip
    s = json.loads((out / "summary.json").read_text())
    assert code == 1 and s["clauses"].get("group_mask", 0) == s["mismatched_rows"] == 1, s["clauses"]
    assert not s["clauses"].get("selection") and not s["clauses"].get("group_tie_order"), s["clauses"]


# ---------------------------------------------------------------- NaN group scores under nan_rule "first" (mcore-sigmoid)


def _torch_topk_grouped(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group,
                        groups_from_the_top=False, numbers_over_nan=False, skip_best_number=False):  # fmt: skip
    """Megatron-core's group_limited_topk written plainly: torch.topk ranks NaN first (group scores too). Planted
    defects: ``groups_from_the_top`` keeps the highest-index groups among NaN group scores (a tie resolved another
    way: no defect under nan_rule "first"), ``numbers_over_nan`` ranks NaN experts last within the kept groups,
    ``skip_best_number`` drops each row's best number for the next one (a selection defect)."""
    rows, experts = scores.shape
    sig = scores.float().sigmoid().to(scores.dtype)
    choice = sig.float() + bias[None].float()
    grouped = choice.view(rows, num_expert_group, -1)
    group_scores = grouped.topk(topk // topk_group, dim=-1).values.sum(-1)
    if groups_from_the_top:
        group_scores = torch.where(torch.isnan(group_scores), 1e3 + torch.arange(num_expert_group).float(), group_scores)
    kept = group_scores.topk(topk_group, dim=-1).indices
    keep = torch.zeros(rows, num_expert_group, dtype=torch.bool).scatter_(1, kept, True)
    masked = grouped.masked_fill(~keep.unsqueeze(2), float("-inf")).view(rows, experts)
    if numbers_over_nan:
        masked = masked.nan_to_num(nan=-1e30)
    if skip_best_number:
        best = masked.nan_to_num(nan=-math.inf).argmax(1, keepdim=True)
        masked = masked.scatter(1, best, -1e30)
    ids = masked.topk(topk, dim=-1).indices
    w = sig.float().gather(1, ids)
    w = w / (w.sum(1, keepdim=True) + 1e-20)
    return w * routed_scaling_factor, ids.to(torch.int32)


groups_from_the_top = functools.partial(_torch_topk_grouped, groups_from_the_top=True)
numbers_over_nan = functools.partial(_torch_topk_grouped, groups_from_the_top=True, numbers_over_nan=True)
tied_groups_wrong_numbers = functools.partial(_torch_topk_grouped, groups_from_the_top=True, skip_best_number=True)


def _nan_groups_replay(tmp_path, candidate):
    # nan_sparse:1740257324:1024 under mcore-sigmoid (256 experts, 8 groups, 4 kept): rows with more NaN group scores
    # than kept (row 8: six NaN groups), where torch.topk keeps NaN groups of its own choosing
    out = tmp_path / "bundle"
    code = main(["--candidate", f"tests.compare.test_group_ties:{candidate}", "--contract", "mcore-sigmoid",
                 "--experts", "256", "--topk", "8", "--replay", "nan_sparse:1740257324:1024", "--no-isolate",
                 "--device", "cpu", "--out", str(out), "--quiet"])  # fmt: skip
    return code, json.loads((out / "summary.json").read_text())


def test_nan_group_scores_kept_another_way_are_a_group_tie_under_nan_first(tmp_path):
    # Before 2026-12-07 the mcore contracts ranked NaN last and Megatron's candidate declared nan_last and group_mask;
    # its rows with more NaN groups than kept were blamed on selection (38 rows of 250,134 nan_sparse rows at the
    # default plan). Under nan_rule "first" the NaN groups tie at the top: which are kept is group_tie_order alone.
    code, s = _nan_groups_replay(tmp_path, "groups_from_the_top")
    clauses = {k for k, v in s["clauses"].items() if v}
    assert code == 1 and clauses == {"group_tie_order"}, s["clauses"]


def test_numbers_over_nan_within_kept_groups_fail_nan_last(tmp_path):
    code, s = _nan_groups_replay(tmp_path, "numbers_over_nan")
    assert code == 1 and s["clauses"].get("nan_last", 0) > 0, s["clauses"]


def test_a_nan_group_tie_does_not_excuse_the_wrong_numbers_within(tmp_path):
    code, s = _nan_groups_replay(tmp_path, "tied_groups_wrong_numbers")
    assert code == 1 and s["clauses"].get("selection", 0) > 0, s["clauses"]
