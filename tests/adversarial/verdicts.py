"""Routers that try to earn a verdict they do not deserve, and correct routers that must keep theirs (issues 32, 34).

Each broken one changes one thing in the oracle's answer and hides behind
something the comparison allows: the serial contract's expert-0 fallback, a
declared tie order, a declared NaN rule, a declared ``validity``, an output
order the contract leaves open. ``tests/compare/test_row_whole.py`` checks
that each fails (or errors) with the clause a kernel engineer would fix;
the correct ones (the oracle with its columns shuffled where the order is
``any``) must pass.
"""

from __future__ import annotations

import math

import torch

import oracle
from contracts.candidates import Candidate


def _oracle(contract: str, **replaced):
    c = oracle.get_contract(contract)
    return c.replace(**replaced) if replaced else c


def _route(contract, scores, bias, topk, renormalize, rsf, **groups):
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract, **groups)


def _own_weights(contract, scores, bias, ids, renormalize, rsf):
    """The contract's weights for the router's own experts (so only its ids are wrong)."""
    c = _oracle(contract)
    expert_scores, _ = oracle.ranking_values(scores, bias, c)
    return oracle.weights_from(expert_scores.gather(1, ids.long()), contract=c, renormalize=renormalize, routed_scaling_factor=rsf,
                               logits_dtype=scores.dtype)  # fmt: skip


def _shuffled(w, ids, seed=7):
    """The same answer with each row's columns in a random order (what ``torch.topk(sorted=False)`` may give)."""
    g = torch.Generator().manual_seed(seed + w.shape[0])
    perm = torch.rand(w.shape, generator=g).to(w.device).argsort(1)
    return w.gather(1, perm), ids.gather(1, perm.to(ids.device))


# ---------------------------------------------------------------- issue 32: the ids of a row, checked whole


def serial_repeats_expert_0(scores, bias, topk, renormalize, rsf):
    """Serial contract: where expert 0 is chosen, it is written again in place of the second expert (which is lost)."""
    w, ids = _route("serial", scores, bias, topk, renormalize, rsf)
    has0 = (ids == 0).any(1) & (ids[:, 1] != 0)
    ids[has0, 1] = 0
    return w, ids


def serial_fallback_too_early(scores, bias, topk, renormalize, rsf):
    """Serial contract: the last slot always holds the expert-0 fallback, eligible experts left or not."""
    w, ids = _route("serial", scores, bias, topk, renormalize, rsf)
    ids[:, -1] = 0
    return w, ids


def _drop_top1_in_tied_rows(scores, bias, topk, renormalize, rsf):
    """aiter contract, ties to the lowest index (a declared tie order); in rows whose cutoff ties an expert left
    out, the top-1 expert is dropped for that tied one. Two extra experts may then pair with one missing tied
    expert, which a pairwise test took for a tie."""
    w, ids = _route(_oracle("aiter", tie_rule="lowest"), scores, bias, topk, renormalize, rsf)
    _, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking)
    cutoff = keys.gather(1, ids[:, -1:].long())
    left = (keys == cutoff).scatter(1, ids.long(), False)  # tied with the cutoff, not chosen
    rows = left.any(1) & (keys.gather(1, ids[:, :1].long()) != cutoff).squeeze(1)  # the top-1 is above the tie
    spare = left.float().argmax(1)
    ids[rows, 0] = spare[rows].to(ids.dtype)
    return _own_weights("aiter", scores, bias, ids, renormalize, rsf), ids


tie_order_declared_drops_top1 = Candidate(
    name="tie-order-declared-drops-top1", route=_drop_top1_in_tied_rows,
    expected_deviations={"aiter": {"tie_order": "declared: which of equal-key experts are taken"}},
)  # fmt: skip


def _nan_rows_to_lowest_experts(scores, bias, topk, renormalize, rsf):
    """aiter contract: every row holding a NaN goes to experts 0..k-1, numbers or not."""
    w, ids = _route("aiter", scores, bias, topk, renormalize, rsf)
    rows = torch.isnan(scores).any(1)
    ids[rows] = torch.arange(topk, dtype=ids.dtype, device=ids.device)
    return _own_weights("aiter", scores, bias, ids, renormalize, rsf), ids


