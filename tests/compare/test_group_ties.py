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
                        groups_from_the_top=False, numbers_over_nan=False, skip_best_number=False,
                        drop_weakest_kept=False, minus_inf_over_a_number=False, ungrouped=False):  # fmt: skip
    """Megatron-core's group_limited_topk written plainly: torch.topk ranks NaN first (group scores too). Planted
    defects: ``groups_from_the_top`` keeps the highest-index groups among NaN group scores (a tie resolved another
    way: no defect under nan_rule "first"), ``numbers_over_nan`` ranks NaN experts last within the kept groups,
    ``skip_best_number`` drops each row's best number for the next one (a selection defect), ``drop_weakest_kept``
    masks the weakest kept group too (three groups of four), ``minus_inf_over_a_number`` puts a -inf expert of a
    dropped group in place of the last number chosen, ``ungrouped`` ignores the groups."""
    rows, experts = scores.shape
    sig = scores.float().sigmoid().to(scores.dtype)
    choice = sig.float() + bias[None].float()
    grouped = choice.view(rows, num_expert_group, -1)
    group_scores = grouped.topk(topk // topk_group, dim=-1).values.sum(-1)
    if groups_from_the_top:
        group_scores = torch.where(torch.isnan(group_scores), 1e3 + torch.arange(num_expert_group).float(), group_scores)
    kept = group_scores.topk(topk_group, dim=-1).indices
    if drop_weakest_kept:
        kept = kept[:, : topk_group - 1]
    keep = torch.zeros(rows, num_expert_group, dtype=torch.bool).scatter_(1, kept, True)
    if ungrouped:
        keep.fill_(True)
    masked = grouped.masked_fill(~keep.unsqueeze(2), float("-inf")).view(rows, experts)
    if numbers_over_nan:
        masked = masked.nan_to_num(nan=-1e30)
    if skip_best_number:
        best = masked.nan_to_num(nan=-math.inf).argmax(1, keepdim=True)
        masked = masked.scatter(1, best, -1e30)
    ids = masked.topk(topk, dim=-1).indices
    if minus_inf_over_a_number:  # the last finite pick swapped for a -inf expert of a dropped group
        dropped = (~keep).unsqueeze(2).expand(rows, num_expert_group, experts // num_expert_group).reshape(rows, experts)
        pick = (dropped & (choice == float("-inf"))).float().argmax(1)
        has = (dropped & (choice == float("-inf"))).any(1)
        last = torch.isfinite(masked.gather(1, ids)).sum(1) - 1
        swap = has & (last >= 0)
        ids[swap, last[swap]] = pick[swap]
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
    # default plan). Under nan_rule "first" the NaN groups tie at the top: which are kept is group_tie_order, never
    # selection. Where every NaN group is kept (10 rows, e.g. row 201: nine NaN experts in the four kept groups),
    # torch.topk takes eight of the nine NaN experts in its own order, not the contract's tie priority: tie_order
    # (those rows passed as near ties until two NaN ranking values counted as an exact tie, 2026-12-07).
    code, s = _nan_groups_replay(tmp_path, "groups_from_the_top")
    clauses = {k for k, v in s["clauses"].items() if v}
    assert code == 1 and clauses == {"group_tie_order", "tie_order"}, s["clauses"]
    assert s["clauses"]["group_tie_order"] > 50 * s["clauses"]["tie_order"], s["clauses"]


def test_numbers_over_nan_within_kept_groups_fail_nan_last(tmp_path):
    code, s = _nan_groups_replay(tmp_path, "numbers_over_nan")
    assert code == 1 and s["clauses"].get("nan_last", 0) > 0, s["clauses"]


def test_a_nan_group_tie_does_not_excuse_the_wrong_numbers_within(tmp_path):
    code, s = _nan_groups_replay(tmp_path, "tied_groups_wrong_numbers")
    assert code == 1 and s["clauses"].get("selection", 0) > 0, s["clauses"]


# ------------------------------------- group ties Megatron resolves by torch.topk's own order (mcore-sigmoid, bf16 sums)

drops_weakest_kept_group = functools.partial(_torch_topk_grouped, drop_weakest_kept=True)
minus_inf_over_a_number = functools.partial(_torch_topk_grouped, minus_inf_over_a_number=True)
tied_groups_skip_best = functools.partial(_torch_topk_grouped, skip_best_number=True)
ungrouped_topk = functools.partial(_torch_topk_grouped, ungrouped=True)


def _replay(tmp_path, candidate, replay):
    out = tmp_path / "bundle"
    code = main(["--candidate", f"tests.compare.test_group_ties:{candidate}", "--contract", "mcore-sigmoid",
                 "--experts", "256", "--topk", "8", "--replay", replay, "--no-isolate", "--device", "cpu",
                 "--out", str(out), "--quiet"])  # fmt: skip
    s = json.loads((out / "summary.json").read_text())
    return code, {k: v for k, v in s["clauses"].items() if v}


# bf16_near_ties:619007217:1024 (bf16 logits, fp32 bias) under mcore-sigmoid: in 260 of its rows torch.topk keeps
# other groups than the contract among group sums tied exactly at the cutoff (the contract's sums are Megatron's bit
# for bit); where it takes none of the tied group it kept (row 955: groups 5 and 6 both sum 1.84375, it keeps 6 and
# takes nothing there, so expert 166 of group 5 is missing) the row read as selection before 2026-12-07: a group tie
# resolution needed an expert of a dropped group.
NEAR_TIES = "bf16_near_ties:619007217:1024"


def test_a_tied_group_kept_with_none_of_its_experts_is_a_group_tie(tmp_path):
    code, clauses = _replay(tmp_path, "_torch_topk_grouped", NEAR_TIES)
    # (its weights are fp32, the contract's bf16: weight_accuracy, which says nothing of the experts)
    ids_clauses = set(clauses) - {"weight_accuracy"}
    assert code == 1 and ids_clauses <= {"group_tie_order", "tie_order"} and clauses.get("group_tie_order"), clauses


def test_a_group_dropped_outright_is_no_group_tie(tmp_path):
    # keeps three groups of four: where the fourth ties no other group exactly, no tie explains the missing experts
    code, clauses = _replay(tmp_path, "drops_weakest_kept_group", NEAR_TIES)
    assert code == 1 and clauses.get("selection", 0) + clauses.get("group_selection", 0) > 0, clauses


def test_a_group_tie_does_not_excuse_skipping_the_best_expert(tmp_path):
    code, clauses = _replay(tmp_path, "tied_groups_skip_best", NEAR_TIES)
    assert code == 1 and clauses.get("selection", 0) > 0, clauses


# few_valid:1482888430:64 (fp32, a -inf bias on all but 7 experts) under mcore-sigmoid: groups of fewer than two
# finite experts all score -inf and tie; torch.topk keeps two of its own among them, and fills its last slots with
# -inf experts of any group (a dropped group's, masked to -inf, ties a kept group's own -inf ones). Before 2026-12-07
# those -inf picks counted as groups used: more groups than kept, group_mask (21 rows at the default plan).
FEW_VALID = "few_valid:1482888430:64"


def test_minus_inf_fills_of_a_dropped_group_are_ties_under_a_minus_inf_mask(tmp_path):
    code, clauses = _replay(tmp_path, "_torch_topk_grouped", FEW_VALID)
    assert code == 1 and set(clauses) <= {"group_tie_order", "tie_order"}, clauses


def test_ignoring_the_groups_stays_group_mask(tmp_path):
    code, clauses = _replay(tmp_path, "ungrouped_topk", FEW_VALID)
    assert code == 1 and clauses.get("group_mask", 0) > 0, clauses


def test_a_minus_inf_expert_over_a_number_of_a_kept_group_still_fails(tmp_path):
    # a -inf expert of a dropped group taken where a number of a kept group is left: no tie, the mask let it through
    code, clauses = _replay(tmp_path, "minus_inf_over_a_number", FEW_VALID)
    assert code == 1 and clauses.get("group_mask", 0) + clauses.get("selection", 0) > 0, clauses
