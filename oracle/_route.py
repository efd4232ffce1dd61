"""The routing function of every contract: one vectorized pipeline driven by the contract's fields.

Plain statement (per row; see ``oracle.Contract`` and docs/contracts_as_data.md)::

    s       = sigmoid(x) | softmax(x) | x          # scoring, fp32 (or rounded to the logits' dtype)
    ranking = s + bias                             # bias ranks only (when the contract has one)
    if grouped:                                    # n_group contiguous groups of E / n_group experts
        g    = top2_sum or max of ranking per group
        kept = the topk_group groups by (rank_key(g) desc, group priority asc)
        ranking outside the kept groups := group_mask (-inf or 0.0)
    ids     = the topk experts by (rank_key(ranking) desc, tie priority asc),
              NaN by the NaN rule, only values above the floor (else expert 0)
    w       = s[ids] (softmax over x[ids] for softmax_of_topk), renormalized by
              the contract's rule, scaled by routed_scaling_factor

How it is fast without being clever in the wrong place: one ``torch.topk``
over ``topk + 1`` values per row finds the selected *set* whenever the k-th
value is a number strictly above the (k+1)-th and no NaN is in sight (almost
every row of real logits). Only the k selected entries are then put in
contract order with exact keys. Rows where the cutoff is tied, or NaN, -inf
or the floor reach it, take the exact path: a composite int64 key
``rank_key * E + (E - 1 - priority)`` that is distinct per expert, so
``torch.topk`` over it has a single right answer whatever torch's own tie
behaviour is. Both paths give the same answer on a clean row, so which one
a row takes is only a matter of speed: each chunk first routes a few probe
rows the fast way, and when many of them are hard (inputs made of ties or
NaN) the rest of the chunk goes straight to the exact path instead of
paying for both. The kept groups are chosen by the same kind of composite
key over the group scores, with the group priority.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ._builtin import SERIAL_SENTINEL
from ._lookup import get_contract
from ._contracts import Contract
from ._keys import NAN_KEY, ordered_keys, rank_keys
from ._scores import expert_scores, ranking_dtype, ranking_from, sigmoid_of, softmax_rows
from ._tie_priority import group_tie_priority, tie_priority
from ._validate import RoutingArgumentError, check_expert_scale, check_route_args, resolve_groups

__all__ = ["SERIAL_SENTINEL", "RouteTrace", "ranking_values", "route", "route_trace", "route_with_values", "sigmoid"]

_CHUNK_ELEMENTS_CPU = 1024 * 896  # row chunks of about 3.5 MB of fp32 stay cache-resident
_CHUNK_ROWS_GPU = 1 << 16
_NAN_FIRST_KEY = 2**31  # above rank_key(+inf); the keys are int64 from here on
# The exact path's int32 selection keys order values as the rank keys do; only the order matters to a top-k,
# so NaN and ineligible values get room below rank_key(-inf) = -2**31 + 2**23 - 1 without widening to int64.
_SELECT_NAN_FIRST = 2**31 - 1  # above rank_key(+inf) = 0x7F800000
_SELECT_NAN_LAST = NAN_KEY + 1  # below rank_key(-inf)
_SELECT_INELIGIBLE = NAN_KEY  # below NaN: values at or under the floor (and NaN where never taken)
_PROBE_ROWS = 32  # rows of a chunk routed the fast way first, to see how many are hard
_HARD_SHARE = 4  # more than 1 in 4 probe rows hard: the exact path alone is cheaper for the rest


@functools.lru_cache(maxsize=32)
def _priority_on(experts: int, rule: str, device: torch.device) -> torch.Tensor:
    return tie_priority(experts, rule).to(device)


@functools.lru_cache(maxsize=32)
def _group_priority_on(n_group: int, rule: str, device: torch.device) -> torch.Tensor:
    return group_tie_priority(n_group, rule).to(device)


def sigmoid(scores: torch.Tensor, contract: str | Contract = "aiter") -> torch.Tensor:
    """fp32 sigmoid of ``scores`` by the contract's ``sigmoid_formula`` (whatever its scoring)."""
    return sigmoid_of(scores, get_contract(contract).sigmoid_formula)