nan_last_declared_lowest_experts = Candidate(
    name="nan-last-declared-lowest-experts", route=_nan_rows_to_lowest_experts,
    expected_deviations={"aiter": {"nan_last": "declared: NaN ranks first"}},
)  # fmt: skip


def returns_nothing(scores, bias, topk, renormalize, rsf):
    return None


# Everything but validity declared (validity cannot be): the check must still fail.
returns_nothing_all_declared = Candidate(
    name="returns-nothing-all-declared", route=returns_nothing,
    expected_deviations={"aiter": {name: "declared" for name in ("selection", "tie_order", "nan_last", "output_order",
                                                                  "renorm_guard", "scaling", "weight_accuracy")}},
)  # fmt: skip


def _weights_off_by(fraction: float):
    def route(scores, bias, topk, renormalize, rsf):
        """The contract's ids; each weight off by up to ``fraction`` of itself (seeded by the batch size)."""
        w, ids = _route("aiter", scores, bias, topk, renormalize, rsf)
        g = torch.Generator().manual_seed(int(scores.shape[0]))
        return w * (1 + fraction * torch.rand(w.shape, generator=g)).to(w.device), ids

    return route


def _weights_in_bf16(scores, bias, topk, renormalize, rsf):
    """The contract's weights rounded to bf16 once (a router that keeps bf16 weights): 2^-9 relative at most."""
    w, ids = _route("aiter", scores, bias, topk, renormalize, rsf)
    return w.to(torch.bfloat16).float(), ids


_ULP_LEVEL = {"aiter": {"weight_accuracy": "ULP-level differences (it says)"}}
# Weights 5 % off under a declaration of ULP-level differences: PASS on 75b5150 (a declared weight_accuracy excused a
# weight of any size), 71,677 of 71,677 rows "declared".
weights_5_percent_off_declared = Candidate(name="weights-5-percent-off-declared", route=_weights_off_by(0.05), expected_deviations=_ULP_LEVEL)
# The same 5 % under a bf16 declaration (2^-7): still beyond it.
weights_5_percent_off_declared_bf16 = Candidate(name="weights-5-percent-off-declared-bf16", route=_weights_off_by(0.05),
                                                expected_deviations=_ULP_LEVEL, declared_bounds={"aiter": {"weight_accuracy": 2.0**-7}})  # fmt: skip
# bf16 weights, declared as such: passes; declared as ULP-level (the default bound): fails.
weights_in_bf16_declared_bf16 = Candidate(name="weights-in-bf16-declared-bf16", route=_weights_in_bf16, expected_deviations=_ULP_LEVEL,
                                          declared_bounds={"aiter": {"weight_accuracy": 2.0**-7}})  # fmt: skip
weights_in_bf16_declared_ulp_level = Candidate(name="weights-in-bf16-declared-ulp-level", route=_weights_in_bf16, expected_deviations=_ULP_LEVEL)


def _lowest_ranked(scores, bias, topk, renormalize, rsf):
    """The k LOWEST-ranked experts, with the contract's weights for them."""
    _, ranking = oracle.ranking_values(scores, bias, "aiter")
    ids = torch.topk(-torch.nan_to_num(ranking, nan=0.0), topk, dim=1).indices.to(torch.int32)
    return _own_weights("aiter", scores, bias, ids, renormalize, rsf), ids


def _ranks_bf16_values(scores, bias, topk, renormalize, rsf):
    """The engines' torch routers' ranking: the sigmoid and the bias added in bf16 (other experts near the cutoff),
    the contract's weights for the experts chosen."""
    ranked = torch.sigmoid(scores.to(torch.bfloat16)) + bias.to(torch.bfloat16)
    ids = torch.topk(torch.nan_to_num(ranked.float(), nan=-math.inf), topk, dim=1).indices.to(torch.int32)
    return _own_weights("aiter", scores, bias, ids, renormalize, rsf), ids


_BF16_SELECTION = {"aiter": {"selection": "bf16 sigmoids choose other experts near the cutoff (it says)",
                              "tie_order": "bf16 sigmoids tie where fp32 ones do not", "output_order": "ranked by bf16 values"}}
