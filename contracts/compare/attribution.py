"""Which clause a mismatched row breaks: the common row shapes vectorized, the rest row by row."""

from __future__ import annotations

import math

import torch

import oracle

from .tolerance import f32_ulp, weights_close

__all__ = ["RowAttribution", "fast_attribution", "row_facts"]


def _signed_zero_orders(case, keys, c: oracle.Contract, rows) -> list[torch.Tensor]:
    """Ids a router would give for ``rows`` if it ranked -0.0 inputs below (or above) +0.0 ones.

    Counterfactual attribution: a row is blamed on ``signed_zero`` only when the
    candidate's ids equal one of these exactly, never because zeros were merely
    present (a random tie order would then be blamed too).
    """
    x, b = case.scores[rows].float(), case.bias.float()
    negative_zero = ((x == 0) & torch.signbit(x)).long() + ((b == 0) & torch.signbit(b)).long()
    if not bool(negative_zero.any()):
        return []
    experts, k = x.shape[1], case.topk
    priority = oracle.tie_priority(experts, c.tie_rule).to(x.device)
    orders = []
    for rank_negative_lower in (True, False):
        s = negative_zero if rank_negative_lower else 2 - negative_zero
        comp = keys.long() * (3 * experts) + (2 - s) * experts + (experts - 1 - priority)
        orders.append(torch.topk(comp, k, dim=1).indices)
    return orders


def row_facts(keys, ranking, ids, topk: int):
    """Per row: size of the tie group at the cutoff, whether it straddles, NaN count."""
    cutoff = keys.gather(1, ids[:, topk - 1 : topk])
    group = (keys == cutoff).sum(1)
    inside = (keys.gather(1, ids) == cutoff).sum(1)
    return group, group > inside, torch.isnan(ranking).sum(1)


def fast_attribution(case, c, bad_t, e, a, keys, ranking, ids_equal, invalid) -> list:
    """Vectorized attribution of the common row shapes; ``None`` where the per-row path must decide.

    - aiter's round index (slot j holds id j where only -inf/NaN were left) -> nan_last;
    - more NaN experts chosen than expected (NaN over a number) -> nan_last;
    - every slot's key equal to the expected slot's key, ids differing: an exact tie
      broken the wrong way (tie_order), or a coincidental one (near_tie); unless
      the output is the signed-zero counterfactual (signed_zero).
    """
    rows, k = e.shape
    verdict = [None] * rows
    ke, ka = keys.gather(1, e), keys.gather(1, a)
    nan_e, nan_a = ke == oracle.NAN_KEY, ka == oracle.NAN_KEY
    differs = ~ids_equal
    if c.name == "aiter":
        slot = torch.arange(k, device=e.device)
        neg_inf_e = ranking.gather(1, e) == -float("inf")
        round_index = ((a == slot) & (e != slot) & (nan_e | neg_inf_e)).any(1)
        nan_over_number = ~invalid & differs & ~round_index & (nan_a.sum(1) > nan_e.sum(1))
    else:
        round_index = nan_over_number = torch.zeros_like(differs)
    slot_ok = (ka == ke).all(1) & ~nan_e.any(1) & ~nan_a.any(1)
    if c.name == "serial":
        slot_ok &= (ranking.gather(1, e) > oracle.SERIAL_SENTINEL).all(1)
    tie_like = ~invalid & differs & slot_ok & ~round_index
    signed = torch.zeros_like(tie_like)
    for alt in _signed_zero_orders(case, keys, c, bad_t):
        signed |= (alt == a).all(1)
    # Exact ties: equal inputs, both logits saturated, or an infinite ranking value.
    x, b = case.scores[bad_t].float(), case.bias.float()
    xe, xa, be, ba = x.gather(1, e), x.gather(1, a), b[e], b[a]
    same_x = (xe == xa) | (torch.isnan(xe) & torch.isnan(xa))
    same_b = (be == ba) | (torch.isnan(be) & torch.isnan(ba))
    saturated = ((xe >= 20) & (xa >= 20)) | ((xe <= -90) & (xa <= -90))
    exact_slot = torch.isinf(ranking.gather(1, e)) | (same_b & (same_x | saturated)) | (e == a)
    exact_tie = exact_slot.all(1)
    codes = torch.where(round_index, 1, torch.where(nan_over_number, 2, torch.where(tie_like & signed, 3,
            torch.where(tie_like & exact_tie, 4, torch.where(tie_like, 5, 0))))).tolist()  # fmt: skip
    meaning = {
        1: ("nan_last", "round index emitted as the expert id where only -inf/NaN remain"),
        2: ("nan_last", "a NaN expert was chosen over a number"),
        3: ("signed_zero", "the output is what ranking -0.0 and +0.0 inputs apart would give"),
        4: ("tie_order", "every slot holds an expert of the expected key: exact ties broken against the tie priority"),
        5: ("near_tie", "different inputs that happen to round to equal ranking values, ordered otherwise"),
    }
    for i, code in enumerate(codes):
        if code:
            verdict[i] = meaning[code]
    return verdict


