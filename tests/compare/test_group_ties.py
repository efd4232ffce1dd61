"""Where group ties are read as resolved another way (``contracts.compare.group_ties``) and where they are not."""

import json

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