# The k lowest-ranked experts under a declared selection: PASS on 75b5150 (a declared selection excused any choice).
lowest_ranked_declared_selection = Candidate(name="lowest-ranked-declared-selection", route=_lowest_ranked, expected_deviations=_BF16_SELECTION,
                                             declared_bounds={"aiter": {"selection": 2.0**-4}})  # fmt: skip
# bf16 ranking declared with a bf16 bound passes; declared with none (the default, 2^-16) fails.
bf16_ranking_declared_bf16 = Candidate(name="bf16-ranking-declared-bf16", route=_ranks_bf16_values, expected_deviations=_BF16_SELECTION,
                                       declared_bounds={"aiter": {"selection": 2.0**-4}})  # fmt: skip
bf16_ranking_declared_default = Candidate(name="bf16-ranking-declared-default", route=_ranks_bf16_values, expected_deviations=_BF16_SELECTION)


# ---------------------------------------------------------------- issue 34: group aspects, column order


def _grouped(contract, *, shuffle=False, **replaced):
    def route(scores, bias, topk, renormalize, rsf, *, num_expert_group, topk_group):
        c = _oracle(contract, **replaced)
        w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=c,
                              num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
        return _shuffled(w, ids) if shuffle else (w, ids)

    return route


deepseek_v3_shuffled = _grouped("deepseek-v3", shuffle=True)
deepseek_v3_reference_shuffled = _grouped("deepseek-v3-reference", shuffle=True)
group_max_sorted = _grouped("deepseek-v3", group_score="max")
group_max_shuffled = _grouped("deepseek-v3", group_score="max", shuffle=True)
group_ties_highest_sorted = _grouped("deepseek-v3", group_tie_rule="highest")
group_ties_highest_shuffled = _grouped("deepseek-v3", group_tie_rule="highest", shuffle=True)
minus_inf_mask_sorted = _grouped("deepseek-v3")  # checked under deepseek-v3-reference (0.0 mask)
minus_inf_mask_shuffled = _grouped("deepseek-v3", shuffle=True)


# ---------------------------------------------------------------- issue 34: weight rules


def _weights_variant(contract, edit):
    def route(scores, bias, topk, renormalize, rsf, **groups):
        w, ids = _route(contract, scores, bias, topk, renormalize, rsf, **groups)
        return edit(scores, bias, ids, w, renormalize, rsf, contract, groups).float(), ids

    return route


def _renorm_flipped(scores, bias, ids, w, renormalize, rsf, contract, groups):
    """Renormalizes when the flag is off, and not when it is on."""
    return _own_weights(contract, scores, bias, ids, not renormalize, rsf)


def _divided_by_k(scores, bias, ids, w, renormalize, rsf, contract, groups):
    return w / ids.shape[1]


def _scaled_twice(scores, bias, ids, w, renormalize, rsf, contract, groups):
    return w * rsf


def _no_renorm_no_scaling(scores, bias, ids, w, renormalize, rsf, contract, groups):
    return _own_weights(contract, scores, bias, ids, False, 1.0)


def _softmax_of_chosen(scores, bias, ids, w, renormalize, rsf, contract, groups):
    """A softmax over the k chosen logits, not over all E (softmax contracts)."""
    return torch.softmax(scores.float().gather(1, ids.long()), dim=1) * rsf


def _softmax_of_all(scores, bias, ids, w, renormalize, rsf, contract, groups):
    """A softmax over all E logits, gathered at the chosen ones (gpt-oss wants the k chosen only)."""
    p = torch.softmax(scores.float(), dim=1).gather(1, ids.long())
    if renormalize:
        p = p / p.sum(1, keepdim=True)
    return p * rsf


deepseek_renorm_flipped = _weights_variant("deepseek-v3", _renorm_flipped)
deepseek_divided_by_k = _weights_variant("deepseek-v3", _divided_by_k)
deepseek_scaled_twice = _weights_variant("deepseek-v3", _scaled_twice)
deepseek_no_renorm_no_scaling = _weights_variant("deepseek-v3", _no_renorm_no_scaling)
qwen3_softmax_of_chosen = _weights_variant("qwen3-moe", _softmax_of_chosen)
gpt_oss_softmax_of_all = _weights_variant("gpt-oss", _softmax_of_all)