class RowAttribution:
    """Works out which clause one mismatched row breaks. Plain Python on one row."""

    def __init__(self, contract, exp_ids, act_ids, keys, ranking, scores, bias, numbers, valid, sig, experts):
        # keys, ranking, scores, bias, sig: indexable by expert id (dicts over the row's expected and actual ids)
        self.c = contract
        self.experts = experts
        self.sig = sig
        self.numbers, self.valid = numbers, valid  # non-NaN values; values > the serial sentinel
        self.e, self.a = exp_ids, act_ids
        self.keys, self.ranking = keys, ranking
        self.scores, self.bias = scores, bias
        self.k = len(exp_ids)

    def _key(self, expert):
        return self.keys[expert] if 0 <= expert < self.experts else None

    def _allowance(self, expert):
        sig, x = self.sig[expert], self.scores[expert]
        if not (math.isfinite(sig) and math.isfinite(x)):
            return 0.0
        ulps = self.c.near_tie_ulp + self.c.near_tie_x_ulp * (1.0 - sig) * abs(x)
        return ulps * f32_ulp(sig)

    def _tie_is_exact(self, a, b):
        """Whether every faithful implementation ranks experts a and b equal.

        True for equal logits and equal bias; for logits both deep in saturation
        (sigmoid exactly 1.0 above 20, exactly 0.0 below -90 where exp(-x)
        overflows fp32, in any implementation) with equal bias; and for equal
        infinite ranking values.
        Otherwise equal oracle values are a coincidence of rounding (a near tie).
        """

        def same(u, v):
            return u == v or (math.isnan(u) and math.isnan(v))

        ra, rb = self.ranking[a], self.ranking[b]
        if math.isinf(ra) and ra == rb:
            return True
        xa, xb = self.scores[a], self.scores[b]
        saturated = (xa >= 20 and xb >= 20) or (xa <= -90 and xb <= -90)
        return same(self.bias[a], self.bias[b]) and (same(xa, xb) or saturated)

    def round_index(self):
        """aiter's round index: slot j holds id j where only -inf/NaN were left to rank."""
        for j in range(self.k):
            e = self.e[j]
            if self.a[j] == j and self.e[j] != j and (self._is_nan(e) or self.ranking[e] == -float("inf")):
                return "nan_last", f"round index {j} emitted as the expert id where only -inf/NaN remain"
        return None

    def _near_experts(self, a, b):
        """Whether experts a and b are near-tied: closer than both sigmoids' error bounds, but not equal."""
        if not (0 <= a < self.experts and 0 <= b < self.experts):
            return False
        ra, rb = self.ranking[a], self.ranking[b]
        if not (math.isfinite(ra) and math.isfinite(rb)):
            return False
        return abs(ra - rb) <= self._allowance(a) + self._allowance(b)

    def _is_nan(self, expert):
        return 0 <= expert < self.experts and self.keys[expert] == oracle.NAN_KEY

    def ids(self) -> tuple[str, str]:
        """(clause or 'near_tie', reason) for a row whose ids differ."""
        e, a, k = self.e, self.a, self.k
        diff = [j for j in range(k) if e[j] != a[j]]
        if self.c.name == "serial":
            valid = self.valid
            if any(self._is_nan(x) for x in a if x not in e):
                return "nan_last", "a NaN expert was chosen (the serial scan never takes NaN)"
            if any(j >= valid for j in diff):
                return "sentinel_fallback", f"only {valid} values beat -1e30; slots {valid}.. must hold expert 0"
        else:
            numbers = self.numbers
            found = self.round_index()
            if found:
                return found
            if any(self._is_nan(x) for x in a if x not in e) and any(not self._is_nan(m) for m in e if m not in a):
                return "nan_last", "a NaN expert was chosen over a number"
            if any(j >= numbers for j in diff):
                return "nan_last", f"only {numbers} non-NaN values; NaN experts fill slots {numbers}.. in tie order"
        if set(e) == set(a):
            j = diff[0]
            ke, ka = self._key(e[j]), self._key(a[j])
            if ke == ka and not self._tie_is_exact(e[j], a[j]):
                return "near_tie", f"slot {j}: different inputs that happen to round to one ranking value"
            if ke == ka:
                return "tie_order", f"same expert set, equal keys, other priority order (slot {j}: {a[j]} before {e[j]})"
            if self._near_experts(e[j], a[j]):
                return "near_tie", f"slot {j}: ranking values {abs(ke - ka)} ULP apart, within the sigmoid tolerance"
            return "output_order", f"same expert set in another order (slot {j}: expected {e[j]}, got {a[j]})"
        extra = [x for x in a if x not in e]
        missing = [m for m in e if m not in a]
        if any(x < 0 or x >= self.experts for x in extra):
            return "validity", "expert id out of range"
        if all(any(self._key(x) == self._key(m) and self._tie_is_exact(x, m) for m in missing) for x in extra):
            return "tie_order", "equal keys at the cutoff, other experts chosen (tie priority not followed)"
        if all(any(self._near_experts(x, m) for m in missing) for x in extra):
            return "near_tie", "each differing expert is within the sigmoid tolerance of an expected one at the cutoff"
        return "selection", f"expected experts {missing} are missing, {extra} chosen instead"

    def weights(self, w_exp, w_act, sig_sel, rank_sel, renormalize, rsf) -> tuple[str, str]:
        """(clause, reason) for a row with equal ids but weights out of tolerance."""
        t_exp = torch.tensor(w_exp)
        t_act = torch.tensor(w_act)

        def close(alt):
            return bool(weights_close(t_act, alt, self.c).all())

        def formula(values, renorm=renormalize, scale=rsf):
            v = torch.tensor(values, dtype=torch.float32)
            if renorm:
                total = v.sum()
                if self.c.name == "serial":
                    v = v / (total + 1e-20)
                elif total > 0:
                    v = v / total
            return v * scale

        if close(formula(rank_sel)):
            return "bias_in_weight", "weights match sig + bias, not sig"
        if renormalize and self.c.name != "serial":
            total = float(torch.tensor(sig_sel).sum())
            if not total > 0 and not bool(torch.isfinite(t_act).all()):
                return "renorm_guard", f"sum of weights is {total}: the guard must not divide"
        if renormalize and close(formula(sig_sel, renorm=False)):
            return "renorm_guard", "weights were not renormalized"
        if rsf != 1.0 and (close(t_exp * rsf) or close(t_exp / rsf)):
            return "scaling", f"weights scaled by routed_scaling_factor={rsf} twice or not at all"
        return "weight_accuracy", "weights differ beyond the contract's tolerance"
