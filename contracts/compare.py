"""Compare a candidate's output with the expected output, column by column.

Every row gets one verdict:

- ``exact``: ids equal, weights bit-equal (NaN matching NaN);
- ``within_tolerance``: ids equal, weights within the contract's tolerance;
- ``near_tie``: the expert sets or orders differ only among experts whose
  ranking values are closer than two faithful sigmoids' error bounds (spec §9;
  ``oracle.Contract`` defines the bound): such implementations may swap them. Counted apart, never a failure;
- ``mismatch``: anything else. A mismatched row is attributed to exactly one
  clause of the contract, with a reason, and to ``selection`` only when
  nothing more specific explains it;
- ``expected``: a mismatch whose clause the candidate declares as a known
  deviation.

Mismatches are data first: per-row arrays and per-cell records. Text is
made once, at the edge (``contracts.report``).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch

import oracle

__all__ = ["CaseOutcome", "Expected", "agrees", "compare_case", "expected_for", "ulp_distance"]

VERDICTS = ("exact", "within_tolerance", "near_tie", "mismatch", "expected")
DETAILS_PER_CLAUSE = 5


@dataclass
class Expected:
    """The reference side of a comparison, plus what attribution needs."""

    weights: torch.Tensor
    ids: torch.Tensor
    sig: torch.Tensor  # fp32 [M, E], the oracle's
    ranking: torch.Tensor  # fp32 [M, E]
    keys: torch.Tensor  # int32 [M, E]


@dataclass
class CaseOutcome:
    rows: int
    verdict_counts: dict[str, int] = field(default_factory=dict)
    clause_rows: dict[str, int] = field(default_factory=dict)  # unexpected mismatches per clause
    expected_rows: dict[str, int] = field(default_factory=dict)  # declared deviations seen, per clause
    inexact_weight_rows: int = 0
    max_weight_ulp: float = 0.0
    cells: list[dict] = field(default_factory=list)
    rows_detail: list[dict] = field(default_factory=list)  # one per non-exact row worth showing


def _f32_ulp(value: float) -> float:
    # ULP of an fp32 number: 2^(exponent - 23), floored at the subnormal step.
    if value == 0 or not math.isfinite(value):
        return 2.0**-149
    return max(2.0 ** (math.frexp(abs(value))[1] - 24), 2.0**-149)


def expected_for(case, contract: oracle.Contract) -> Expected:
    """The oracle's answer for ``case`` under ``contract``, with its ranking data."""
    weights, ids, sig, ranking = oracle.route_with_values(
        case.scores,
        case.bias,
        case.topk,
        renormalize=case.renormalize,
        routed_scaling_factor=case.routed_scaling_factor,
        contract=contract,
    )
    return Expected(weights, ids, sig, ranking, oracle.rank_keys(ranking))


def agrees(exp: Expected, output, contract: oracle.Contract) -> torch.Tensor | None:
    """Per row: does ``output`` give the expected ids, with weights within tolerance? None if malformed."""
    try:
        w, ids = output
        same_ids = (ids.to(exp.ids.device) == exp.ids).all(1)
        return same_ids & _weights_close(w.to(exp.weights.device), exp.weights, contract).all(1)
    except (TypeError, ValueError, RuntimeError):
        return None


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """fp32 ULP steps between ``a`` and ``b`` (float64; 0 for NaN vs NaN, inf for NaN vs number)."""
    ka = oracle.rank_keys(a.float().contiguous()).long()
    kb = oracle.rank_keys(b.float().contiguous()).long()
    d = (ka - kb).abs().double()
    na, nb = torch.isnan(a), torch.isnan(b)
    d = torch.where(na & nb, torch.zeros_like(d), d)
    return torch.where(na ^ nb, torch.full_like(d, float("inf")), d)


def _validity_failure(actual, case, device) -> str | None:
    if not (isinstance(actual, (tuple, list)) and len(actual) == 2):
        return f"returned {type(actual).__name__}, not a (weights, ids) pair"
    w, ids = actual
    if not isinstance(w, torch.Tensor) or not isinstance(ids, torch.Tensor):
        return f"returned ({type(w).__name__}, {type(ids).__name__}), not two tensors"
    shape = (case.spec.rows, case.topk)
    if tuple(w.shape) != shape or tuple(ids.shape) != shape:
        return f"shapes weights {tuple(w.shape)}, ids {tuple(ids.shape)}; expected {shape}"
    if w.dtype != torch.float32 or ids.dtype != torch.int32:
        return f"dtypes weights {w.dtype}, ids {ids.dtype}; expected torch.float32 and torch.int32"
    if w.device != device or ids.device != device:
        return f"outputs on {w.device}/{ids.device}; the inputs were on {device}"
    return None


