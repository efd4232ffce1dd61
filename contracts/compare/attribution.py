"""Which clauses a mismatched row breaks: every aspect checked on every row, vectorized.

A row is looked at in three independent aspects, each naming at most one
clause (the most specific explanation that fits):

1. **validity**: ids out of range, an expert twice (but the expert-0
   fallback of contracts that have one).
2. **ids**: the candidate's experts against the expected ones.
   - special values first: NaN chosen over a number, NaN slots in the wrong
     order, NaN chosen at all where the contract never takes it, aiter's
     round index emitted as an id (``nan_last``); slots beyond the values
     that beat the floor (``sentinel_fallback``);
   - grouped contracts: experts from a group the contract dropped
     (``group_mask`` when more groups were used than kept, or the mask value
     let a dropped expert through; ``group_selection`` when the candidate
     kept other groups and chose right within them; ``group_tie_order`` when
     those groups tie the kept ones exactly, and then its experts are judged
     within the groups it kept, so an expert tie broken there is also
     ``tie_order``: ``contracts.compare.group_ties``);
   - equal ranking keys: an exact tie (equal inputs, both saturated, both
     masked, or an infinite value) broken against the tie rule is
     ``tie_order``; keys that are equal only by rounding, or values within
     both scores' error bounds, are a **near tie** (not a failure);
   - the counterfactuals: the ids a router would give that ranks -0.0 apart
     from +0.0 (``signed_zero``, only when no simpler explanation fits), or
     that flushes subnormal ranking values to zero (named in the reason);
   - otherwise ``selection`` (another set) or ``output_order`` (the same
     set in another order; never for contracts whose order is ``any``).
3. **weights**: the candidate's weights against the contract's weights *for
   the candidate's own experts* (matched by expert id), so a wrong selection
   never hides a broken renormalization. Weights that are the contract's
   rounded to a 16-bit dtype (the logits' bf16/fp16, or one the candidate's
   weights all lie in) are a cast, ``weight_accuracy``, before any rule is
   tried (bf16 top-1 weights that round to 1.0 look renormalized, bf16 top-2
   ones that sum to 1/2 look renormalized and halved); each rule is then
   also tried rounded, so a rule broken in bf16 keeps its name:
   ``bias_in_weight`` (the weights are built from sig + bias), ``renorm_guard`` (a zero or negative sum divided,
   or no renormalization), ``scaling`` (the factor applied twice or not at
   all), else ``weight_accuracy``.

The result is per-row arrays (``Blame``); text is made later, only for the
rows a report shows (``contracts.compare.reasons``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch

import oracle

from .group_ties import at_the_mask, masked_outside, ranked_group_scores, tie_resolution
from .tolerance import broadcast_isclose, near_allowance, weights_close

__all__ = ["CLAUSE_ORDER", "Blame", "NEAR_TIE", "attribute"]

# Every clause name, in the order a row's primary clause is chosen (the first broken one wins).
CLAUSE_ORDER: tuple[str, ...] = (
    "validity", "group_mask", "group_selection", "group_tie_order", "nan_last", "sentinel_fallback",
    "tie_order", "signed_zero", "selection", "output_order", "bias_in_weight", "renorm_guard", "renormalization",
    "softmax_scope", "scaling", "weight_accuracy",
)  # fmt: skip
INDEX = {name: i for i, name in enumerate(CLAUSE_ORDER)}
NEAR_TIE = -2  # the ids aspect found only a near tie
NONE = -1

# Reason codes: (clause, code) -> the reason's template; {slot}, {n}, {extra}, {missing}, ... are filled per row.
R_OUT_OF_RANGE, R_TWICE, R_FALLBACK_EARLY = 1, 2, 3
R_ROUND_INDEX, R_NAN_OVER_NUMBER, R_NAN_ORDER, R_NAN_TAKEN, R_NUMBER_OVER_NAN, R_NAN_GROUPS = 10, 11, 12, 13, 14, 15
R_SENTINEL = 20
R_GROUP_MASK, R_GROUP_SELECTION, R_GROUP_TIE, R_GROUP_MASK_VALUE = 30, 31, 32, 33
R_TIE_SET, R_TIE_ORDER, R_SIGNED_ZERO, R_NEAR_ULP, R_NEAR_SET, R_NAN_TIE = 40, 41, 42, 44, 45, 46
R_SELECTION, R_SELECTION_FTZ, R_ORDER, R_ORDER_FTZ, R_NOT_TOP_NUMBERS, R_NOT_TOP_ELIGIBLE = 50, 51, 52, 53, 54, 55
R_BIAS, R_GUARD_DIVIDED, R_NOT_RENORMALIZED, R_SCALING, R_ACCURACY = 60, 61, 62, 63, 64
R_RENORMALIZED, R_SOFTMAX_OF_CHOSEN, R_SOFTMAX_OF_ALL, R_FACTOR, R_EPS_MISSING = 65, 66, 67, 68, 69
R_EPS_ADDED, R_GUARD_ADDED = 74, 75
# How far bf16 arithmetic (a sigmoid, a sum of k, a division and a scaling, each rounded to 8 bits) takes a weight: below
# 2^-5 for k up to 16; twice that.
_NARROW_ARITHMETIC = 2.0**-4
# a per-expert weight scale (weight_scale="per_expert") ignored, applied before renormalizing, taken by slot, or twice
R_SCALE_IGNORED, R_SCALE_BEFORE_RENORM, R_SCALE_BY_SLOT, R_SCALE_TWICE = 70, 71, 72, 73
# the shared expert's column (shared_expert_slot="last", contracts.compare.shared): its id, its weight
R_SHARED_ID, R_SHARED_WEIGHT = 80, 81
# the contract's weights rounded to bf16 / fp16: the weights were cast to a 16-bit dtype (weight_accuracy)
R_CAST_BF16, R_CAST_FP16 = 90, 91
# a dense answer's row (contracts.compare.dense): the routing_map holds more or fewer than k experts, or probs are
# nonzero (NaN, infinite) outside it
R_DENSE_MORE, R_DENSE_FEWER, R_DENSE_OUTSIDE = 100, 101, 102


@dataclass
class Blame:
    """Per bad row (the rows passed in, in order): the clause of each aspect (index into CLAUSE_ORDER, or NONE / NEAR_TIE)."""

    validity: torch.Tensor  # [B] NONE or INDEX["validity"]
    ids: torch.Tensor  # [B] clause index, NONE, or NEAR_TIE
    weights: torch.Tensor  # [B] clause index or NONE
    validity_code: torch.Tensor
    ids_code: torch.Tensor
    weights_code: torch.Tensor
    slot: torch.Tensor  # [B] the first differing slot (-1 if none)
    # [B, k] the contract's weights for the candidate's own experts (where the row also breaks renorm_guard in a narrower
    # arithmetic, that rule's weights): what a declared weight_accuracy's bound is measured from
    reference_weights: torch.Tensor
    weights_ok: torch.Tensor  # [B, k] bool
    # The row-whole check of the ids, beside a clause that frees part of them (nan_last, sentinel_fallback):
    # ``selection`` when the experts that clause does not free are not the top ones.
    core: torch.Tensor | None = None
    core_code: torch.Tensor | None = None
    # A second weight rule the same row breaks (renormalization and scaling both missing, say).
    weights2: torch.Tensor | None = None
    weights2_code: torch.Tensor | None = None
    factor: torch.Tensor | None = None  # [B] the constant a ``scaling`` row's weights are off by (NaN if none)
    # [B] how far past the contract's cutoff the row's choice reaches, relative (``selection_departure``): what a
    # declared ``selection`` must bound
    selection_departure: torch.Tensor | None = None
    # [B] how far the groups the row's experts came from depart from a choice of groups by score, relative
    # (``group_departure``): what a declared ``group_selection`` or ``group_mask`` must bound
    group_departure: torch.Tensor | None = None

    def __post_init__(self):
        none = torch.full_like(self.ids, NONE)
        for name in ("core", "core_code", "weights2", "weights2_code"):
            if getattr(self, name) is None:
                setattr(self, name, none.clone() if not name.endswith("code") else torch.zeros_like(self.ids))
        if self.factor is None:
            self.factor = torch.full(self.ids.shape, math.nan, device=self.ids.device)
        for name in ("selection_departure", "group_departure"):
            if getattr(self, name) is None:
                setattr(self, name, torch.zeros(self.ids.shape, device=self.ids.device))

    def aspects(self) -> tuple[torch.Tensor, ...]:
        """The clause of every aspect, in the order reasons are listed: validity, ids, the row-whole ids, weights (two)."""
        return (self.validity, self.ids, self.core, self.weights, self.weights2)

    def codes(self) -> tuple[torch.Tensor, ...]:
        return (self.validity_code, self.ids_code, self.core_code, self.weights_code, self.weights2_code)

    def broken(self) -> torch.Tensor:
        """bool [B, len(CLAUSE_ORDER)]: every clause each row breaks."""
        rows = self.ids.shape[0]
        out = torch.zeros((rows, len(CLAUSE_ORDER)), dtype=torch.bool, device=self.ids.device)
        for aspect in self.aspects():
            hit = aspect >= 0
            out[hit.nonzero().squeeze(1), aspect[hit]] = True
        return out


@dataclass
class _Rows:
    """What attribution needs of the bad rows, gathered once."""

    e: torch.Tensor  # [B, k] expected ids (long)
    a: torch.Tensor  # [B, k] actual ids clamped into range (long)
    w: torch.Tensor  # [B, k] actual weights
    we: torch.Tensor  # [B, k] expected weights
    keys: torch.Tensor  # [B, E]
    selection: torch.Tensor  # [B, E]
    ranking: torch.Tensor  # [B, E]
    scores: torch.Tensor  # [B, E]
    x: torch.Tensor  # [B, E] logits as fp32
    bias: torch.Tensor | None  # [E]
    x_max: torch.Tensor  # [B] the row's largest logit (NaN ignored): a softmax's error grows with the distance to it
    valid: torch.Tensor  # [B] eligible slots of the oracle's answer
    kept: torch.Tensor | None  # [B, G] bool
    group_scores: torch.Tensor | None  # [B, G]


def _gather(m: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    return m.gather(1, ids)


def _member(ids: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """bool [B, k]: ids[:, j] is in the row's pool."""
    return (ids.unsqueeze(2) == pool.unsqueeze(1)).any(2)