def ranking_values(scores: torch.Tensor, bias: torch.Tensor | None, contract: str | Contract = "aiter"):
    """``(expert scores, ranking)``, both fp32 ``[M, E]``, as the contract computes them (before any group mask).

    For a sigmoid contract the scores are ``sig``; for softmax ``p``; for
    softmax_of_topk the logits. ``ranking`` is ``scores + bias`` or ``scores``.
    """
    c = get_contract(contract)
    s = expert_scores(scores, c)
    return s, ranking_from(s, bias, c, scores.dtype)


@dataclass(frozen=True)
class RouteTrace:
    """What the oracle computed, for explaining mismatches. Tensors are on the inputs' device.

    ``expert_scores`` / ``ranking`` fp32 ``[M, E]``: see ``ranking_values``.
    ``selection_ranking`` fp32 ``[M, E]``: the values top-k ran on (``ranking``
    with the group mask applied; ``ranking`` itself when ungrouped).
    ``group_scores`` fp32 ``[M, G]`` and ``kept_groups`` int64 ``[M, topk_group]``
    (best first): ``None`` when ungrouped. ``valid`` int64 ``[M]``: slots filled
    by an eligible expert (the rest hold the expert-0 fallback).
    """

    contract: Contract
    weights: torch.Tensor
    ids: torch.Tensor
    expert_scores: torch.Tensor
    ranking: torch.Tensor
    selection_ranking: torch.Tensor
    group_scores: torch.Tensor | None
    kept_groups: torch.Tensor | None
    valid: torch.Tensor
    n_group: int
    topk_group: int
    renormalize: bool
    routed_scaling_factor: float

    @property
    def kept_group_mask(self) -> torch.Tensor | None:
        """bool ``[M, G]``: the kept groups."""
        if self.kept_groups is None:
            return None
        mask = torch.zeros(self.group_scores.shape, dtype=torch.bool, device=self.group_scores.device)
        return mask.scatter_(1, self.kept_groups, True)

    @property
    def cutoff(self) -> torch.Tensor:
        """fp32 ``[M]``: the selection value of the last eligible slot (NaN where none is)."""
        slot = (self.valid - 1).clamp(min=0).unsqueeze(1)
        value = self.selection_ranking.gather(1, self.ids.long().gather(1, slot)).squeeze(1)
        return value.masked_fill(self.valid == 0, float("nan"))

    @property
    def group_cutoff(self) -> torch.Tensor | None:
        """fp32 ``[M]``: the score of the weakest kept group."""
        if self.kept_groups is None:
            return None
        return self.group_scores.gather(1, self.kept_groups[:, -1:]).squeeze(1)


