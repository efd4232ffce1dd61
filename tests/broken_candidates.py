"""Deliberately broken routers (and one independent correct one) for runner tests.

Each is a plain callable ``fn(scores, bias, topk, renormalize, routed_scaling_factor)``
loaded by ``contracts.check --candidate tests.broken_candidates:NAME``. They are
built on ``_route``, an argsort implementation of the aiter contract written
independently of the oracle's top-k path; each defect switches one thing off.
"""

import torch

import oracle


def _route(
    scores,
    bias,
    topk,
    renormalize,
    rsf,
    *,
    rule="aiter",
    nan_like_neg_inf=False,
    bias_in_weight=False,
    guard=True,
    scale_times=1,
    id_order=False,
    scale_over_sum=False,
):
    experts = scores.shape[1]
    sig, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking).long()
    if nan_like_neg_inf:
        keys[torch.isnan(ranking)] = int(oracle.rank_keys(torch.tensor([-float("inf")]))[0])
    priority = oracle.tie_priority(experts, rule).to(scores.device)
    # Sort by key descending, then priority ascending: sort by priority first, then stably by key.
    by_priority = torch.argsort(priority.expand_as(keys), dim=1)
    order = torch.argsort(keys.gather(1, by_priority), dim=1, descending=True, stable=True)
    ids = by_priority.gather(1, order)[:, :topk]
    if id_order:
        ids = ids.sort(dim=1).values
    w = (ranking if bias_in_weight else sig).gather(1, ids)
    if renormalize and scale_over_sum:  # w * (rsf / sum), guarded: rsf / sum overflows for a positive sum < rsf / FLT_MAX
        total = w.sum(1, keepdim=True)
        return w * torch.where(total > 0, rsf / total, torch.full_like(total, rsf)), ids.to(torch.int32)
    if renormalize:
        total = w.sum(1, keepdim=True)
        w = w / torch.where(total > 0, total, torch.ones_like(total)) if guard else w / total
    for _ in range(scale_times):
        w = w * rsf
    return w, ids.to(torch.int32)


def correct_argsort(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf)


def wrong_tie_order(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, rule="lowest")


def nan_like_neg_inf(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, nan_like_neg_inf=True)


def bias_in_weights(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, bias_in_weight=True)


def no_renorm_guard(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, guard=False)


def scale_over_sum(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, scale_over_sum=True)


def scaled_twice(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, scale_times=2)


def output_in_id_order(scores, bias, topk, renormalize, rsf):
    return _route(scores, bias, topk, renormalize, rsf, id_order=True)


def duplicate_ids(scores, bias, topk, renormalize, rsf):
    w, ids = _route(scores, bias, topk, renormalize, rsf)
    ids[:, -1] = ids[:, 0]
    return w, ids


def writes_its_input(scores, bias, topk, renormalize, rsf):
    out = _route(scores, bias, topk, renormalize, rsf)
    scores[:, 0] = 0.0
    return out


def other_tie_rule_above_1024_rows(scores, bias, topk, renormalize, rsf):
    rule = "lowest" if scores.shape[0] > 1024 else "aiter"
    return _route(scores, bias, topk, renormalize, rsf, rule=rule)


def int64_ids(scores, bias, topk, renormalize, rsf):
    w, ids = _route(scores, bias, topk, renormalize, rsf)
    return w, ids.long()


def raises(scores, bias, topk, renormalize, rsf):
    raise RuntimeError("planted failure inside the candidate")