def _weights_close(a, e, c: oracle.Contract):
    return torch.isclose(a, e, rtol=c.weight_rtol, atol=c.weight_atol, equal_nan=True)


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


def _row_facts(keys, ranking, ids, topk: int):
    """Per row: size of the tie group at the cutoff, whether it straddles, NaN count."""
    cutoff = keys.gather(1, ids[:, topk - 1 : topk])
    group = (keys == cutoff).sum(1)
    inside = (keys.gather(1, ids) == cutoff).sum(1)
    return group, group > inside, torch.isnan(ranking).sum(1)


def _fast_attribution(case, c, bad_t, e, a, keys, ranking, ids_equal, invalid) -> list:
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


class _RowAttribution:
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
        return ulps * _f32_ulp(sig)

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
            return bool(_weights_close(t_act, alt, self.c).all())

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


def compare_case(
    case,
    exp: Expected,
    actual,
    contract: oracle.Contract,
    *,
    deviations: dict[str, str],
    inputs_changed: bool = False,
    exact: bool = False,
    max_cells: int = 20000,
) -> CaseOutcome:
    """Compare ``actual`` with ``exp`` for every row of ``case``."""
    rows, k = case.spec.rows, case.topk
    out = CaseOutcome(rows=rows)
    counts = dict.fromkeys(VERDICTS, 0)
    # --exact: bit-identity (weights to 0 ULP, no near ties), for kernels that share arithmetic
    c = dataclasses.replace(contract, weight_rtol=0.0, weight_atol=0.0, near_tie_ulp=0, near_tie_x_ulp=0.0) if exact else contract

    def record_rows(clause, reason, indices):
        kind = "expected" if clause in deviations else "mismatch"
        counts[kind] += len(indices)
        bucket = out.expected_rows if kind == "expected" else out.clause_rows
        bucket[clause] = bucket.get(clause, 0) + len(indices)
        return kind

    problem = "inputs were modified in place" if inputs_changed else _validity_failure(actual, case, case.scores.device)
    if problem:
        kind = record_rows("validity", problem, range(rows))
        out.rows_detail.append({"row": 0, "clause": "validity", "reason": problem, "verdict": kind})
        out.cells.append({"row": 0, "col": -1, "clause": "validity", "verdict": kind, "reason": problem})
        out.verdict_counts = counts
        return out

    w_act, ids_act = actual[0].detach(), actual[1].detach()
    ids_exp, w_exp = exp.ids, exp.weights
    ids_equal = (ids_act == ids_exp).all(1)
    close = _weights_close(w_act, w_exp, c)
    bit_equal = (w_act == w_exp) | (torch.isnan(w_act) & torch.isnan(w_exp))
    good = ids_equal & close.all(1)
    exact_rows = good & bit_equal.all(1)
    counts["exact"] = int(exact_rows.sum())
    counts["within_tolerance"] = int((good & ~exact_rows).sum())
    out.inexact_weight_rows = counts["within_tolerance"]
    if ids_equal.any():
        ulps = ulp_distance(w_act[ids_equal], w_exp[ids_equal])
        finite = ulps[torch.isfinite(ulps)]
        out.max_weight_ulp = float(finite.max()) if finite.numel() else 0.0

    experts = case.scores.shape[1]
    out_of_range = ((ids_act < 0) | (ids_act >= experts)).any(1)
    ordered = ids_act.sort(dim=1).values
    repeats = ordered[:, 1:] == ordered[:, :-1]
    if c.allows_duplicate_ids:  # only the expert-0 fallback may repeat
        repeats &= ordered[:, 1:] != 0
    invalid_rows = out_of_range | repeats.any(1)
    good &= ~invalid_rows
    bad = (~good).nonzero().squeeze(1).tolist()
    if not bad:
        out.verdict_counts = counts
        return out

    # Only the rows that need it travel to Python.
    bad_t = torch.tensor(bad, device=ids_exp.device)
    e_b, a_b = ids_exp[bad_t].long(), ids_act[bad_t].long().clamp(0, experts - 1)
    keys_b, rank_b = exp.keys[bad_t], exp.ranking[bad_t]
    group, straddles, nan_count = _row_facts(keys_b, rank_b, e_b, k)
    fast = _fast_attribution(case, c, bad_t, e_b, a_b, keys_b, rank_b, ids_equal[bad_t], invalid_rows[bad_t])
    sel = {
        "e": ids_exp[bad_t].tolist(),
        "a": ids_act[bad_t].tolist(),
        "we": w_exp[bad_t].tolist(),
        "wa": w_act[bad_t].tolist(),
        "ids_eq": ids_equal[bad_t].tolist(),
        "invalid": invalid_rows[bad_t].tolist(),
        "out_of_range": out_of_range[bad_t].tolist(),
        "group": group.tolist(),
        "straddles": straddles.tolist(),
        "nan": nan_count.tolist(),
        "close": close[bad_t].tolist(),
        "ulp": ulp_distance(w_act[bad_t], w_exp[bad_t]).tolist(),
        "numbers": (~torch.isnan(rank_b)).sum(1).tolist(),
        "valid": (rank_b > oracle.SERIAL_SENTINEL).sum(1).tolist(),
    }
    # Only the columns attribution looks at: the row's expected and actual experts.
    cols = torch.cat([e_b, a_b], dim=1)
    cols_list = cols.tolist()
    for name, matrix in (("ranking", rank_b), ("sig", exp.sig[bad_t]), ("scores", case.scores[bad_t].float())):
        sel[name] = matrix.gather(1, cols).tolist()
    sel["keys"] = keys_b.gather(1, cols).tolist()
    sel["bias"] = case.bias.float()[cols].tolist()
    shown: dict[str, list[int]] = {}  # clause -> [rows shown, straddling rows shown]

    for i, row in enumerate(bad):
        if fast[i] is not None:
            clause, reason = fast[i]
        else:
            by_expert = {name: dict(zip(cols_list[i], sel[name][i])) for name in ("keys", "ranking", "scores", "bias", "sig")}
            attr = _RowAttribution(
                c, sel["e"][i], sel["a"][i], by_expert["keys"], by_expert["ranking"], by_expert["scores"], by_expert["bias"],
                sel["numbers"][i], sel["valid"][i], by_expert["sig"], experts,
            )  # fmt: skip
            if sel["invalid"][i]:
                what = "an expert id out of [0, E)" if sel["out_of_range"][i] else "an expert id twice"
                clause, reason = (c.name == "aiter" and attr.round_index()) or ("validity", f"row holds {what}")
            elif sel["ids_eq"][i]:
                sig_sel = [by_expert["sig"][x] for x in sel["e"][i]]
                rank_sel = [by_expert["ranking"][x] for x in sel["e"][i]]
                clause, reason = attr.weights(sel["we"][i], sel["wa"][i], sig_sel, rank_sel, case.renormalize, case.routed_scaling_factor)
            else:
                clause, reason = attr.ids()
        if clause == "near_tie":
            counts["near_tie"] += 1
            kind = "near_tie"
        else:
            kind = record_rows(clause, reason, [row])

        # Row examples: a few per clause, tie-straddling ones preferred.
        seen = shown.setdefault(clause, [0, 0])
        if seen[0] < DETAILS_PER_CLAUSE or (sel["straddles"][i] and seen[1] < DETAILS_PER_CLAUSE):
            seen[0] += 1
            seen[1] += bool(sel["straddles"][i])
            out.rows_detail.append(
                {
                    "row": row,
                    "clause": clause,
                    "verdict": kind,
                    "reason": reason,
                    "expected_ids": sel["e"][i],
                    "actual_ids": sel["a"][i],
                    "expected_weights": sel["we"][i],
                    "actual_weights": sel["wa"][i],
                    "tie_group_size": sel["group"][i],
                    "straddles_cutoff": bool(sel["straddles"][i]),
                    "nan_count": sel["nan"][i],
                }
            )
        if len(out.cells) < max_cells:
            for col in range(k):
                ide, ida = sel["e"][i][col], sel["a"][i][col]
                if ide != ida or not sel["close"][i][col]:
                    out.cells.append(
                        {
                            "row": row,
                            "col": col,
                            "expected_id": ide,
                            "actual_id": ida,
                            "expected_weight": sel["we"][i][col],
                            "actual_weight": sel["wa"][i][col],
                            "weight_ulp": sel["ulp"][i][col],
                            "clause": clause,
                            "verdict": kind,
                            "reason": reason,
                            "tie_group_size": sel["group"][i],
                            "straddles_cutoff": bool(sel["straddles"][i]),
                            "nan_count": sel["nan"][i],
                        }
                    )
    out.verdict_counts = counts
    return out