# ---------------------------------------------------------------- issue 35: Gemma 4's per-expert weight scale
# The cases of a weight_scale="per_expert" contract draw a scale per expert (contracts.cases.build); each router
# here gets it and misapplies it in one way: all must fail `scaling`, the correct one must pass.


def _gemma4(scores, topk, renormalize, rsf, expert_scale=None):
    return oracle.route(scores, None, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="gemma4",
                        expert_scale=expert_scale)  # fmt: skip


def gemma4_scale_applied(scores, bias, topk, renormalize, rsf, *, expert_scale):
    """Correct: the oracle with the case's scale."""
    return _gemma4(scores, topk, renormalize, rsf, expert_scale)


def gemma4_scale_ignored(scores, bias, topk, renormalize, rsf, *, expert_scale):
    """The per-expert scale left out (what a router checked only with the model's initial all-ones scale gets away with)."""
    return _gemma4(scores, topk, renormalize, rsf)


def gemma4_scale_before_renorm(scores, bias, topk, renormalize, rsf, *, expert_scale):
    """The scale folded into the probabilities before renormalizing: the division takes part of it away."""
    _, ids = _gemma4(scores, topk, renormalize, rsf, expert_scale)
    chosen = torch.softmax(scores.float(), dim=1).gather(1, ids.long()) * expert_scale.float()[ids.long()]
    return (chosen / chosen.sum(1, keepdim=True)) * rsf, ids


def gemma4_scale_by_slot(scores, bias, topk, renormalize, rsf, *, expert_scale):
    """The scale indexed by output slot (scale[j]) instead of by the chosen expert's id (scale[ids[j]])."""
    w, ids = _gemma4(scores, topk, renormalize, rsf)
    return w * expert_scale.float()[:topk], ids


def gemma4_scale_twice(scores, bias, topk, renormalize, rsf, *, expert_scale):
    w, ids = _gemma4(scores, topk, renormalize, rsf, expert_scale)
    return w * expert_scale.float()[ids.long()], ids


# ---------------------------------------------------------------- issue 35: the shared expert slot
# Kimi-K2's contract with SGLang's fused shared expert (shared_expert_slot="last": k + 1 columns, the last the
# shared expert, id E, weight = routed sum / rsf). Before, the comparison read [M, topk] answers only: the slot went
# unchecked. Checked under tests/compare/test_row_whole.py's kimi-k2-shared.toml (this contract, as a file).

KIMI_K2_SHARED = oracle.get_contract("kimi-k2").replace(name="kimi-k2-shared", shared_expert_slot="last")


def _with_shared(scores, bias, topk, renormalize, rsf):
    return _route(KIMI_K2_SHARED, scores, bias, topk, renormalize, rsf)


def shared_slot_right(scores, bias, topk, renormalize, rsf):
    """Correct: the oracle's k + 1 columns."""
    return _with_shared(scores, bias, topk, renormalize, rsf)


def shared_slot_wrong_id(scores, bias, topk, renormalize, rsf):
    """The shared slot numbered E - 1 (the last routed expert's id) instead of E."""
    w, ids = _with_shared(scores, bias, topk, renormalize, rsf)
    ids[:, -1] = scores.shape[1] - 1
    return w, ids


def shared_slot_not_divided(scores, bias, topk, renormalize, rsf):
    """The shared weight is the routed weights' sum, not divided by routed_scaling_factor."""
    w, ids = _with_shared(scores, bias, topk, renormalize, rsf)
    w[:, -1] = w[:, -1] * rsf
    return w, ids


def shared_slot_missing(scores, bias, topk, renormalize, rsf):
    """Only the k routed columns: the slot left out."""
    w, ids = _with_shared(scores, bias, topk, renormalize, rsf)
    return w[:, :-1].contiguous(), ids[:, :-1].contiguous()


# ---------------------------------------------------------------- a declared group clause excuses only near flips