def route(
    scores: torch.Tensor,
    bias: torch.Tensor | None,
    topk: int,
    *,
    renormalize: bool | None = None,
    routed_scaling_factor: float | None = None,
    contract: str | Contract = "aiter",
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    expert_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Route ``scores`` ``[M, E]`` under ``contract``; returns ``(weights fp32, ids int32)``, each ``[M, topk]``.

    ``renormalize``, ``routed_scaling_factor``, ``num_expert_group`` and
    ``topk_group`` default to the contract's (``default_renormalize``,
    ``routed_scaling_factor``, ``n_group``, ``topk_group``). ``bias`` may be
    ``None`` for a contract without a correction bias (one given is ignored).
    Inputs are never modified. Works on any device torch supports, for
    bf16/fp16/fp32 logits and bias in any memory layout (row-strided,
    column-strided, transposed: the same bits), any ``1 <= topk <= E``.
    ``renormalize`` and ``routed_scaling_factor`` must be options the
    contract admits (``Contract.admits``; else a ``RoutingArgumentError``).
    ``expert_scale``: the ``[E]`` per-expert weight scale of a
    ``weight_scale="per_expert"`` contract (default all ones, the
    model's initial value). A ``shared_expert_slot="last"`` contract returns
    ``topk + 1`` columns, the last one the shared expert (id E).
    """
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, contract, num_expert_group, topk_group,
                  expert_scale, keep=False)


def route_with_values(
    scores: torch.Tensor,
    bias: torch.Tensor | None,
    topk: int,
    *,
    renormalize: bool | None = None,
    routed_scaling_factor: float | None = None,
    contract: str | Contract = "aiter",
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    expert_scale: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``route`` plus the fp32 expert scores (``sig``) and ``ranking`` ``[M, E]`` it ranked with."""
    t = route_trace(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor,
                    contract=contract, num_expert_group=num_expert_group, topk_group=topk_group,
                    expert_scale=expert_scale)  # fmt: skip
    return t.weights, t.ids, t.expert_scores, t.ranking


def route_trace(
    scores: torch.Tensor,
    bias: torch.Tensor | None,
    topk: int,
    *,
    renormalize: bool | None = None,
    routed_scaling_factor: float | None = None,
    contract: str | Contract = "aiter",
    num_expert_group: int | None = None,
    topk_group: int | None = None,
    expert_scale: torch.Tensor | None = None,
) -> RouteTrace:
    """``route`` with everything it computed on the way, as a ``RouteTrace``."""
    return _route(scores, bias, topk, renormalize, routed_scaling_factor, contract, num_expert_group, topk_group,
                  expert_scale, keep=True)


@dataclass(frozen=True)
class _Plan:
    """One call's resolved arguments."""

    c: Contract
    topk: int
    n_group: int
    topk_group: int
    renormalize: bool
    rsf: float
    priority: torch.Tensor
    group_priority: torch.Tensor
    low_precision: torch.dtype | None  # score_precision="input": the 16-bit dtype ranking values are rounded to
    expert_scale: torch.Tensor | None = None  # weight_scale="per_expert": the [E] scale, else None
    weight_dtype: torch.dtype | None = None  # weight_precision="input" on 16-bit logits: the dtype weights round to


def _route(scores, bias, topk, renormalize, rsf, contract, num_expert_group, topk_group, expert_scale, *, keep):
    c = get_contract(contract)
    renormalize = c.default_renormalize if renormalize is None else renormalize
    rsf = c.routed_scaling_factor if rsf is None else rsf
    check_route_args(scores, bias, topk, renormalize, rsf, bias_required=c.has_bias)
    refused = c.admits(renormalize=renormalize, routed_scaling_factor=rsf)
    if refused:
        raise RoutingArgumentError(refused)
    expert_scale = check_expert_scale(expert_scale, c, scores)
    rows, experts = scores.shape
    if experts > 1 and scores.stride(1) != 1:  # column-strided or transposed: the same values, read densely
        scores = scores.contiguous()
    n_group, n_kept = resolve_groups(c, experts, num_expert_group, topk_group)
    if n_group > 1 and c.group_score == "topk_share_sum" and not 1 <= topk // n_kept <= experts // n_group:
        raise RoutingArgumentError(f"topk={topk}, topk_group={n_kept}: group_score topk_share_sum sums the top topk // topk_group "
                                   f"= {topk // n_kept} values of each group of {experts // n_group}; it needs 1 <= topk // topk_group <= E / num_expert_group")
    device = scores.device
    bias = bias if c.has_bias else None
    plan = _Plan(c, topk, n_group, n_kept, renormalize, float(rsf), _priority_on(experts, c.tie_rule, device),
                 _group_priority_on(n_group, c.group_tie_rule, device),
                 ranking_dtype(c, scores.dtype, bias.dtype if bias is not None else None), expert_scale,
                 weight_dtype(c, scores.dtype))  # fmt: skip
    out = _Outputs(rows, experts, plan, device, keep)
    chunk = max(1, _CHUNK_ELEMENTS_CPU // experts) if device.type == "cpu" else _CHUNK_ROWS_GPU
    for start in range(0, rows, chunk):
        stop = min(start + chunk, rows)
        out.store(start, stop, _route_rows(scores[start:stop], bias, plan, keep))
    return out.result(c, plan)


class _Outputs:
    """The call's output tensors, filled chunk by chunk."""

    def __init__(self, rows, experts, plan, device, keep):
        f32 = dict(dtype=torch.float32, device=device)
        self.keep = keep
        self.weights = torch.empty((rows, plan.topk), **f32)
        self.ids = torch.empty((rows, plan.topk), dtype=torch.int32, device=device)
        if keep:
            grouped = plan.n_group > 1
            self.values = [torch.empty((rows, experts), **f32) for _ in range(3 if grouped else 2)]
            self.groups = (torch.empty((rows, plan.n_group), **f32),
                           torch.empty((rows, plan.topk_group), dtype=torch.int64, device=device)) if grouped else None  # fmt: skip
            self.valid = torch.empty(rows, dtype=torch.int64, device=device)

    def store(self, start, stop, chunk):
        self.weights[start:stop] = chunk.weights
        self.ids[start:stop] = chunk.ids
        if self.keep:
            for dst, src in zip(self.values, (chunk.scores, chunk.ranking, chunk.selection)):  # selection if grouped
                dst[start:stop] = src
            if self.groups is not None:
                self.groups[0][start:stop] = chunk.group_scores
                self.groups[1][start:stop] = chunk.kept_groups
            self.valid[start:stop] = chunk.valid

    def result(self, c, plan):
        if c.shared_expert_slot == "last":
            self.weights, self.ids = _with_shared_slot(self.weights, self.ids, plan)
        if not self.keep:
            return self.weights, self.ids
        ranking, selection = self.values[1], self.values[-1]
        groups = self.groups or (None, None)
        return RouteTrace(c, self.weights, self.ids, self.values[0], ranking, selection,
                          groups[0], groups[1], self.valid, plan.n_group, plan.topk_group, plan.renormalize, plan.rsf)  # fmt: skip


def _with_shared_slot(weights: torch.Tensor, ids: torch.Tensor, plan: _Plan) -> tuple[torch.Tensor, torch.Tensor]:
    """One more column: the shared expert, numbered E after the routed ones, weighted by the routed weights'
    sum (in output order) divided by routed_scaling_factor (SGLang's fused shared expert)."""
    experts = plan.priority.shape[0]
    shared_w = (_sequential_sum(weights) / plan.rsf).unsqueeze(1)
    shared_id = torch.full((ids.shape[0], 1), experts, dtype=ids.dtype, device=ids.device)
    return torch.cat((weights, shared_w), dim=1), torch.cat((ids, shared_id), dim=1)


@dataclass
class _Chunk:
    weights: torch.Tensor
    ids: torch.Tensor
    scores: torch.Tensor
    ranking: torch.Tensor
    selection: torch.Tensor
    group_scores: torch.Tensor | None
    kept_groups: torch.Tensor | None
    valid: torch.Tensor | None


def _route_rows(x: torch.Tensor, bias, plan: _Plan, keep: bool) -> _Chunk:
    c = plan.c
    scores = expert_scores(x, c)
    ranking = ranking_from(scores, bias, c, x.dtype)
    group_scores = kept = None
    selection = ranking
    if plan.n_group > 1:
        group_scores = _group_scores(ranking, plan.n_group, c, plan.low_precision, plan.topk // plan.topk_group)
        kept = _kept_groups(group_scores, plan.topk_group, plan.group_priority, c)
        if plan.topk_group < plan.n_group:
            selection = _mask_groups(ranking, kept, plan.n_group, c.group_mask)
    ids = _select(selection, plan.topk, plan.priority, c)
    valid = (ids >= 0).sum(1) if keep and c.has_fallback else None
    if c.has_fallback:
        ids.clamp_(min=0)  # the expert-0 fallback
    if keep and valid is None:
        valid = torch.full((x.shape[0],), plan.topk, dtype=torch.int64, device=x.device)
    weights = _weights(scores, ranking, ids, plan, x.dtype)
    return _Chunk(weights, ids, scores, ranking, selection, group_scores, kept, valid)


def _rule_keys(values: torch.Tensor, nan_rule: str) -> torch.Tensor:
    """int64 rank keys with NaN placed by ``nan_rule`` (``never`` ranks it last; eligibility is apart)."""
    keys = rank_keys(values).long()
    if nan_rule == "first":
        keys.masked_fill_(torch.isnan(values), _NAN_FIRST_KEY)
    return keys


def _composite(keys: torch.Tensor, priority: torch.Tensor, n: int) -> torch.Tensor:
    # Distinct per expert (or group): equal keys are separated by the priority, which is < n.
    return keys.long() * n + (n - 1 - priority)


def _group_scores(ranking: torch.Tensor, n_group: int, c: Contract, low_precision, share: int = 2) -> torch.Tensor:
    """fp32 [M, G]: each group's top2_sum, max or topk_share_sum (the sum of its top ``share`` = topk // topk_group
    values) of ranking values, NaN by the NaN rule; zeros unsigned.

    With ``low_precision`` the sum is rounded to that dtype, as the ranking values were.
    The top two come from two max reductions (several times faster than
    ``torch.topk`` over short groups): the second is the largest value left
    once the maximum is removed, or the maximum again when it occurs twice.
    ``amax`` propagates NaN, which is the order of ``nan_rule="first"``; for the
    other rules the groups holding NaN are redone on rank keys, NaN lowest.
    """
    rows, experts = ranking.shape
    size = experts // n_group
    per_group = ranking.view(rows, n_group, size)
    if c.group_score == "topk_share_sum":
        return _share_sum(per_group, share, c, low_precision)
    first = per_group.amax(dim=2, keepdim=True)
    if c.group_score == "top2_sum":
        at_max = per_group == first
        rest = per_group.masked_fill(at_max, -float("inf")).amax(dim=2)
        second = torch.where(at_max.sum(2) > 1, first.squeeze(2), rest)
        top = torch.stack((first.squeeze(2), second), dim=2)
    else:
        top = first
    if c.nan_rule != "first":
        hit = torch.isnan(top[..., 0]).any(1).nonzero().squeeze(1)
        if hit.numel():
            sub = per_group.index_select(0, hit)
            pick = torch.topk(rank_keys(sub), top.shape[2], dim=2).indices  # NAN_KEY is the lowest key
            top.index_copy_(0, hit, sub.gather(2, pick))
    score = top[..., 0] + top[..., 1] if c.group_score == "top2_sum" else top[..., 0]
    if low_precision is not None and c.group_score == "top2_sum":
        score = score.to(low_precision).float()
    return score + 0.0  # -0.0 and +0.0 share a key; which one a max returns is not the contract's


def _share_sum(per_group: torch.Tensor, share: int, c: Contract, low_precision) -> torch.Tensor:
    """fp32 [M, G]: the sum of each group's ``share`` largest ranking values (Megatron-core's group_limited_topk:
    ``topk(topk // group_topk)[0].sum(-1)``), taken in rank-key order (NaN by the NaN rule), added in fp32 from the
    largest down, rounded to ``low_precision`` when the ranking is (a sum of 16-bit values in their dtype)."""
    keys = _rule_keys(per_group, c.nan_rule)
    top = per_group.gather(2, torch.topk(keys, share, dim=2).indices)
    score = top[..., 0]
    for j in range(1, share):
        score = score + top[..., j]
    if low_precision is not None:
        score = score.to(low_precision).float()
    return score + 0.0


def _kept_groups(group_scores: torch.Tensor, topk_group: int, priority: torch.Tensor, c: Contract) -> torch.Tensor:
    """int64 [M, topk_group]: the kept groups, best first."""
    n_group = group_scores.shape[1]
    comp = _composite(_rule_keys(group_scores, c.nan_rule), priority, n_group)
    return torch.topk(comp, topk_group, dim=1).indices


def _mask_groups(ranking: torch.Tensor, kept: torch.Tensor, n_group: int, mask_value: float) -> torch.Tensor:
    rows, experts = ranking.shape
    keep = torch.zeros((rows, n_group), dtype=torch.bool, device=ranking.device).scatter_(1, kept, True)
    per_group = ranking.view(rows, n_group, experts // n_group)
    return per_group.masked_fill(~keep.unsqueeze(2), mask_value).view(rows, experts)


def _fast_set(values: torch.Tensor, topk: int, c: Contract) -> tuple[torch.Tensor, torch.Tensor]:
    """(columns of the topk largest values, rows where that set is the contract's without tie-breaking)."""
    width = min(topk + 1, values.shape[1])
    top_values, candidates = torch.topk(values, width, dim=1)
    kth = top_values[:, topk - 1]
    lower = -float("inf") if c.floor is None else c.floor
    clean = (kth > lower) & ~torch.isnan(top_values).any(dim=1)
    if width > topk:
        clean &= kth != top_values[:, topk]
    return candidates[:, :topk], clean


def _in_order(chosen: torch.Tensor, chosen_values: torch.Tensor, priority: torch.Tensor, experts: int) -> torch.Tensor:
    """The experts ``chosen`` (a clean row's set) in contract order: key descending, then tie priority."""
    comp = _composite(rank_keys(chosen_values), priority[chosen], experts)
    return chosen.gather(1, comp.argsort(dim=1, descending=True))


def _selection_keys(values: torch.Tensor, c: Contract) -> torch.Tensor:
    """int32 keys in the order the contract ranks ``values``: NaN by the NaN rule, ineligible values lowest.

    The rank keys of ``_keys`` with NaN and the floor folded in (one NaN pass, not two).
    """
    keys = ordered_keys(values)
    nan_key = {"first": _SELECT_NAN_FIRST, "last": _SELECT_NAN_LAST, "never": _SELECT_INELIGIBLE}[c.nan_rule]
    keys.masked_fill_(torch.isnan(values), nan_key)
    if c.floor is not None:
        keys.masked_fill_(values <= c.floor, _SELECT_INELIGIBLE)  # NaN compares false: its key stays
    return keys


def _exact(values: torch.Tensor, topk: int, priority: torch.Tensor, c: Contract) -> torch.Tensor:
    """int64 ids of the rows ``values`` by composite keys: ties, NaN, -inf and the floor decided exactly."""
    experts = values.shape[1]
    keys = _selection_keys(values, c)
    # rank key * E + (E - 1 - priority), widened to int64 inside the one add
    top = torch.topk(torch.add(experts - 1 - priority, keys, alpha=experts), topk, dim=1).indices
    if c.has_fallback:
        top.masked_fill_(keys.gather(1, top) == _SELECT_INELIGIBLE, -1)
    return top


def _fast_then_exact(values: torch.Tensor, topk: int, priority: torch.Tensor, c: Contract) -> tuple[torch.Tensor, int]:
    """(int64 ids in contract order, how many rows were hard): the fast set, with hard rows redone exactly."""
    chosen, clean = _fast_set(values, topk, c)
    ids = _in_order(chosen, values.gather(1, chosen), priority, values.shape[1])
    hard = (~clean).nonzero().squeeze(1)
    if hard.numel():
        ids.index_copy_(0, hard, _exact(values.index_select(0, hard), topk, priority, c))
    return ids, hard.numel()


def _select(values: torch.Tensor, topk: int, priority: torch.Tensor, c: Contract) -> torch.Tensor:
    """int64 ids ``[M, topk]`` in contract order; slots no eligible value can fill hold ``-1``.

    Eligible: every expert, NaN placed by the NaN rule; with a floor only
    values strictly above it (and NaN unless the rule is ``never``); with
    ``nan_rule="never"`` no NaN.
    """
    probe = min(values.shape[0], _PROBE_ROWS)
    head, hard = _fast_then_exact(values[:probe], topk, priority, c)
    if probe == values.shape[0]:
        return head
    rest = values[probe:]
    if hard * _HARD_SHARE > probe:  # many rows like these are hard: one exact pass instead of two
        return torch.cat((head, _exact(rest, topk, priority, c)))
    return torch.cat((head, _fast_then_exact(rest, topk, priority, c)[0]))


def renorm_denominator(total: torch.Tensor, c) -> torch.Tensor:
    """What the weights' ``total`` is divided by under ``c.renormalize`` (not ``lp``): the total itself where positive
    and 1 elsewhere (``guard``), the total plus ``renorm_eps`` (``eps``), or the bare total. Shared with
    ``oracle.grad``'s differentiable weights, so the two read the rule from one place."""
    if c.renormalize == "guard":
        return torch.where(total > 0, total, torch.ones_like(total))
    if c.renormalize == "eps":
        return total + c.renorm_eps
    return total


def _sequential_sum(w: torch.Tensor) -> torch.Tensor:
    # fp32, in output order, one column at a time: the order a kernel's loop adds in.
    total = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device)
    for j in range(w.shape[1]):
        total = total + w[:, j]
    return total


def _weights(scores, ranking, ids, plan: _Plan, dtype: torch.dtype) -> torch.Tensor:
    c = plan.c
    if plan.weight_dtype is not None:
        return _weights_in(scores, ranking, ids, plan, plan.weight_dtype)
    w = (ranking if c.bias == "in_weight" else scores).gather(1, ids)
    if c.scoring == "softmax_of_topk":
        w = softmax_rows(w)
        if c.score_precision == "input" and dtype in (torch.bfloat16, torch.float16):
            w = w.to(dtype).float()
    elif c.scoring == "sigmoid_of_topk":
        w = sigmoid_of(w, c.sigmoid_formula)  # the chosen logits, exactly as given (fp32)
    if not renormalizes(plan.c, plan.renormalize, plan.topk):
        return _scaled_per_expert(w * plan.rsf, ids, plan)
    if c.renormalize == "lp":
        return _scaled_per_expert(_lp_normalized(w, c.renorm_p) * plan.rsf, ids, plan)
    denom = renorm_denominator(_sequential_sum(w), c)
    if c.scaling == "fused":
        return _scaled_per_expert(w * (torch.full_like(denom, plan.rsf) / denom).unsqueeze(1), ids, plan)
    return _scaled_per_expert((w / denom.unsqueeze(1)) * plan.rsf, ids, plan)


def renormalizes(c: Contract, renormalize: bool, topk: int) -> bool:
    """Whether a call's weights are divided by their sum: as the call says (``renormalize_when="call"``); whatever it
    says when topk > 1 (``"always"``, Megatron-core's sigmoid: ``if topk > 1``); or never (``"never"``, Megatron-core's
    post-softmax: the softmax over the k chosen is the weights, and no flag reaches it)."""
    if c.renormalize_when == "always":
        return topk > 1
    if c.renormalize_when == "never":
        return False
    return bool(renormalize)


def weight_dtype(c: Contract, logits: torch.dtype) -> torch.dtype | None:
    """The 16-bit dtype a ``weight_precision="input"`` contract computes weights in (the logits'), else None."""
    return logits if c.weight_precision == "input" and logits in (torch.bfloat16, torch.float16) else None


def _weights_in(scores, ranking, ids, plan: _Plan, low: torch.dtype) -> torch.Tensor:
    """``weight_precision="input"``: each step of the weights computed as eager torch code on ``low`` tensors does
    (fp32 arithmetic, each result rounded to ``low``): the gathered scores, the sum (fp32, in output order) and the
    sum + epsilon, the quotient, the product with routed_scaling_factor (an fp32 scalar). Megatron-core::

        probs = scores / (scores.sum(dim=-1, keepdim=True) + 1e-20)   # scores in logits.dtype
        probs = probs * scaling_factor
    """
    c = plan.c

    def r(t):
        return t.to(low).float()

    w = (ranking if c.bias == "in_weight" else scores).gather(1, ids)
    if c.scoring == "softmax_of_topk":
        w = softmax_rows(w)
    elif c.scoring == "sigmoid_of_topk":
        w = sigmoid_of(w, c.sigmoid_formula)
    w = r(w)
    if not renormalizes(plan.c, plan.renormalize, plan.topk):
        return _scaled_per_expert(r(w * plan.rsf), ids, plan)
    if c.renormalize == "lp":
        return _scaled_per_expert(r(r(_lp_normalized(w, c.renorm_p)) * plan.rsf), ids, plan)
    total = r(_sequential_sum(w))
    if c.renormalize == "guard":
        denom = torch.where(total > 0, total, torch.ones_like(total))
    elif c.renormalize == "eps":
        denom = r(total + c.renorm_eps)
    else:
        denom = total
    if c.scaling == "fused":
        return _scaled_per_expert(r(w * r(torch.full_like(denom, plan.rsf) / denom).unsqueeze(1)), ids, plan)
    return _scaled_per_expert(r(r(w / denom.unsqueeze(1)) * plan.rsf), ids, plan)


def _lp_normalized(w: torch.Tensor, p: float) -> torch.Tensor:
    """``w / ||w||_p`` per row, through float64 and rounded once (a zero norm gives NaN, as torch's division)."""
    w64 = w.double()
    norm = w64.abs().pow(p).sum(dim=1, keepdim=True).pow(1.0 / p)
    return (w64 / norm).float()


def _scaled_per_expert(w: torch.Tensor, ids: torch.Tensor, plan: _Plan) -> torch.Tensor:
    # weight_scale="per_expert": the last step, w * scale[id] (Gemma 4 multiplies after renormalizing)
    if plan.expert_scale is None:
        return w
    return w * plan.expert_scale.to(w.device).float()[ids]
