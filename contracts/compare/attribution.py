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
     those groups tie the kept ones exactly);
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
   never hides a broken renormalization: ``bias_in_weight`` (the weights are
   built from sig + bias), ``renorm_guard`` (a zero or negative sum divided,
   or no renormalization), ``scaling`` (the factor applied twice or not at
   all), else ``weight_accuracy``.

The result is per-row arrays (``Blame``); text is made later, only for the
rows a report shows (``contracts.compare.reasons``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

import oracle

from .tolerance import near_allowance, weights_close

__all__ = ["CLAUSE_ORDER", "Blame", "NEAR_TIE", "attribute"]

# Every clause name, in the order a row's primary clause is chosen (the first broken one wins).
CLAUSE_ORDER: tuple[str, ...] = (
    "validity", "group_mask", "group_selection", "group_tie_order", "nan_last", "sentinel_fallback",
    "tie_order", "signed_zero", "selection", "output_order", "bias_in_weight", "renorm_guard", "scaling", "weight_accuracy",
)  # fmt: skip
INDEX = {name: i for i, name in enumerate(CLAUSE_ORDER)}
NEAR_TIE = -2  # the ids aspect found only a near tie
NONE = -1

# Reason codes: (clause, code) -> the reason's template; {slot}, {n}, {extra}, {missing}, ... are filled per row.
R_OUT_OF_RANGE, R_TWICE = 1, 2
R_ROUND_INDEX, R_NAN_OVER_NUMBER, R_NAN_ORDER, R_NAN_TAKEN, R_NUMBER_OVER_NAN = 10, 11, 12, 13, 14
R_SENTINEL = 20
R_GROUP_MASK, R_GROUP_SELECTION, R_GROUP_TIE = 30, 31, 32
R_TIE_SET, R_TIE_ORDER, R_SIGNED_ZERO, R_NEAR_ULP, R_NEAR_SET = 40, 41, 42, 44, 45
R_SELECTION, R_SELECTION_FTZ, R_ORDER, R_ORDER_FTZ = 50, 51, 52, 53
R_BIAS, R_GUARD_DIVIDED, R_NOT_RENORMALIZED, R_SCALING, R_ACCURACY = 60, 61, 62, 63, 64


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
    reference_weights: torch.Tensor  # [B, k] the contract's weights for the candidate's own experts
    weights_ok: torch.Tensor  # [B, k] bool

    def broken(self) -> torch.Tensor:
        """bool [B, len(CLAUSE_ORDER)]: every clause each row breaks."""
        rows = self.ids.shape[0]
        out = torch.zeros((rows, len(CLAUSE_ORDER)), dtype=torch.bool, device=self.ids.device)
        for aspect in (self.validity, self.ids, self.weights):
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


def _ids_aspect(r: _Rows, c, differs: torch.Tensor, invalid: torch.Tensor):
    """(clause, code, first differing slot) of the ids aspect, per row."""
    rows, k = r.e.shape
    clause = torch.full((rows,), NONE, dtype=torch.long, device=r.e.device)
    code = torch.zeros_like(clause)
    diff_slot = (r.e != r.a)
    slot = torch.where(diff_slot.any(1), diff_slot.float().argmax(1), torch.full_like(clause, -1))
    todo = differs & ~invalid

    def assign(mask, name, reason):
        nonlocal todo
        hit = todo & mask
        clause[hit] = INDEX[name] if isinstance(name, str) else name
        code[hit] = reason
        todo = todo & ~hit

    in_e, in_a = _member(r.a, r.e), _member(r.e, r.a)
    extra, missing = ~in_e, ~in_a
    same_set = ~extra.any(1)
    ke, ka = _gather(r.keys, r.e), _gather(r.keys, r.a)
    nan_e, nan_a = ke == oracle.NAN_KEY, ka == oracle.NAN_KEY
    slots = torch.arange(k, device=r.e.device)

    # special values
    if c.nan_rule == "last":
        minus_inf_e = _gather(r.ranking, r.e) == -math.inf
        assign(((r.a == slots) & (r.e != slots) & (nan_e | minus_inf_e)).any(1), "nan_last", R_ROUND_INDEX)
        assign((extra & nan_a).any(1) & (missing & ~nan_e).any(1), "nan_last", R_NAN_OVER_NUMBER)
        numbers = (~torch.isnan(r.selection)).sum(1)
        assign((diff_slot & (slots >= numbers.unsqueeze(1))).any(1), "nan_last", R_NAN_ORDER)
    elif c.nan_rule == "never":
        assign((extra & nan_a).any(1), "nan_last", R_NAN_TAKEN)
    else:  # "first"
        assign((extra & ~nan_a).any(1) & (missing & nan_e).any(1), "nan_last", R_NUMBER_OVER_NAN)
    if c.has_fallback:
        assign((diff_slot & (slots >= r.valid.unsqueeze(1))).any(1), "sentinel_fallback", R_SENTINEL)

    if r.kept is not None:
        _group_aspect(r, c, todo, assign)

    # equal keys: exact ties, near ties; the counterfactuals
    relevant = extra.unsqueeze(2) & missing.unsqueeze(1)  # [B, k(actual), k(expected)]: an extra expert against a missing one
    pair_exact = _exact_pairs(r, r.a.unsqueeze(2), r.e.unsqueeze(1), c) & relevant
    pair_near = (_near_pairs(r, c, r.a.unsqueeze(2), r.e.unsqueeze(1)) | (ka.unsqueeze(2) == ke.unsqueeze(1))) & relevant & ~pair_exact
    extra_exact, extra_near = pair_exact.any(2), pair_near.any(2)
    set_explained = (~extra | extra_exact | extra_near).all(1)
    set_near = (~extra | extra_near).all(1)
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
    order_matters = c.output_order != "any"

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
        by_set = (~extra | _gather(zero, r.a)).all(1) & _sign_explains(r, c, chosen, group)
        later = torch.zeros_like(zero).scatter_(1, r.a, (slots >= first).expand_as(r.a))
        placed = torch.zeros_like(zero).scatter_(1, a0, True)
        by_order = _gather(zero, a0).squeeze(1) & _sign_explains(r, c, placed, later & zero)
        assign(mixed & torch.where(same_set, order_matters & by_order, by_set), "signed_zero", R_SIGNED_ZERO)
    # An exact tie broken against the rule is tie_order, even beside near ties (those alone are no failure).
    assign(~same_set & set_explained & ~set_near, "tie_order", R_TIE_SET)
    assign(same_set & order_matters & order_explained & ~order_near, "tie_order", R_TIE_ORDER)
    assign(~same_set & set_near, NEAR_TIE, R_NEAR_SET)
    assign(same_set & order_matters & order_near, NEAR_TIE, R_NEAR_ULP)

    ftz = _ftz_alternative(r, c, k) if bool(todo.any()) else None
    ftz_match = (ftz == r.a).all(1) if ftz is not None else torch.zeros_like(todo)
    assign(~same_set & ftz_match, "selection", R_SELECTION_FTZ)
    assign(~same_set, "selection", R_SELECTION)
    if order_matters:
        assign(same_set & ftz_match, "output_order", R_ORDER_FTZ)
        assign(same_set, "output_order", R_ORDER)
    return clause, code, slot


def _group_aspect(r: _Rows, c, todo: torch.Tensor, assign) -> None:
    """Experts chosen from groups the contract dropped (grouped contracts)."""
    rows, k = r.a.shape
    n_group = r.kept.shape[1]
    size = r.x.shape[1] // n_group
    used = torch.zeros_like(r.kept).scatter_(1, r.a // size, True)
    leaked = (used & ~r.kept).any(1)
    if not bool((todo & leaked).any()):
        return
    n_used = used.sum(1)
    # Kept other groups, chose right within them? The contract's selection restricted to the used groups.
    within = r.ranking.view(rows, n_group, size).masked_fill(~used.unsqueeze(2), -math.inf).view(rows, -1)
    consistent = (_select_under(within, k, c.replace(n_group=1, topk_group=1)) == r.a).all(1)
    # Do the groups it used tie the kept ones exactly (group scores equal at the cutoff)?
    cutoff = r.group_scores.masked_fill(~r.kept, math.inf).amin(1, keepdim=True)
    tied = ((r.group_scores == cutoff) | ~(used & ~r.kept)).all(1)
    assign(leaked & (n_used > c.topk_group), "group_mask", R_GROUP_MASK)
    assign(leaked & consistent & tied, "group_tie_order", R_GROUP_TIE)
    assign(leaked & consistent, "group_selection", R_GROUP_SELECTION)
    assign(leaked, "group_mask", R_GROUP_MASK)


def _weights_aspect(r: _Rows, c, case, ids_equal: torch.Tensor, same_set: torch.Tensor, invalid: torch.Tensor):
    """(clause, code, reference weights, ok mask) of the weights aspect, per row."""
    rows, k = r.a.shape
    clause = torch.full((rows,), NONE, dtype=torch.long, device=r.a.device)
    code = torch.zeros_like(clause)
    renormalize, rsf = case.renormalize, float(case.routed_scaling_factor)

    def formula(values: torch.Tensor, renorm: bool = renormalize) -> torch.Tensor:
        return oracle.weights_from(values, contract=c, renormalize=renorm, routed_scaling_factor=rsf, logits_dtype=case.scores.dtype)

    chosen = _gather(r.scores, r.a)
    reference = formula(chosen)
    # Where the ids are right (in any order), the expected weights matched by expert id are the reference.
    pos = (r.a.unsqueeze(2) == r.e.unsqueeze(1)).float().argmax(2)
    by_id = r.we.gather(1, pos)
    reference = torch.where((ids_equal | same_set).unsqueeze(1), by_id, reference)
    ok = weights_close(r.w, reference, c)
    bad = ~ok.all(1) & ~invalid
    if not bool(bad.any()):
        return clause, code, reference, ok
    todo = bad.clone()

    def close_to(alt):
        return weights_close(r.w, alt, c).all(1)

    def assign(mask, name, reason):
        nonlocal todo
        hit = todo & mask
        clause[hit] = INDEX[name]
        code[hit] = reason
        todo &= ~hit

    total = chosen.sum(1)
    if renormalize and c.renormalize != "raw":
        # A sum the contract's guard (or epsilon) does not divide by, divided by anyway: NaN or inf weights.
        raw = oracle.weights_from(chosen, contract=c.replace(renormalize="raw"), renormalize=True, routed_scaling_factor=rsf,
                                  logits_dtype=case.scores.dtype)  # fmt: skip
        unguarded = ~(total > 0) & close_to(raw) & ~weights_close(raw, reference, c).all(1)
        assign(unguarded, "renorm_guard", R_GUARD_DIVIDED)
        assign(~(total > 0) & ~torch.isfinite(r.w).all(1) & torch.isfinite(reference).all(1), "renorm_guard", R_GUARD_DIVIDED)
    if c.has_bias:
        with_bias = formula(_gather(r.ranking, r.a))
        differs = ~weights_close(with_bias, reference, c).all(1)  # an all-zero bias gives the same weights
        # NaN or infinite biases make both formulas NaN: that coincidence is not evidence of the bias in the weights
        assign(differs & close_to(with_bias) & torch.isfinite(with_bias).all(1), "bias_in_weight", R_BIAS)
    if renormalize:
        unnormalized = formula(chosen, renorm=False)
        assign(close_to(unnormalized) & ~weights_close(unnormalized, reference, c).all(1), "renorm_guard", R_NOT_RENORMALIZED)
    if rsf != 1.0:
        assign(close_to(reference * rsf) | close_to(reference / rsf), "scaling", R_SCALING)
    assign(torch.ones_like(todo), "weight_accuracy", R_ACCURACY)
    return clause, code, reference, ok


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
    invalid = oor | tw
    validity = torch.where(invalid, INDEX["validity"], NONE)
    validity_code = torch.where(oor, R_OUT_OF_RANGE, torch.where(tw, R_TWICE, 0))
    ids_clause, ids_code, slot = _ids_aspect(r, c, ~eq, invalid)
    if c.nan_rule == "last":  # aiter's round index shows as an id twice: it is the NaN rule that broke
        round_index = invalid & ((r.a == torch.arange(r.a.shape[1], device=r.a.device)) & (r.e != r.a)
                                 & ((_gather(r.keys, r.e) == oracle.NAN_KEY) | (_gather(r.ranking, r.e) == -math.inf))).any(1)  # fmt: skip
        validity = torch.where(round_index & ~oor, NONE, validity)
        ids_clause = torch.where(round_index & ~oor, INDEX["nan_last"], ids_clause)
        ids_code = torch.where(round_index & ~oor, R_ROUND_INDEX, ids_code)
    same_set = ~(~_member(r.a, r.e)).any(1)
    w_clause, w_code, reference, ok = _weights_aspect(r, c, case, eq, same_set, invalid)
    return Blame(validity, ids_clause, w_clause, validity_code, ids_code, w_code, slot, reference, ok)