def _groups_chosen_by(pick):
    """deepseek-v3, the kept groups chosen by ``pick(group_scores [M, G], topk_group) -> bool [M, G]``, the contract's
    experts within them and the contract's weights for those: only the groups are wrong."""

    def route(scores, bias, topk, renormalize, rsf, *, num_expert_group, topk_group):
        _, ranking = oracle.ranking_values(scores, bias, "deepseek-v3")
        rows, experts = ranking.shape
        per_group = torch.nan_to_num(ranking, nan=-math.inf).view(rows, num_expert_group, experts // num_expert_group)
        group_scores = per_group.topk(2, dim=2).values.sum(2)
        kept = pick(torch.nan_to_num(group_scores, nan=-math.inf, neginf=-3e38), topk_group)
        masked = per_group.masked_fill(~kept.unsqueeze(2), -math.inf).view(rows, experts)
        ids = masked.topk(topk, dim=1).indices.to(torch.int32)
        return _own_weights("deepseek-v3", scores, bias, ids, renormalize, rsf), ids

    return route


def _lowest_groups(group_scores, topk_group):
    return torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, (-group_scores).topk(topk_group, dim=1).indices, True)


def _second_best_groups(group_scores, topk_group):
    """The kept groups but the best one, and the best dropped one in its place (far from a flip where the scores spread)."""
    order = group_scores.argsort(dim=1, descending=True, stable=True)
    return torch.zeros_like(group_scores, dtype=torch.bool).scatter_(1, order[:, 1 : topk_group + 1], True)


def _no_groups(group_scores, topk_group):
    return torch.ones_like(group_scores, dtype=torch.bool)


# What the engines' torch routers declare under deepseek-v3 (contracts/candidates/engines.py): bf16 group sums keep
# other groups, torch.topk breaks exact group-score ties its own way.
_GROUP_FLIPS = {"deepseek-v3": {"group_selection": "bf16 group sums keep other groups than the fp32 sums (it says)",
                                "group_mask": "experts of groups the contract drops are chosen where bf16 group sums flip (it says)",
                                "group_tie_order": "torch.topk breaks exact group-score ties its own way (it says)",
                                "tie_order": "torch.topk breaks exact ties its own way (it says)",
                                "nan_last": "torch.topk ranks NaN above every number (it says)"}}  # fmt: skip
# Each passed on 17a921b (11,586 of 11,603 rows excused, the rest NaN and tie rows, declared here as the torch
# routers declare them): a declared group_selection or group_mask excused groups of any score. Declared with the
# torch routers' bound for bf16 group sums, each must still fail.
_BF16_GROUP_BOUND = {"deepseek-v3": {"group_selection": 2.0**-4, "group_mask": 2.0**-4}}
lowest_groups_declared_group_flips = Candidate(name="lowest-groups-declared-group-flips", route=_groups_chosen_by(_lowest_groups),
                                               expected_deviations=_GROUP_FLIPS, declared_bounds=_BF16_GROUP_BOUND)  # fmt: skip
second_best_groups_declared_group_flips = Candidate(name="second-best-groups-declared-group-flips",
                                                    route=_groups_chosen_by(_second_best_groups), expected_deviations=_GROUP_FLIPS,
                                                    declared_bounds=_BF16_GROUP_BOUND)  # fmt: skip
no_groups_declared_group_flips = Candidate(name="no-groups-declared-group-flips", route=_groups_chosen_by(_no_groups),
                                           expected_deviations=_GROUP_FLIPS, declared_bounds=_BF16_GROUP_BOUND)  # fmt: skip


def _cutoff_for_minus_inf(scores, bias, topk, renormalize, rsf):
    """aiter: in rows holding an expert ranked -inf, the lowest expert chosen is swapped for one of those (a number
    given up for an expert no number ranks below), with the contract's weights for its own choice."""
    w, ids = _route("aiter", scores, bias, topk, renormalize, rsf)
    _, ranking = oracle.ranking_values(scores, bias, "aiter")
    minus_inf = ranking == -math.inf
    rows = minus_inf.any(1) & torch.isfinite(ranking.gather(1, ids[:, -1:].long())).squeeze(1)
    if bool(rows.any()):
        ids = ids.clone()
        ids[rows, -1] = minus_inf[rows].float().argmax(1).to(ids.dtype)
    return _own_weights("aiter", scores, bias, ids, renormalize, rsf), ids


# Declared as a bf16 ranking router declares its selection.
cutoff_for_minus_inf_declared_selection = Candidate(name="cutoff-for-minus-inf-declared-selection", route=_cutoff_for_minus_inf,
                                                    expected_deviations=_BF16_SELECTION, declared_bounds={"aiter": {"selection": 2.0**-4}})  # fmt: skip