def _same_inputs(r: _Rows, p: torch.Tensor, q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(same logit, same bias), broadcast of p and q: equal as values (-0.0 == +0.0, NaN == NaN)."""
    xp, xq = _gather(r.x, p.flatten(1)).view(p.shape), _gather(r.x, q.flatten(1)).view(q.shape)
    same_x = (xp == xq) | (torch.isnan(xp) & torch.isnan(xq))
    if r.bias is None:
        return same_x, torch.ones_like(same_x)
    bp, bq = r.bias[p], r.bias[q]
    return same_x, (bp == bq) | (torch.isnan(bp) & torch.isnan(bq))


def _exact_pairs(r: _Rows, p: torch.Tensor, q: torch.Tensor, c) -> torch.Tensor:
    """bool, broadcast of p and q: experts p and q tie exactly in every faithful implementation."""
    x, keys, sel = r.x, r.keys, r.selection
    kp, kq = _gather(keys, p.flatten(1)).view(p.shape), _gather(keys, q.flatten(1)).view(q.shape)
    xp, xq = _gather(x, p.flatten(1)).view(p.shape), _gather(x, q.flatten(1)).view(q.shape)
    vp = _gather(sel, p.flatten(1)).view(p.shape)
    same_x, same_b = _same_inputs(r, p, q)
    if c.scoring == "sigmoid":
        saturated = ((xp >= 20) & (xq >= 20)) | ((xp <= -90) & (xq <= -90))
    elif c.scoring == "softmax":
        top = torch.nan_to_num(x, nan=-math.inf).amax(1).view(-1, *([1] * (p.dim() - 1)))
        saturated = ((xp - top) <= -110) & ((xq - top) <= -110)  # exp underflows to exactly 0
    else:
        saturated = torch.zeros_like(same_x)
    exact = torch.isinf(vp) | (same_b & (same_x | saturated)) | (p == q)
    if r.kept is not None:
        group = r.x.shape[1] // r.kept.shape[1]
        kept_p = r.kept.gather(1, (p // group).flatten(1)).view(p.shape)
        kept_q = r.kept.gather(1, (q // group).flatten(1)).view(q.shape)
        exact |= ~kept_p & ~kept_q  # both masked: the mask value ties them
    return (kp == kq) & exact


def _near_pairs(r: _Rows, c, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """bool, broadcast of p and q: the two experts' selection values lie within both scores' error bounds."""

    def at(m, ids):
        return _gather(m, ids.flatten(1)).view(ids.shape)

    top = r.x_max.view(-1, *([1] * (p.dim() - 1)))
    vp, vq = at(r.selection, p), at(r.selection, q)
    ap = near_allowance(at(r.scores, p), at(r.x, p), c, top)
    aq = near_allowance(at(r.scores, q), at(r.x, q), c, top)
    finite = torch.isfinite(vp) & torch.isfinite(vq)
    return finite & ((vp - vq).abs() <= ap + aq)


def _select_under(values: torch.Tensor, topk: int, c) -> torch.Tensor:
    """The ids the contract would choose from ``values`` (a counterfactual ranking), in contract order."""
    return oracle.select_ids(values, topk, contract=c).long()


def _priorities(r: _Rows, c) -> list[torch.Tensor]:
    """Tie priorities a router may use (lower wins): the contract's, lowest index, highest index."""
    experts = r.x.shape[1]
    index = torch.arange(experts, device=r.x.device)
    return [oracle.tie_priority(experts, c.tie_rule).to(r.x.device), index, experts - 1 - index]


def _minus_zeros(r: _Rows) -> torch.Tensor:
    """long [B, E]: 1 where the ranking value is -0.0 (the sign the signed_zero clause is about)."""
    return ((r.selection == 0) & torch.signbit(r.selection)).long()


def _rule_explains(rank: torch.Tensor, chosen: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """bool [B]: by ``rank`` ([B, E] or [E], lower wins) every chosen member of ``group`` beats every unchosen one."""
    rank = rank.expand_as(group)
    worst_chosen = torch.where(chosen & group, rank, torch.full_like(rank, -1)).amax(1)
    best_unchosen = torch.where(~chosen & group, rank, torch.full_like(rank, 1 << 40)).amin(1)
    return (chosen & group).any(1) & (worst_chosen < best_unchosen)


def _sign_explains(r: _Rows, c, chosen: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """bool [B]: ranking -0.0 values apart from +0.0 ones (either way, ties then by one of ``_priorities``)
    chose ``chosen`` out of the tie ``group`` ([B, E] masks), and no plain tie rule alone does."""
    experts = r.x.shape[1]
    neg = _minus_zeros(r)
    signed = torch.zeros(chosen.shape[0], dtype=torch.bool, device=chosen.device)
    plain = torch.zeros_like(signed)
    for priority in _priorities(r, c):
        plain |= _rule_explains(priority, chosen, group)
        for worse in (neg, 1 - neg):  # -0.0 below +0.0, or above it
            signed |= _rule_explains(worse * experts + priority, chosen, group)
    return signed & ~plain


def _ftz_alternative(r: _Rows, c, k: int) -> torch.Tensor | None:
    """Ids a router would give that flushes subnormal ranking values to zero (None if the rows have none)."""
    sub = (r.selection != 0) & (r.selection.abs() < 2.0**-126)
    if not bool(sub.any()):
        return None
    return _select_under(r.selection.masked_fill(sub, 0.0), k, c)


_LOWEST = -(1 << 42)  # a rank key below every real one (ineligible experts)


def _contract_keys(r: _Rows, c) -> torch.Tensor:
    """int64 [B, E]: the order the contract ranks the experts in: NaN by the NaN rule, ineligible values lowest."""
    keys = r.keys.long()
    nan = torch.isnan(r.selection)
    if c.nan_rule == "first":
        keys = keys.masked_fill(nan, 1 << 40)
    elif c.nan_rule == "never":
        keys = keys.masked_fill(nan, _LOWEST)
    if c.floor is not None:
        keys = keys.masked_fill(r.selection <= c.floor, _LOWEST)
    return keys


def _eligible(r: _Rows, c) -> torch.Tensor:
    """bool [B, E]: experts a contract with a fallback may choose (a number above the floor); every expert otherwise."""
    if not c.has_fallback:
        return torch.ones_like(r.selection, dtype=torch.bool)
    ok = ~torch.isnan(r.selection)
    return ok & (r.selection > c.floor) if c.floor is not None else ok


def _repeats(ids: torch.Tensor) -> torch.Tensor:
    """long [B, k]: how many earlier slots of the row hold the same id (0 for a first occurrence)."""
    k = ids.shape[1]
    slots = torch.arange(k, device=ids.device)
    earlier = slots.view(1, 1, -1) < slots.view(1, -1, 1)
    return ((ids.unsqueeze(2) == ids.unsqueeze(1)) & earlier).sum(2)


def _unmatched(ids: torch.Tensor, other: torch.Tensor) -> torch.Tensor:
    """bool [B, k]: slots of ``ids`` left over when the two rows are matched as multisets, one for one."""
    count = (ids.unsqueeze(2) == other.unsqueeze(1)).sum(2)
    return _repeats(ids) >= count


def _near_values(c, vp, sp, xp, vq, sq, xq, top) -> torch.Tensor:
    """bool: two experts' selection values lie within both scores' error bounds (values, scores, logits broadcast)."""
    ap, aq = near_allowance(sp, xp, c, top), near_allowance(sq, xq, c, top)
    return torch.isfinite(vp) & torch.isfinite(vq) & ((vp - vq).abs() <= ap + aq)


def _near_to(r: _Rows, c, p: torch.Tensor, anchor: torch.Tensor) -> torch.Tensor:
    """bool [B, n]: each expert of ``p`` [B, n] is a near pair of the row's ``anchor`` expert [B, 1]."""
    top = r.x_max.unsqueeze(1)
    vals = [(_gather(m, p), _gather(m, anchor)) for m in (r.selection, r.scores, r.x)]
    return _near_values(c, vals[0][0], vals[1][0], vals[2][0], vals[0][1], vals[1][1], vals[2][1], top)


def _same_ids(alt: torch.Tensor, a: torch.Tensor, c) -> torch.Tensor:
    """bool [B]: ``alt`` gives the candidate's ids: slot by slot, or as a set where the contract's order is ``any``."""
    if c.output_order == "any":
        return (alt.sort(1).values == a.sort(1).values).all(1)
    return (alt == a).all(1)


def _ids_aspect(r: _Rows, c, differs: torch.Tensor, invalid: torch.Tensor, *, groups_settled: bool = False):
    """(clause, code, first differing slot, freed, within clause, within code) of the ids aspect, per row; ``freed``
    [B, k]: the slots whose expert the clause found (nan_last's round index) leaves free, for the row-whole check;
    ``within``: where the clause is a group tie resolved another way, what the router's experts break within the
    groups it kept (``_within_tied_groups``; NONE elsewhere). ``groups_settled``: ``r``'s groups are the ones to judge
    the experts in (no group clause is tried)."""
    rows, k = r.e.shape
    clause = torch.full((rows,), NONE, dtype=torch.long, device=r.e.device)
    code = torch.zeros_like(clause)
    order_matters = c.output_order != "any"
    diff_slot = (r.e != r.a)
    slot = torch.where(diff_slot.any(1), diff_slot.float().argmax(1), torch.full_like(clause, -1))
    todo = differs & ~invalid

    def assign(mask, name, reason):
        nonlocal todo
        hit = todo & mask
        clause[hit] = INDEX[name] if isinstance(name, str) else name
        code[hit] = reason
        todo = todo & ~hit

    # The two rows as multisets (the fallback repeats expert 0): what the candidate has over, what it lacks.
    extra, missing = _unmatched(r.a, r.e), _unmatched(r.e, r.a)
    same_set = ~extra.any(1)
    ke, ka = _gather(r.keys, r.e), _gather(r.keys, r.a)
    nan_e, nan_a = ke == oracle.NAN_KEY, ka == oracle.NAN_KEY
    slots = torch.arange(k, device=r.e.device)
    freed = torch.zeros_like(extra)

    # groups: a choice the contract's own rule gives within other groups (group scores, group ties, the mask
    # value) before the special values, which would otherwise take the blame for an expert of another group
    grouped = r.kept is not None and not groups_settled
    replaced = None
    if grouped:
        replaced = _group_aspect(r, c, todo, assign, extra, first=True)

    within, within_code = torch.full_like(clause, NONE), torch.zeros_like(code)
    # Under nan_rule "first" NaN group scores tie one another at the top, and a router that keeps other NaN groups
    # takes the numbers of those groups over the NaN experts of the contract's: the group tie is read before the
    # NaN clause, which would otherwise blame those numbers (Megatron's group_limited_topk, nan_sparse rows with
    # more NaN groups than it keeps; tests/test_trainers.py).
    tie_read_first = grouped and c.nan_rule == "first"
    if tie_read_first:
        tied_groups, within, within_code = _within_tied_groups(r, c, todo, extra)
        assign(tied_groups, "group_tie_order", R_GROUP_TIE)

    # special values
    if c.nan_rule == "last":
        minus_inf_e = _gather(r.ranking, r.e) == -math.inf
        # aiter's round index stands in a slot only once the values above -inf have run out
        numbers = (~torch.isnan(r.selection) & (r.selection > -math.inf)).sum(1, keepdim=True)
        freed = (r.a == slots) & (slots >= numbers) & extra & (r.e != slots) & (nan_e | minus_inf_e)
        assign(freed.any(1), "nan_last", R_ROUND_INDEX)
        assign((extra & nan_a).any(1) & (missing & ~nan_e).any(1), "nan_last", R_NAN_OVER_NUMBER)
        if order_matters:
            numbers = (~torch.isnan(r.selection)).sum(1)
            assign((diff_slot & (slots >= numbers.unsqueeze(1))).any(1), "nan_last", R_NAN_ORDER)
        else:  # a set: other NaN experts fill the slots numbers cannot
            assign((extra & nan_a).any(1) & (missing & nan_e).any(1), "nan_last", R_NAN_ORDER)
    elif c.nan_rule == "never":
        assign((extra & nan_a).any(1), "nan_last", R_NAN_TAKEN)
    else:  # "first": a number taken over a NaN expert; an extra NaN of a group the contract drops is no number
        # (the selection keys mask it as -inf), it is the group clauses' (NaN group scores tie at the top)
        number_a = ~torch.isnan(_gather(r.ranking, r.a))
        assign((extra & ~nan_a & number_a).any(1) & (missing & nan_e).any(1), "nan_last", R_NUMBER_OVER_NAN)
    if c.has_fallback:
        assign((diff_slot & (slots >= r.valid.unsqueeze(1))).any(1), "sentinel_fallback", R_SENTINEL)

    if grouped:
        if not tie_read_first:
            # groups that tie the kept ones, kept in their place: the group tie rule's, and the experts judged there
            tied_groups, within, within_code = _within_tied_groups(r, c, todo, extra)
            assign(tied_groups, "group_tie_order", R_GROUP_TIE)
        _group_aspect(r, c, todo, assign, extra, first=False)

    # The row whole: every expert the candidate has over and every one it lacks must sit at the expected
    # cutoff, on its key (an exact tie, or keys equal by rounding) or within both scores' error bounds of
    # its value (a near tie). Only then can a difference be a tie broken otherwise or a near tie; a
    # dropped top-1 expert, or a repeat in place of a chosen expert, is a selection whatever else holds.
    rk = _contract_keys(r, c)
    rk_e, rk_a = _gather(rk, r.e), _gather(rk, r.a)
    counted = slots < r.valid.unsqueeze(1)  # the expected slots filled by an eligible expert
    cut_slot = torch.where(counted, rk_e, torch.full_like(rk_e, 1 << 62)).argmin(1, keepdim=True)
    cut, cut_expert = rk_e.gather(1, cut_slot), r.e.gather(1, cut_slot)
    relevant = extra.unsqueeze(2) & missing.unsqueeze(1)  # [B, k(actual), k(expected)]: an extra expert against a missing one
    near_or_equal = (_near_pairs(r, c, r.a.unsqueeze(2), r.e.unsqueeze(1)) | (ka.unsqueeze(2) == ke.unsqueeze(1))) & relevant
    # (a near pair across the cutoff also counts: two faithful roundings may differ from the oracle's cutoff value
    # by more than the cutoff expert's own bound; each side of the swap must still have its own partner)
    ok_a = ~extra | (rk_a == cut) | _near_to(r, c, r.a, cut_expert) | near_or_equal.any(2)
    ok_e = ~missing | (rk_e == cut) | _near_to(r, c, r.e, cut_expert) | near_or_equal.any(1)
    whole = ok_a.all(1) & ok_e.all(1) & (r.valid > 0)

    # equal keys: exact ties, near ties; the counterfactuals
    pair_exact = _exact_pairs(r, r.a.unsqueeze(2), r.e.unsqueeze(1), c) & relevant
    pair_near = near_or_equal & ~pair_exact
    extra_exact, extra_near = pair_exact.any(2), pair_near.any(2)
    set_explained = whole & (~extra | extra_exact | extra_near).all(1)
    set_near = whole & (~extra | extra_near).all(1)
    # The same set in another order: look at the pairs of experts whose relative order differs from the
    # expected one. Exact ties among them broken against the rule are tie_order; if only near-tied pairs
    # swapped (an expert moved past two exactly tied ones that kept their order), it is a near tie.
    where = (r.a.unsqueeze(2) == r.e.unsqueeze(1)).float().argmax(2)  # slot of each actual expert in the expected list
    inverted = (slots.view(1, -1, 1) < slots.view(1, 1, -1)) & (where.unsqueeze(2) > where.unsqueeze(1))
    a_i, a_j = r.a.unsqueeze(2), r.a.unsqueeze(1)
    ka_i, ka_j = ka.unsqueeze(2), ka.unsqueeze(1)
    inv_exact = inverted & _exact_pairs(r, a_i, a_j, c)
    inv_near = inverted & (_near_pairs(r, c, a_i, a_j) | (ka_i == ka_j)) & ~inv_exact
    order_explained = (~inverted | inv_exact | inv_near).all(2).all(1)
    order_near = (~inverted | inv_near).all(2).all(1)

    # signed_zero: where ranking values -0.0 and +0.0 tie (a contract that ranks logits, gpt-oss; the
    # sigmoid contracts never rank a -0.0), the answer is what ranking them apart gives, and no plain
    # tie rule gives it. Before tie_order: a router that declares its tie order must not hide a sign bug
    # behind it. Sets: the chosen members of the expected cutoff's tie group; orders: the expert put at
    # the first differing slot, out of the same-key experts placed from there on.
    neg = _minus_zeros(r).bool()
    zero = r.selection == 0
    mixed = (zero & neg).any(1) & (zero & ~neg).any(1)
    if bool((todo & mixed).any()):
        first = slot.clamp(min=0).unsqueeze(1)
        a0 = r.a.gather(1, first)
        chosen = torch.zeros_like(zero).scatter_(1, r.a, True)
        cutoff = _gather(r.keys, r.e).amin(1, keepdim=True)  # a set differs at the expected cutoff's tie group
        group = (r.keys == cutoff) & zero
        by_set = whole & (~extra | _gather(zero, r.a)).all(1) & _sign_explains(r, c, chosen, group)
        later = torch.zeros_like(zero).scatter_(1, r.a, (slots >= first).expand_as(r.a))
        placed = torch.zeros_like(zero).scatter_(1, a0, True)
        by_order = _gather(zero, a0).squeeze(1) & _sign_explains(r, c, placed, later & zero)
        assign(mixed & torch.where(same_set, order_matters & by_order, by_set), "signed_zero", R_SIGNED_ZERO)
    # An exact tie broken against the rule is tie_order, even beside near ties (those alone are no failure).
    assign(~same_set & set_explained & ~set_near, "tie_order", R_TIE_SET)
    assign(same_set & order_matters & order_explained & ~order_near, "tie_order", R_TIE_ORDER)
    assign(~same_set & set_near, NEAR_TIE, R_NEAR_SET)
    assign(same_set & order_matters & order_near, NEAR_TIE, R_NEAR_ULP)

    # Another set, no tie nor near tie within the contract's groups and no expert of a group it drops: did the router
    # keep a group that ties the kept ones exactly at the cutoff, in place of a tied one it then took no expert of?
    # (torch.topk's own order among bf16 group sums that tie: Megatron's group_limited_topk in bf16_near_ties rows,
    # e.g. bf16_near_ties:619007217:1024 row 955 under mcore-sigmoid.) The experts are then judged within the groups
    # it kept; only here, after the ties within the contract's own groups, so a near tie stays a near tie.
    if grouped and bool((todo & ~same_set).any()):
        late, late_within, late_code = _within_tied_groups(r, c, todo & ~same_set, extra, unused=True)
        within = torch.where(late & todo, late_within, within)
        within_code = torch.where(late & todo, late_code, within_code)
        assign(late, "group_tie_order", R_GROUP_TIE)
    if grouped and replaced is not None:
        assign(replaced, "group_selection", R_GROUP_SELECTION)

    ftz = _ftz_alternative(r, c, k) if bool(todo.any()) else None
    ftz_match = _same_ids(ftz, r.a, c) if ftz is not None else torch.zeros_like(todo)
    assign(~same_set & ftz_match, "selection", R_SELECTION_FTZ)
    assign(~same_set, "selection", R_SELECTION)
    if order_matters:
        assign(same_set & ftz_match, "output_order", R_ORDER_FTZ)
        assign(same_set, "output_order", R_ORDER)
    return clause, code, slot, freed, within, within_code


def _rows_at(r: _Rows, rows: torch.Tensor) -> _Rows:
    """The fields of ``rows`` (indices into ``r``'s rows) of ``r``; the bias is per expert, shared."""
    return _Rows(**{f: (getattr(r, f).index_select(0, rows) if f != "bias" and getattr(r, f) is not None else getattr(r, f))
                    for f in r.__dataclass_fields__})  # fmt: skip


def _within_tied_groups(r: _Rows, c, todo: torch.Tensor, extra: torch.Tensor,
                        unused: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(rows [B], clause [B], code [B])``: the ``todo`` rows whose groups resolve a group-score tie another way than
    the contract (``group_ties.tie_resolution``), and the ids aspect of their experts against the contract's choice
    within the groups that resolution keeps (NONE where they are that choice, or a near tie of it); ``extra`` [B, k]:
    the router's experts the contract does not choose. ``unused``: the resolutions that keep another tied group in
    place of a tied one the contract keeps and the router took no expert of (``tie_resolution``'s ``unused``)."""
    hit = torch.zeros_like(todo)
    clause = torch.full(todo.shape, NONE, dtype=torch.long, device=todo.device)
    code = torch.zeros_like(clause)
    if not bool(todo.any()):
        return hit, clause, code
    resolves, groups = tie_resolution(r.a, extra, r.ranking, r.kept, r.group_scores, c.topk_group, c.group_mask,
                                      nan_first=c.nan_rule == "first", unused=unused)
    sub = (todo & resolves).nonzero().squeeze(1)
    if sub.numel() == 0:
        return hit, clause, code
    kept = groups.index_select(0, sub)
    s = _rows_at(r, sub)
    selection = masked_outside(s.ranking, kept, c.group_mask)
    e = _select_under(selection, s.e.shape[1], c.replace(n_group=1, topk_group=1))
    s = dataclasses.replace(s, e=e, selection=selection, keys=oracle.rank_keys(selection.contiguous()), kept=kept)
    differs = ~_same_ids(e, s.a, c)
    inner, inner_code, *_ = _ids_aspect(s, c, differs, torch.zeros_like(differs), groups_settled=True)
    failing = inner >= 0  # a near tie (NEAR_TIE) or the contract's own choice there (NONE) adds no clause
    # The reading explains a row only where the experts within those groups break a tie rule at most: other experts
    # there (selection) mean the groups were not a tie's resolution but something else (lmdeploy's 0.0 mask in a
    # few_valid row of -inf groups took experts that rank below the kept groups' own: group_mask, as before this
    # reading; tests/compare/test_group_ties.py), so such a row goes on to the group clauses.
    explained = ~failing | torch.isin(inner, _TIE_CLAUSES.to(inner.device))
    hit[sub] = explained
    clause[sub] = torch.where(failing & explained, inner, clause[sub])
    code[sub] = torch.where(failing & explained, inner_code, code[sub])
    return hit, clause, code


_TIE_CLAUSES = torch.tensor([INDEX[name] for name in ("tie_order", "nan_last", "signed_zero")])


def _group_aspect(r: _Rows, c, todo: torch.Tensor, assign, extra: torch.Tensor, *, first: bool) -> torch.Tensor | None:
    """Experts chosen from groups the contract dropped (grouped contracts), compared as sets where the order is ``any``.

    ``first``: the explanations by the contract's own rule within other groups (more groups than kept, group
    scores, group ties, the other mask value); else what is left of a leak (``group_mask``). Returns (``first``) the
    rows whose router kept another group in place of one it took none of, its experts the top ones of the groups it
    used (``group_selection`` unless a tie within the contract's own groups explains them; None: no such row)."""
    if not bool(todo.any()):
        return None
    rows, k = r.a.shape
    n_group = r.kept.shape[1]
    size = r.x.shape[1] // n_group
    used = torch.zeros_like(r.kept).scatter_(1, r.a // size, True)
    # an expert the oracle did not choose, from a dropped group (the oracle itself fills NaN slots from them)
    leaked = (extra & ~r.kept.gather(1, r.a // size)).any(1)
    if not first:
        assign(leaked, "group_mask", R_GROUP_MASK)
        return None
    ungrouped = c.replace(n_group=1, topk_group=1)
    # The right groups, masked with the other value (-inf where the contract says 0.0, or the reverse).
    other = 0.0 if math.isinf(c.group_mask) else -math.inf
    masked = r.ranking.view(rows, n_group, size).masked_fill(~r.kept.unsqueeze(2), other).view(rows, -1)
    alt = _select_under(masked, k, ungrouped)
    assign(_same_ids(alt, r.a, c) & ~_same_ids(alt, r.e, c), "group_mask", R_GROUP_MASK_VALUE)
    # The contract's pipeline with one group rule changed (the other group tie rule, the other group score):
    # the candidate's experts may come from groups the oracle kept (masked values filling NaN slots), so every
    # row is tried, not only those with an expert of a dropped group.
    other_tie = "highest" if c.group_tie_rule == "lowest" else "lowest"
    other_score = "max" if c.group_score == "top2_sum" else "top2_sum"
    # the contract's group scores as it ranks them (under nan_rule "first" NaN ties at the top: group_ties)
    ranked_scores = ranked_group_scores(r.group_scores, c.nan_rule == "first")
    cutoff = ranked_scores.masked_fill(~r.kept, math.inf).amin(1, keepdim=True)
    for score, tie, name, why in ((c.group_score, other_tie, "group_tie_order", R_GROUP_TIE),
                                  (other_score, c.group_tie_rule, "group_selection", R_GROUP_SELECTION),
                                  (other_score, other_tie, "group_selection", R_GROUP_SELECTION)):  # fmt: skip
        masked, alt_kept = _masked_by(r, c, score, tie)
        alt = _select_under(masked, k, ungrouped)
        hit = _same_ids(alt, r.a, c) & ~_same_ids(alt, r.e, c)
        if name == "group_selection":
            # The other group score keeps other groups only among those the contract's scores tie exactly at its
            # cutoff: the groups differ by a group tie, which the tie readings judge (the experts within them too).
            # An unrounded top-2 sum of bf16 values can order groups whose bf16 sums tie as torch.topk happened to
            # (Megatron's group_limited_topk: batch_sizes:1828424403:33 row 18 under mcore-sigmoid).
            hit &= ~((ranked_scores == cutoff) | ~(alt_kept ^ r.kept)).all(1)
        assign(hit, name, why)
    e_groups = torch.zeros_like(r.kept).scatter_(1, r.e // size, True)
    # No expert of a dropped group, but none of a group the contract took experts from either: the router kept another
    # group in its place, whose experts lost to those of the groups both kept (the mask 0.0, or tiny scores). Only
    # where the groups it lost score within 2^-5 of the best group the contract drops (group sums in bf16 flip
    # there); a router that keeps one group too few is no group_selection.
    lost = e_groups & ~used
    lost_score = r.group_scores.masked_fill(~lost, math.inf).amin(1)
    best_dropped = r.group_scores.masked_fill(r.kept, -math.inf).amax(1)
    close = torch.isfinite(lost_score) & torch.isfinite(best_dropped) & (lost_score - best_dropped <= 2.0**-5 * lost_score.abs())
    replaced = ~leaked & lost.any(1) & (used.sum(1) < c.topk_group) & close
    # ... and where every group it lost ties the best dropped one exactly (groups of one finite expert all score
    # -inf: few_valid), another of the tied groups was kept: group_tie_order, if its numbers are the top numbers of
    # the groups it used (its -inf picks are ties among themselves)
    lost_best = r.group_scores.masked_fill(~lost, -math.inf).amax(1)
    tied_away = ~leaked & lost.any(1) & (used.sum(1) < c.topk_group) & (lost_best == best_dropped) & (lost_score == best_dropped)
    if bool((todo & (leaked | replaced | tied_away)).any()):
        # Kept other groups, chose right within them? The contract's selection restricted to the used groups.
        within = r.ranking.view(rows, n_group, size).masked_fill(~used.unsqueeze(2), -math.inf).view(rows, -1)
        alt = _select_under(within, k, ungrouped)
        consistent = _same_ids(alt, r.a, c)
        # ... or chose its numbers right, its -inf picks being ties among themselves (and the group ties' doing)
        same_numbers = (_numbers_among(r, alt) == _numbers_among(r, r.a)).all(1)
        assign(tied_away & same_numbers, "group_tie_order", R_GROUP_TIE)
        # Kept other groups only among those whose group score is NaN (each group it took a number from that the
        # contract drops, and each the contract keeps that it took none from, scores NaN: a NaN among the group's top
        # experts), its numbers the top numbers of its groups: where such groups rank (a router scoring a group by its
        # numbers keeps one holding a number over one of NaN only) is the NaN rule's, fixed in the group scores, not in
        # the mask. (Groups of its -inf and NaN picks are fills, as the contract's own NaN slots are.)
        numbered = _groups_of(r, torch.isfinite(_gather(r.ranking, r.a)))
        swapped = numbered ^ r.kept
        among_nan = (numbered & ~r.kept).any(1) & (torch.isnan(r.group_scores) | ~swapped).all(1)
        # Under nan_rule "first" NaN group scores tie one another at the top: which of them are kept is a group tie.
        if c.nan_rule == "first":
            assign(leaked & same_numbers & among_nan, "group_tie_order", R_GROUP_TIE)
        else:
            assign(leaked & same_numbers & among_nan, "nan_last", R_NAN_GROUPS)
        e_used = e_groups.sum(1)
        # more groups used than kept: a pick at or below a 0.0 mask uses no group (what the mask makes of any dropped
        # expert, tying the kept groups' zeros: the tie and mask clauses below judge it, the second pass's leak too)
        n_used = _groups_of(r, ~at_the_mask(r.a, r.ranking, c.group_mask, c.topk_group, n_group)).sum(1)
        # Do the groups it used tie the kept ones exactly (group scores equal at the cutoff, as ranked above)?
        tied = ((ranked_scores == cutoff) | ~(used & ~r.kept)).all(1)
        assign(leaked & (n_used > e_used.clamp(min=c.topk_group)), "group_mask", R_GROUP_MASK)
        assign(leaked & (consistent | same_numbers) & tied, "group_tie_order", R_GROUP_TIE)
        assign(leaked & consistent, "group_selection", R_GROUP_SELECTION)
        # another group kept with none of its experts taken: read after the ties within the contract's own groups (the
        # caller), for where those groups are the router's too an exact tie among their experts gives the same answer
        # (batch_sizes:93963946:255 row 124 under mcore-sigmoid: Megatron kept the contract's groups and took expert 129
        # over 48, tied at 0.98828125; the group it lost was read as replaced)
        return replaced & consistent
    return None


def _groups_of(r: _Rows, picks: torch.Tensor) -> torch.Tensor:
    """bool [B, G]: the groups of the candidate's experts where ``picks`` [B, k] is True."""
    size = r.ranking.shape[1] // r.kept.shape[1]
    return torch.zeros(r.kept.shape, device=r.a.device).scatter_reduce_(1, r.a // size, picks.float(), "amax") > 0


def _numbers_among(r: _Rows, ids: torch.Tensor) -> torch.Tensor:
    """bool [B, E]: the experts of ``ids`` whose ranking value is a finite number."""
    return torch.zeros_like(r.ranking, dtype=torch.bool).scatter_(1, ids, torch.isfinite(_gather(r.ranking, ids)))


def _masked_by(r: _Rows, c, score: str, tie: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(fp32 [B, E], bool [B, G]): the ranking with the groups a group score rule ``score`` and group tie rule ``tie``
    drop masked, and the groups they keep."""
    rows, experts = r.ranking.shape
    n_group = r.kept.shape[1]
    per_group = r.ranking.view(rows, n_group, experts // n_group)
    if score == c.group_score:
        group_scores = r.group_scores
    else:
        keys = oracle.rank_keys(per_group.contiguous())  # NaN lowest, ...
        if c.nan_rule == "first":  # ... or first, as the contract ranks it: a NaN among a group's top makes it NaN
            keys = keys.long().masked_fill(torch.isnan(per_group), 1 << 40)
        top = per_group.gather(2, keys.topk(min(2, per_group.shape[2]), dim=2).indices)
        group_scores = top[..., 0] + top[..., -1] if score == "top2_sum" else top[..., 0]
    gkeys = oracle.rank_keys(group_scores.float().contiguous() + 0.0).long()
    if c.nan_rule == "first":
        gkeys = gkeys.masked_fill(torch.isnan(group_scores), 1 << 40)
    kept = _top_groups(gkeys, tie, c.topk_group)
    return per_group.masked_fill(~kept.unsqueeze(2), c.group_mask).view(rows, experts), kept


def _top_groups(gkeys: torch.Tensor, tie: str, topk_group: int) -> torch.Tensor:
    """bool [B, G]: the ``topk_group`` groups of the largest group keys, ties by the group tie rule ``tie``."""
    n_group = gkeys.shape[1]
    priority = oracle.group_tie_priority(n_group, tie).to(gkeys.device)
    kept_groups = (gkeys * n_group + (n_group - 1 - priority)).topk(topk_group, dim=1).indices
    return torch.zeros(gkeys.shape, dtype=torch.bool, device=gkeys.device).scatter_(1, kept_groups, True)


def _core_aspect(r: _Rows, c, ids_clause: torch.Tensor, freed: torch.Tensor):
    """(clause, code) of the row-whole check beside ``nan_last`` and ``sentinel_fallback``: those clauses free
    where NaN ranks and what fills the slots no eligible expert can, never which numbers are chosen. The
    candidate's other experts (numbers, above the floor) must be the top ones of the row, up to exact and
    near ties at their cutoff; beside ``sentinel_fallback`` there must also be as many as the contract fills."""
    rows, k = r.a.shape
    clause = torch.full((rows,), NONE, dtype=torch.long, device=r.a.device)
    code = torch.zeros_like(clause)
    nan_rows = ids_clause == INDEX["nan_last"]
    sentinel_rows = ids_clause == INDEX["sentinel_fallback"]
    sub = (nan_rows | sentinel_rows).nonzero().squeeze(1)
    if sub.numel() == 0:
        return clause, code
    s = _rows_at(r, sub)
    freed_sub = freed.index_select(0, sub)
    bad, n = _numbers_not_top(s, c, freed_sub)
    if s.kept is not None and bool(bad.any()):
        # The NaN rule frees where NaN ranks in the group scores too: a router that ranks NaN first (torch.topk) gives
        # every group holding NaN a NaN score, keeps those groups first and takes its numbers from the groups it kept.
        # With more such groups than the contract keeps, which of them are kept is a tie among NaN group scores; the
        # groups the router took its experts from then say which, if they are all such groups.
        for used in (False, True):
            bad &= _numbers_not_top(dataclasses.replace(s, **_nan_first_groups(s, c, used)), c, freed_sub)[0]
    short = sentinel_rows.index_select(0, sub) & (n < s.valid)  # a fallback where eligible experts are left
    reason = torch.where(sentinel_rows.index_select(0, sub), R_NOT_TOP_ELIGIBLE, R_NOT_TOP_NUMBERS)
    hit = bad | short
    clause[sub[hit]] = INDEX["selection"]
    code[sub[hit]] = reason[hit]
    # NaN experts taken where the NaN rule put numbers (NaN ranked higher) all tie: the tie rule says which.
    nan = torch.isnan(s.selection)
    took = _gather(nan, s.a) & (_repeats(s.a) == 0) & ~freed.index_select(0, sub)
    nan_taken = torch.zeros(s.selection.shape, dtype=torch.long, device=s.a.device).scatter_add_(1, s.a, took.long()) > 0
    priority = oracle.tie_priority(s.x.shape[1], c.tie_rule).to(s.x.device)
    tie_broken = ~hit & took.any(1) & ~_rule_explains(priority, nan_taken, nan)
    clause[sub[tie_broken]] = INDEX["tie_order"]
    code[sub[tie_broken]] = R_NAN_TIE
    return clause, code


def _numbers_not_top(s: _Rows, c, freed: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(bool [B], long [B]): whether the candidate's numbers (the experts its NaN or fallback slots leave, ``freed``
    aside) are not the top numbers of ``s.selection`` up to exact and near ties at their cutoff; how many it took."""
    pool = ~torch.isnan(s.selection)
    if c.floor is not None:
        pool &= s.selection > c.floor
    rk = _contract_keys(s, c)
    counted = _gather(pool, s.a) & (_repeats(s.a) == 0) & ~freed
    n = counted.sum(1)
    ranked = torch.where(pool, rk, torch.full_like(rk, _LOWEST))
    top_keys, top_experts = ranked.sort(1, descending=True)
    nth = (n - 1).clamp(min=0).unsqueeze(1)
    boundary, anchor = top_keys.gather(1, nth), top_experts.gather(1, nth)
    experts = torch.arange(s.x.shape[1], device=s.x.device).expand_as(rk)
    taken = torch.zeros(rk.shape, dtype=torch.long, device=rk.device).scatter_add_(1, s.a, counted.long()) > 0
    below = counted & (_gather(rk, s.a) < boundary) & ~_near_to(s, c, s.a, anchor)
    passed_over = pool & ~taken & (rk > boundary) & ~_near_to(s, c, experts, anchor)
    return (n > 0) & (below.any(1) | passed_over.any(1)), n


def _nan_first_groups(s: _Rows, c, used: bool) -> dict:
    """The fields of ``s`` a grouped contract gives when NaN ranks first in the group scores: a group holding NaN
    scores NaN (its top value, or the sum of its top two, under NaN first) and is kept before every number, ties by
    the contract's group tie rule or, with ``used``, where more groups hold NaN than are kept, the groups the router
    took its experts from when every one of them holds NaN; the selection is the ranking masked outside the groups
    kept."""
    rows, experts = s.ranking.shape
    n_group = s.kept.shape[1]
    size = experts // n_group
    per_group = s.ranking.view(rows, n_group, size)
    nan_group = torch.isnan(per_group).any(2)
    gkeys = oracle.rank_keys(s.group_scores.float().contiguous() + 0.0).long().masked_fill(nan_group, 1 << 40)
    kept = _top_groups(gkeys, c.group_tie_rule, c.topk_group)
    if used:
        took = torch.zeros_like(s.kept).scatter_(1, s.a // size, True)
        tied = (nan_group.sum(1) > c.topk_group) & ~(took & ~nan_group).any(1) & (took.sum(1) <= c.topk_group)
        kept = torch.where(tied.unsqueeze(1), took, kept)
    selection = per_group.masked_fill(~kept.unsqueeze(2), c.group_mask).view(rows, experts)
    return {"selection": selection, "keys": oracle.rank_keys(selection.contiguous()), "kept": kept}


def _factors(k: int, rsf: float) -> list[float]:
    """The constants a weight is known to be off by: the scaling factor once too often or too few, 1/k, k."""
    out = {rsf, 1 / rsf, rsf * rsf, 1 / (rsf * rsf), float(k), 1 / k, rsf / k, k / rsf, rsf * k, 1 / (rsf * k)}
    return sorted(f for f in out if abs(f - 1.0) > 1e-6)


_CAST_CODE = {torch.bfloat16: R_CAST_BF16, torch.float16: R_CAST_FP16}


def _casts(w: torch.Tensor, logits_dtype: torch.dtype) -> list[tuple[torch.dtype, torch.Tensor]]:
    """(dtype, bool [B]) for each 16-bit dtype the rows' weights may have been cast to: the logits' own (a model's
    code casts back to it), and any other whose values hold every weight of the row exactly (the trace a cast
    leaves); with fp32 logits, only rows whose weights all lie in the dtype."""
    out = []
    for dtype in sorted(_CAST_CODE, key=lambda d: d != logits_dtype):
        rows_cast = (w.to(dtype).float() == w).all(1)  # NaN rows: not a cast (NaN != NaN), left to the rules
        if dtype == logits_dtype:
            rows_cast = torch.ones_like(rows_cast)
        out.append((dtype, rows_cast))
    return out


def _weights_aspect(r: _Rows, c, case, ids_equal: torch.Tensor, same_set: torch.Tensor, invalid: torch.Tensor):
    """(clause, code, second clause, its code, factor, reference weights, ok mask) of the weights aspect, per row.

    The contract's weights rounded to a dtype the candidate may have cast them to are tried first (a cast,
    ``weight_accuracy``). Each rule a weight can break is then tried as a counterfactual of the candidate's own
    experts (as it is, or rounded: ``close_to``), the most specific first: the guard, the bias, the renormalization flag, the set a softmax runs over, then a
    constant factor (alone or on top of one of those); ``weight_accuracy`` keeps what none explains."""
    rows, k = r.a.shape
    clause = torch.full((rows,), NONE, dtype=torch.long, device=r.a.device)
    code = torch.zeros_like(clause)
    clause2, code2 = clause.clone(), code.clone()
    factor = torch.full((rows,), math.nan, device=r.a.device)
    renormalize, rsf = case.renormalize, float(case.routed_scaling_factor)
    # a per-expert weight scale: each of the candidate's own experts' (the contract multiplies it in last)
    expert_scale = getattr(case, "expert_scale", None) if c.weight_scale == "per_expert" else None
    slot_scale = None if expert_scale is None else expert_scale.to(r.a.device).float()[r.a]

    def formula(values: torch.Tensor, renorm: bool = renormalize, scale: float = rsf, per_slot=slot_scale) -> torch.Tensor:
        return oracle.weights_from(values, contract=c, renormalize=renorm, routed_scaling_factor=scale, logits_dtype=case.scores.dtype,
                                   slot_scale=per_slot)  # fmt: skip

    chosen = _gather(r.scores, r.a)
    reference = formula(chosen)
    # Where the ids are right (in any order), the expected weights matched by expert id are the reference.
    pos = (r.a.unsqueeze(2) == r.e.unsqueeze(1)).float().argmax(2)
    by_id = r.we.gather(1, pos)
    reference = torch.where((ids_equal | same_set).unsqueeze(1), by_id, reference)
    ok = weights_close(r.w, reference, c)
    bad = ~ok.all(1) & ~invalid
    if not bool(bad.any()):
        return clause, code, clause2, code2, factor, reference, ok
    todo = bad.clone()
    casts = _casts(r.w, case.scores.dtype)
    bounded_against = reference  # what a declared weight_accuracy's bound is measured from: the contract's weights, or
    # the counterfactual of the rule the row also breaks

    def close_to(alt):
        # The counterfactual as it is, or rounded to a dtype the row's weights may have been cast to. Rounded, only
        # where it lies beyond two of that dtype's ULPs of the reference: a router computing in bf16 is that far
        # off by itself, and a renormalization of a sum within bf16 rounding of 1 is no evidence of the flag.
        # ``alt`` [..., B, k] (leading dimensions: several counterfactuals at once), the rows' answer [..., B].
        hit = weights_close(r.w, alt, c).all(-1)
        for dtype, rows_cast in casts:
            far = ~broadcast_isclose(alt, reference, rtol=2 * torch.finfo(dtype).eps, atol=c.weight_atol, equal_nan=True).all(-1)
            hit |= rows_cast & far & weights_close(r.w, alt.to(dtype).float(), c).all(-1)
        return hit

    def differs(alt):
        return ~weights_close(alt, reference, c).all(-1)

    def assign(mask, name, reason, name2=None, reason2=0, by=None):
        nonlocal todo
        hit = todo & mask
        clause[hit] = INDEX[name]
        code[hit] = reason
        if name2:
            clause2[hit] = INDEX[name2]
            code2[hit] = reason2
        if by is not None:
            factor[hit] = by[hit] if isinstance(by, torch.Tensor) else by
        todo &= ~hit

    # The contract's own weights, cast: first, so no rule claims a row only because rounding made it look broken
    # (bf16 top-1 weights round to the 1.0 a renormalized one has; bf16 top-2 ones can sum to exactly 1/2).
    for dtype, rows_cast in casts:
        assign(rows_cast & weights_close(r.w, reference.to(dtype).float(), c).all(1), "weight_accuracy", _CAST_CODE[dtype])
    total = chosen.sum(1)
    guards = []  # the division rule's counterfactuals: (weights, code)
    if renormalize and c.renormalize != "raw":
        # A sum the contract's guard (or epsilon) does not divide by, divided by anyway: NaN or inf weights.
        raw = oracle.weights_from(chosen, contract=c.replace(renormalize="raw"), renormalize=True, routed_scaling_factor=rsf,
                                  logits_dtype=case.scores.dtype, slot_scale=slot_scale)  # fmt: skip
        unguarded = ~(total > 0) & close_to(raw) & ~weights_close(raw, reference, c).all(1)
        assign(unguarded, "renorm_guard", R_GUARD_DIVIDED)
        # the raw sum where the contract adds its epsilon (a tiny sum): the division rule, not a factor
        assign(close_to(raw) & differs(raw) & torch.isfinite(raw).all(1), "renorm_guard", R_EPS_MISSING)
        assign(~(total > 0) & ~torch.isfinite(r.w).all(1) & torch.isfinite(reference).all(1), "renorm_guard", R_GUARD_DIVIDED)
        guards.append((raw, R_EPS_MISSING))
    if renormalize and c.renormalize != "eps":
        # The sum plus the engines' epsilon (1e-20) where the contract divides by the raw sum: a sum of underflowed
        # sigmoids then divides to nearly nothing. Before the renormalization flag, whose counterfactual (the raw
        # sigmoids) lies within atol of such weights too.
        eps = oracle.weights_from(chosen, contract=c.replace(renormalize="eps", renorm_eps=1e-20), renormalize=True,
                                  routed_scaling_factor=rsf, logits_dtype=case.scores.dtype, slot_scale=slot_scale)  # fmt: skip
        assign(close_to(eps) & differs(eps) & torch.isfinite(eps).all(1), "renorm_guard", R_EPS_ADDED)
        guards.append((eps, R_EPS_ADDED))
    if renormalize and c.renormalize in ("eps", "raw"):
        # A guard where the contract has none: a sum that is not > 0 (NaN, zero, negative) left undivided where the
        # contract divides it, as SGLang's Triton router does on a row with NaN chosen (its weights then are the
        # sigmoids themselves, not the contract's NaN). Before the renormalization flag, whose counterfactual is the
        # same weights: the flag holds on every other row, and the guard is what to fix.
        undivided = formula(chosen, renorm=False)
        assign(~(total > 0) & close_to(undivided) & differs(undivided), "renorm_guard", R_GUARD_ADDED)
    if c.has_bias:
        with_bias = formula(_gather(r.ranking, r.a))
        # an all-zero bias gives the same weights; NaN or infinite biases make both formulas NaN: that
        # coincidence is not evidence of the bias in the weights
        assign(differs(with_bias) & close_to(with_bias) & torch.isfinite(with_bias).all(1), "bias_in_weight", R_BIAS)
    if slot_scale is not None:
        # The per-expert scale is the last multiplication of the scaling step: left out, folded in before the
        # renormalization (which then divides part of it away), taken by output slot instead of by expert id, or twice.
        by_slot = expert_scale.to(r.a.device).float()[: k].expand_as(slot_scale) if k <= expert_scale.numel() else slot_scale
        for alt, why in ((formula(chosen, per_slot=None), R_SCALE_IGNORED), (formula(chosen * slot_scale, per_slot=None), R_SCALE_BEFORE_RENORM),
                         (formula(chosen, per_slot=by_slot), R_SCALE_BY_SLOT), (formula(chosen, per_slot=slot_scale * slot_scale), R_SCALE_TWICE)):
            assign(close_to(alt) & differs(alt), "scaling", why)

    # The rules, each as the weights a router breaking only it gives (with the contract's scaling).
    flipped = formula(chosen, renorm=not renormalize)  # the renormalization flag not followed
    flip_code = R_NOT_RENORMALIZED if renormalize else R_RENORMALIZED
    rules = [(flipped, "renormalization", flip_code)]
    if c.scoring == "softmax":  # a softmax over the k chosen logits (with renormalize, the same as the contract's)
        rules.append((formula(torch.softmax(_gather(r.x, r.a), dim=1)), "softmax_scope", R_SOFTMAX_OF_CHOSEN))
    elif c.scoring == "softmax_of_topk":  # a softmax over all E logits, taken at the chosen ones
        full = torch.softmax(torch.nan_to_num(r.x, nan=-math.inf), dim=1).gather(1, r.a)
        if renormalize:
            full = full / full.sum(1, keepdim=True)
        rules.append((full * rsf, "softmax_scope", R_SOFTMAX_OF_ALL))
    matches = [(close_to(alt) & differs(alt), name, why) for alt, name, why in rules]
    for i, (hit, name, why) in enumerate(matches):
        # With softmax scores and renormalize off, renormalizing is a softmax over the k chosen: both named.
        for hit2, name2, why2 in matches[i + 1 :]:
            assign(hit & hit2, name, why, name2, why2)
        assign(hit, name, why)
    # The division rule in a narrower arithmetic: weights within 2^-4 of a guard's counterfactual that lies far from
    # the contract's weights (a tiny sum, which the epsilon dwarfs or does not), as a router that takes its sigmoids and
    # their sum in bf16 and divides by the raw sum gives (vLLM's torch router). Otherwise the "any other constant" rule
    # below names scaling, a factor of about 1e16 that no kernel engineer would look for. The division is the rule to
    # fix; the rest is the arithmetic's, so the row breaks weight_accuracy too, bounded against the counterfactual: a
    # declared weight_accuracy may excuse the arithmetic, never the division.
    for alt, why in guards:
        far = ~broadcast_isclose(alt, reference, rtol=0.5, atol=c.weight_atol, equal_nan=True).all(1)
        near = broadcast_isclose(r.w, alt, rtol=_NARROW_ARITHMETIC, atol=c.weight_atol).all(1)
        hit = todo & far & near & torch.isfinite(alt).all(1)
        assign(hit, "renorm_guard", why, "weight_accuracy", R_ACCURACY)
        bounded_against = torch.where(hit.unsqueeze(1), alt, bounded_against)
    # A constant factor: the scaling factor applied twice or not at all, 1/k, ... alone or beside a rule. Every
    # factor and rule at once, [F, 1 + rules, B] (one at a time, these compares were most of a failing row's blame),
    # then assigned in the order of the factors, each alone before each rule beside it.
    factors = _factors(k, rsf)
    if factors and bool(todo.any()):
        by_factor = torch.tensor(factors, dtype=reference.dtype, device=reference.device).view(-1, 1, 1, 1)
        scaled = torch.stack([reference, *(alt for alt, _, _ in rules)]) * by_factor
        hits = close_to(scaled)
        hits[:, 1:] &= differs(scaled[:, 1:])
        for i, f in enumerate(factors):
            assign(hits[i, 0], "scaling", R_FACTOR, by=f)
            for j, (_, name, why) in enumerate(rules, start=1):
                assign(hits[i, j], name, why, "scaling", R_FACTOR, by=f)
    # Any other constant, the same for every weight of the row (at least two of them nonzero), at least 10 % off:
    # closer to 1 it is more likely an accuracy problem (a sum rounded in bf16, say) than a factor applied.
    usable = torch.isfinite(reference) & (reference.abs() > 1e-30) & torch.isfinite(r.w)
    ratio = torch.where(usable, r.w / torch.where(usable, reference, torch.ones_like(reference)), torch.zeros_like(reference))
    several = usable.sum(1) >= 2
    mean = ratio.sum(1) / usable.sum(1).clamp(min=1)
    constant = several & torch.isfinite(mean) & ((mean.log().abs()) > math.log(1.1)) & close_to(reference * mean.unsqueeze(1))
    assign(constant, "scaling", R_FACTOR, by=mean)
    assign(torch.ones_like(todo), "weight_accuracy", R_ACCURACY)
    return clause, code, clause2, code2, factor, bounded_against, ok


def _fallback_too_early(r: _Rows, c, a_raw: torch.Tensor) -> torch.Tensor:
    """bool [B]: expert 0 repeated in more slots than the row has slots no eligible expert can fill."""
    if not c.has_fallback:
        return torch.zeros(a_raw.shape[0], dtype=torch.bool, device=a_raw.device)
    repeats = ((a_raw == 0).sum(1) - 1).clamp(min=0)  # a single expert 0 is a choice, for the ids aspect to judge
    return repeats > (a_raw.shape[1] - r.valid)


_TINY = 2.0**-126  # the smallest normal fp32: a flushed subnormal is no departure


def _departure_from(r: _Rows, v: torch.Tensor, e: torch.Tensor, counted: torch.Tensor, *,
                    only_counted: bool = False) -> torch.Tensor:  # fmt: skip
    """float [B]: ``selection_departure``'s measure of the router's choice against the experts ``e`` [B, k] under the
    values ``v`` [B, E], the cutoff the least of the slots where ``counted``; ``only_counted``: the other slots of
    ``e`` are no choice at all (a router's expert matching one is measured against the cutoff too)."""
    scale = torch.nan_to_num(r.scores.abs() + (v - r.scores).abs(), nan=math.inf, posinf=math.inf)
    ve, va, se, sa = _gather(v, e), _gather(v, r.a), _gather(scale, e), _gather(scale, r.a)
    inf = torch.full_like(ve, math.inf)
    cut_slot = torch.where(counted, ve, inf).argmin(1, keepdim=True)
    cut, cut_scale = ve.gather(1, cut_slot), se.gather(1, cut_slot)
    matched = torch.where(counted, e, torch.full_like(e, -1)) if only_counted else e
    extra, missing = _unmatched(r.a, matched), _unmatched(matched, r.a) & (counted if only_counted else True)
    below = ((cut - va) - _TINY).clamp(min=0) / torch.maximum(sa, cut_scale).clamp(min=_TINY)
    above = ((ve - cut) - _TINY).clamp(min=0) / torch.maximum(se, cut_scale).clamp(min=_TINY)
    below = torch.where(extra & torch.isfinite(va), torch.nan_to_num(below, nan=math.inf), torch.zeros_like(below))
    above = torch.where(missing & torch.isfinite(ve), torch.nan_to_num(above, nan=math.inf), torch.zeros_like(above))
    return torch.maximum(below.amax(1), above.amax(1))


def _fill(open_: torch.Tensor, key: torch.Tensor, room: torch.Tensor) -> torch.Tensor:
    """bool [..., G]: the ``open_`` groups that take the ``room`` [..., 1] places left, best ``key`` first (ties by
    group number)."""
    order = torch.where(open_, key, torch.full_like(key, -math.inf)).argsort(dim=-1, descending=True, stable=True)
    place = torch.empty_like(order).scatter_(-1, order, torch.arange(key.shape[-1], device=order.device).expand_as(order))
    return open_ & (place < room)


def _nan_first_kept(r: _Rows, groups: "_GroupFacts") -> torch.Tensor:
    """bool [B, G]: the groups a router ranking NaN first in the group scores is read to keep: those it took its
    experts from, filled up to the contract's number in ``groups.fill_key``'s order (groups holding NaN first)."""
    used = _groups_of(r, torch.ones_like(r.a, dtype=torch.bool))
    room = (r.kept.sum(1, keepdim=True) - used.sum(1, keepdim=True)).clamp(min=0)
    return used | _fill(~used, groups.fill_key, room)


def _own_groups_top(r: _Rows, kept: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([B, k] ids, [B, k] bool): the top numbers (ranking before any group mask) of the groups ``kept`` [B, G], as
    many as the router took numbers; the bool marks those slots."""
    size = r.ranking.shape[1] // r.kept.shape[1]
    inside = kept.repeat_interleave(size, dim=1) & torch.isfinite(r.ranking)
    top = torch.where(inside, r.ranking, torch.full_like(r.ranking, -math.inf)).topk(r.a.shape[1], dim=1).indices
    taken = torch.isfinite(_gather(r.ranking, r.a)).sum(1, keepdim=True)
    return top, torch.arange(r.a.shape[1], device=r.a.device) < taken


def _groups_swapped_among_nan(r: _Rows, kept: torch.Tensor, holds_nan: torch.Tensor) -> torch.Tensor:
    """bool [B]: the groups ``kept`` differ from the contract's as a router ranking NaN first in the group scores
    would keep them: each one in place of a contract's holds NaN, and each of the contract's left out either holds NaN
    or scores no higher than every kept one without NaN (a group holding NaN took its place)."""
    added, left = kept & ~r.kept, r.kept & ~kept
    scores = r.group_scores.float()
    best_left = torch.where(left & ~holds_nan, scores, torch.full_like(scores, -math.inf)).amax(1)
    worst_kept = torch.where(kept & ~holds_nan, scores, torch.full_like(scores, math.inf)).amin(1)
    return (added | left).any(1) & (~added | holds_nan).all(1) & ~(best_left > worst_kept)


def selection_departure(r: _Rows, groups: "_GroupFacts | None") -> torch.Tensor:
    """float [B]: how far past the contract's cutoff (the smallest finite selection value the oracle chose) each row's
    choice reaches. For every expert the candidate chose that the oracle did not, its distance below the cutoff; for
    every one the oracle chose that the candidate did not, its distance above it; each less 2^-126 and divided by the
    expert's scale, ``|score| + |selection value - score|`` (a sigmoid and its bias, each rounded where a router ranks
    in a narrower dtype), at least the cutoff expert's. A router ranking bf16 values departs by about 2^-8; one that
    drops its top expert by far more. Experts of non-finite value (NaN, masked groups) are the special-value and
    group clauses' to judge, and count 0 here, except an expert ranked -inf taken in place of a number the contract
    chose: that departs infinitely. In grouped contracts, where the router kept other groups as one ranking NaN first
    in the group scores would, the least of that and the same measure against the top numbers of the groups it kept."""
    k = r.e.shape[1]
    ve = _gather(r.selection, r.e)
    counted = (torch.arange(k, device=r.e.device) < r.valid.unsqueeze(1)) & torch.isfinite(ve)
    departure = _departure_from(r, r.selection, r.e, counted)
    extra, missing = _unmatched(r.a, r.e), _unmatched(r.e, r.a)
    if groups is not None:
        # Where the router used other groups as one ranking NaN first in the group scores would (groups holding NaN
        # in place of kept ones: a tie of NaN scores, or NaN above numbers, the NaN and group tie rules' to judge),
        # its numbers are measured against the top numbers of the groups it used, as many as it took.
        kept = _nan_first_kept(r, groups)
        own, ranked_own = _own_groups_top(r, kept)
        theirs = _departure_from(r, r.ranking, own, ranked_own, only_counted=True)
        swapped = _groups_swapped_among_nan(r, kept, ~groups.numbered)
        departure = torch.where(swapped, torch.minimum(departure, theirs), departure)
    # an expert ranked -inf taken while a number the contract chose is left out is no rounding, whatever the bound
    # (ranked -inf before any group mask, and the number in a group the router took another number from: an expert
    # of a dropped group, a number of a group not kept, or a dropped group's experts all masked to 0.0 and taken as
    # ties, is the group clauses' to judge)
    ranked = _gather(r.ranking, r.a)
    left_out = missing & torch.isfinite(ve)
    if r.kept is not None:
        size = r.ranking.shape[1] // r.kept.shape[1]
        left_out &= _groups_of(r, torch.isfinite(ranked)).gather(1, r.e // size)
    for_minus_inf = (extra & (ranked == -math.inf)).any(1) & left_out.any(1)
    departure = torch.where(for_minus_inf, torch.full_like(departure, math.inf), departure)
    return torch.where(counted.any(1), departure, torch.zeros_like(departure))


# How far an expert of a group the router is read to keep may outrank its lowest choice: a bf16 sigmoid flips two
# experts 2^-10 apart without any group being another (the departure is the larger of that and the groups' gap).
_OUTRANK_STEPS = (0.0, 2.0**-12, 2.0**-10, 2.0**-8, 2.0**-7, 2.0**-6, 2.0**-5, 2.0**-4, 2.0**-3)


def group_departure(r: _Rows, c, groups: "_GroupFacts | None") -> torch.Tensor:
    """float [B]: how far the groups a row's experts came from depart from keeping groups by score (grouped
    contracts; 0 elsewhere). The router's choice is read as ``topk_group`` kept groups: those it took a finite-ranked
    expert from, then the best-scoring others that hold no expert outranking its lowest choice by more than a step
    (had it kept such a group, that expert would be in its answer). The reading's departure is the larger of the
    best group left out less the worst group kept (less 2^-126, flushed subnormals, over the larger of the two
    groups' scales, each the sum of ``|score| + |ranking value - score|`` over its two top experts) and how far an
    expert left out of a kept group outranks the lowest choice (relative to the two experts' scales); the row's is
    the least over the steps, and over a second reading for the other mask value, 0.0 (experts ranked at 0 or below
    may be a dropped group's zeros, and every kept one above 0 outranks them). The contract's own groups depart by 0
    and a bf16 flip of two near group sums by about 2^-8; the lowest groups, or no groups at all, by far more. A
    group of -inf score kept over one with a number, and more groups used than the contract keeps, depart
    infinitely. Groups holding NaN count on neither side; -inf and NaN experts (slots of rows with too few numbers)
    and experts of dropped groups the contract takes too use no group: the NaN, tie and mask clauses judge those."""
    rows = r.a.shape[0]
    if groups is None:
        return torch.zeros(rows, device=r.a.device)
    n_group = r.kept.shape[1]
    size = r.ranking.shape[1] // n_group
    chosen = _gather(r.ranking, r.a)
    per_expert = groups.per_expert
    # an expert of a dropped group that the contract takes too (a NaN slot's fill, a 0.0 mask's) uses no group
    own_fill = ~_unmatched(r.a, r.e) & ~r.kept.gather(1, r.a // size)
    finite = torch.isfinite(chosen) & ~own_fill
    slot = torch.where(finite, chosen, torch.full_like(chosen, math.inf)).argmin(1, keepdim=True)
    by_minus_inf = _reading(r, c, groups, finite, chosen.gather(1, slot), _gather(per_expert, r.a).gather(1, slot))
    # the 0.0 reading: a pick ranked at 0 or below, or one of a group beyond the topk_group best-scoring groups the
    # positive picks came from, may be a dropped group's 0.0 (a tie of the mask with kept zeros)
    positive = finite & (chosen > 0)
    holding = _groups_of(r, positive)
    by_score = torch.where(holding, groups.scores, torch.full_like(groups.scores, -math.inf)).argsort(dim=1, descending=True, stable=True)
    top = torch.zeros_like(holding).scatter_(1, by_score[:, : c.topk_group], True) & holding
    counted = positive & top.gather(1, r.a // size)
    zeros = finite & ~counted
    lowest = torch.where(zeros.any(1, keepdim=True), torch.zeros_like(chosen[:, :1]),
                         torch.where(counted, chosen, torch.full_like(chosen, math.inf)).amin(1, keepdim=True))  # fmt: skip
    by_zero = _reading(r, c, groups, counted, lowest, torch.zeros_like(lowest))
    return torch.minimum(by_minus_inf, by_zero)


@dataclass(frozen=True)
class _GroupFacts:
    """What ``group_departure``'s two readings and ``selection_departure``'s NaN-first one need of the groups, [B, G]
    each but ``per_expert``."""

    scores: torch.Tensor  # the contract's group scores, NaN as -inf
    scale: torch.Tensor  # sum of |score| + |ranking value - score| over each group's two top experts
    # False for a group holding NaN: neither the worst kept nor the best left out (a router ranking NaN first scores
    # it NaN), where NaN ranks being the NaN clauses' to judge
    numbered: torch.Tensor
    # the order kept places are filled in: groups holding NaN first (they count on neither side), then by score (an
    # open group of -inf score still before any group that is not open)
    fill_key: torch.Tensor
    per_expert: torch.Tensor  # [B, E]: each expert's scale, |score| + |ranking value - score|

    @staticmethod
    def of(r: _Rows) -> "_GroupFacts | None":
        """The facts of a grouped contract's rows; None elsewhere."""
        if r.kept is None or r.group_scores is None:
            return None
        per_expert = torch.nan_to_num(r.scores.abs() + (r.ranking - r.scores).abs(), nan=math.inf, posinf=math.inf)
        rows, n_group = r.kept.shape
        size = r.ranking.shape[1] // n_group
        scores = torch.nan_to_num(r.group_scores.float(), nan=-math.inf)
        top2 = oracle.rank_keys(r.ranking.view(rows, n_group, size).contiguous()).topk(min(2, size), dim=2).indices
        scale = per_expert.view(rows, n_group, size).gather(2, top2).sum(2)
        numbered = ~torch.isnan(r.group_scores) & ~torch.isnan(r.ranking).view(rows, n_group, size).any(2)
        fill_key = torch.where(numbered, scores.clamp(min=torch.finfo(torch.float32).min), torch.full_like(scores, math.inf))
        return _GroupFacts(scores, scale, numbered, fill_key, per_expert)


def _reading(r: _Rows, c, groups: _GroupFacts, counted: torch.Tensor, lowest: torch.Tensor,
             lowest_scale: torch.Tensor) -> torch.Tensor:  # fmt: skip
    """``group_departure`` of one reading: ``counted`` [B, k] the chosen experts whose groups the router kept,
    ``lowest`` [B, 1] the value no expert left out of a kept group may outrank (an unused group that does by more
    than a step is read as dropped; what a kept group's does adds to the departure)."""
    rows = r.a.shape[0]
    n_group = r.kept.shape[1]
    size = r.ranking.shape[1] // n_group
    used = _groups_of(r, counted)
    ahead = ((r.ranking - lowest) - _TINY).clamp(min=0) / torch.maximum(groups.per_expert, lowest_scale).clamp(min=_TINY)
    unchosen = torch.ones_like(r.ranking, dtype=torch.bool).scatter_(1, r.a, False)
    ahead = torch.where((r.ranking > lowest) & unchosen, torch.nan_to_num(ahead, nan=math.inf), torch.zeros_like(ahead))
    outranks = ahead.view(rows, n_group, size).amax(2)  # [B, G]: how far a group's best expert left out outranks
    scores, group_scale, numbered = groups.scores, groups.scale, groups.numbered
    fill_places = (c.topk_group - used.sum(1, keepdim=True)).clamp(min=0)
    # every outrank step at once, a leading dimension [S, B, G] (a loop over the steps was most of a blame's time)
    steps = torch.tensor(_OUTRANK_STEPS, device=r.a.device).view(-1, 1, 1)
    kept = used | _fill(~used & (outranks <= steps), groups.fill_key, fill_places)
    inside = torch.where(kept & numbered, scores, math.inf)
    outside = torch.where(kept | ~numbered, -math.inf, scores)
    worst_in, worst_at = inside.min(-1)
    best_out, best_at = outside.max(-1)
    group_scale = group_scale.expand(len(_OUTRANK_STEPS), -1, -1)
    scale = torch.maximum(group_scale.gather(-1, worst_at.unsqueeze(-1)), group_scale.gather(-1, best_at.unsqueeze(-1))).squeeze(-1)
    gap = ((best_out - worst_in) - _TINY).clamp(min=0) / scale.clamp(min=_TINY)
    gap = torch.where(best_out == -math.inf, torch.zeros_like(gap), torch.nan_to_num(gap, nan=math.inf))
    gap = torch.where((worst_in == -math.inf) & (best_out > -math.inf), torch.full_like(gap, math.inf), gap)
    best = torch.maximum(gap, torch.where(kept, outranks, 0.0).amax(-1)).amin(0)
    return torch.where(used.sum(1) > c.topk_group, torch.full_like(best, math.inf), best)


def attribute(case, exp, values, w_act: torch.Tensor, ids_act: torch.Tensor, rows: torch.Tensor, c, *, out_of_range, twice, ids_equal) -> Blame:
    """The blame of the ``rows`` (int64 indices into the case) that are not a clean match; ``values`` are the oracle's for them."""
    experts = case.scores.shape[1]
    e = exp.ids.index_select(0, rows).long()
    a_raw = ids_act.index_select(0, rows).long()
    x = case.scores.index_select(0, rows).float()
    r = _Rows(
        e=e, a=a_raw.clamp(0, experts - 1), w=w_act.index_select(0, rows), we=exp.weights.index_select(0, rows),
        keys=values.keys, selection=values.selection, ranking=values.ranking, scores=values.scores,
        x=x, bias=None if case.bias is None else case.bias.float(), x_max=torch.nan_to_num(x, nan=-math.inf).amax(1),
        valid=values.valid, kept=values.kept, group_scores=values.group_scores,
    )  # fmt: skip
    oor, tw, eq = out_of_range.index_select(0, rows), twice.index_select(0, rows), ids_equal.index_select(0, rows)
    early = _fallback_too_early(r, c, a_raw) & ~oor & ~eq
    invalid = oor | tw | early
    validity = torch.where(invalid, INDEX["validity"], NONE)
    validity_code = torch.where(oor, R_OUT_OF_RANGE, torch.where(tw, R_TWICE, torch.where(early, R_FALLBACK_EARLY, 0)))
    ids_clause, ids_code, slot, freed, within, within_code = _ids_aspect(r, c, ~eq, invalid)
    if c.nan_rule == "last":  # aiter's round index shows as an id twice: it is the NaN rule that broke
        round_index = invalid & ((r.a == torch.arange(r.a.shape[1], device=r.a.device)) & (r.e != r.a)
                                 & ((_gather(r.keys, r.e) == oracle.NAN_KEY) | (_gather(r.ranking, r.e) == -math.inf))).any(1)  # fmt: skip
        validity = torch.where(round_index & ~oor, NONE, validity)
        ids_clause = torch.where(round_index & ~oor, INDEX["nan_last"], ids_clause)
        ids_code = torch.where(round_index & ~oor, R_ROUND_INDEX, ids_code)
    core, core_code = _core_aspect(r, c, ids_clause, freed)
    # a group tie resolved another way (ids: group_tie_order): what the experts break within those groups
    core, core_code = torch.where(within >= 0, within, core), torch.where(within >= 0, within_code, core_code)
    groups = _GroupFacts.of(r)
    same_set = ~_unmatched(r.a, r.e).any(1)
    w_clause, w_code, w2_clause, w2_code, factor, reference, ok = _weights_aspect(r, c, case, eq, same_set, invalid)
    return Blame(validity, ids_clause, w_clause, validity_code, ids_code, w_code, slot, reference, ok,
                 core=core, core_code=core_code, weights2=w2_clause, weights2_code=w2_code, factor=factor,
                 selection_departure=selection_departure(r, groups), group_departure=group_departure(r, c, groups))  # fmt: skip
