"""Why a router departs from the contract on a row, in words a trainer or RL engineer reads: the train-versus-serve table.

Two routers route a token differently because one of them (or both) departs
from the contract there. For each side and each row, ``explain_rows`` says
which, from what the harness already knows and nothing else:

- ``follows``: the row agrees with the oracle (ids exactly, weights within
  the contract's tolerance);
- ``near_tie``: the row differs from the oracle only among experts whose
  ranking values are within both implementations' rounding;
- ``declared``: every clause the row breaks is one the candidate declares
  (its primary clause and the declaration's reason);
- ``variant``: the row matches the contract with one to three fields
  changed, the diagnosis' single-field variants (``oracle.variants``: bf16
  score rounding, NaN first, the 0.0 group mask, the renormalization
  epsilon, ...) or the fields in which the candidate's own contract differs
  (a Megatron router's ``mcore-sigmoid``): the fewest fields that do it, and
  a field counts only where it changes the oracle's answer for that row (a
  variant that gives the row the contract's own answer explains nothing, as
  in the diagnosis). Clauses the candidate declares (under the matrix's
  contract or its own) may stay broken beside the variant, as a check
  allows them (a bounded one only within its bound, validity never), and
  are named; so may a near tie;
- ``unexplained``: none of those. Never a guessed cause: a broken router
  shows as unexplained rows, with the clause it breaks.

``pair_causes`` then joins two sides' explanations over the rows a pair
routes differently (``PairDeparture`` records, ``MatrixPair.departures``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import torch

import oracle

from ..reports.schema import PairDeparture
from . import attribution as A
from .dense import DenseAnswer, take_rows
from .expected import agrees, expected_for
from .verdicts import RowVerdicts, compare_case

__all__ = ["CLAUSE_WORDS", "FIELD_WORDS", "Change", "Departure", "explain_ids", "SideRows", "explain_rows", "pair_causes", "variant_pool"]

MAX_FIELDS = 3  # a row explained by more fields at once than this is left unexplained (the diagnosis combines as many)
MAX_COMBINED_POOL = 6
# Variants compared as a check compares (the attribution, the costly part) per case, for the rows that agree with
# none: a clause the candidate declares beside the variant (Megatron's torch.topk ties under its bf16 scores), or a near
# tie. Rows left after these are unexplained, never guessed.
MAX_COMPARED_ATTEMPTS = 16  # fields tried in combinations: the candidate's own contract's first, then those that move rows
COMPARISON_ONLY = frozenset({"output_order"})  # fields that change how a row is compared, not the oracle's answer
# An own contract's fields that are no cause of a row: its words, its shape (the case's is used), its tolerances, and
# the call options a case passes itself (renormalize, the scaling factor).
_META_FIELDS = frozenset({"name", "summary", "source", "experts", "topk", "n_group", "topk_group", "near_tie_ulp", "near_tie_x_ulp",
                          "weight_rtol", "weight_atol", "default_renormalize", "routed_scaling_factor"})  # fmt: skip

# The clause in a trainer's words (the console's; the declaration's own reason goes to matrix.json).
CLAUSE_WORDS = {
    "validity": "an invalid answer (an id out of range or twice, a malformed map)",
    "group_mask": "groups: experts of a group the contract drops chosen",
    "group_selection": "groups: other groups kept",
    "group_tie_order": "group tie order (groups whose scores tie exactly)",
    "nan_last": "NaN handling (a NaN logit ranked above the numbers)",
    "sentinel_fallback": "the fallback when too few experts are eligible",
    "tie_order": "tie order (experts whose scores tie exactly)",
    "signed_zero": "the sign of a zero score",
    "selection": "other experts selected",
    "output_order": "column order",
    "bias_in_weight": "the correction bias in the weights",
    "renorm_guard": "the renormalization's zero-sum guard / epsilon",
    "renormalization": "renormalization (on or off)",
    "softmax_scope": "the softmax's scope",
    "scaling": "the scaling factor",
    "weight_accuracy": "weight rounding",
}


# A field's change in a trainer's words ({dt}: the logits' dtype); the diagnosis' label (``oracle.variants``) where none.
FIELD_WORDS = {
    ("score_precision", "input"): "the trainer's {dt} score rounding before ranking",
    ("score_precision", "fp32"): "scores ranked in fp32",
    ("weight_precision", "input"): "the trainer's {dt} weights",
    ("weight_precision", "fp32"): "weights computed in fp32",
    ("renormalize_when", "always"): "renormalized although renormalize=False (the trainer always divides)",
    ("renormalize_when", "never"): "not renormalized although renormalize=True (the trainer's softmax over the k chosen is its weights)",
    ("renormalize", "eps"): "renormalization epsilon (sum + 1e-20)",
    ("renormalize", "raw"): "renormalization without a zero-sum guard (raw sum)",
    ("renormalize", "guard"): "renormalization only where the sum > 0 (no epsilon)",
    ("nan_rule", "first"): "NaN handling: NaN ranked first (torch.topk)",
    ("nan_rule", "last"): "NaN handling: NaN ranked last",
    ("nan_rule", "never"): "NaN handling: NaN never taken",
    ("group_mask", 0.0): "groups: dropped groups masked with 0.0",
    ("group_mask", "-inf"): "groups: dropped groups masked with -inf",
    ("group_score", "max"): "groups: group score = its largest value",
    ("group_score", "top2_sum"): "groups: group score = sum of its top two",
    ("group_score", "topk_share_sum"): "groups: group score = sum of its top k / groups kept (Megatron)",
    ("group_tie_rule", "highest"): "group tie order: the highest group index first",
    ("group_tie_rule", "lowest"): "group tie order: the lowest group index first",
    ("tie_rule", "aiter"): "tie order: aiter's lane order",
    ("tie_rule", "lowest"): "tie order: the lowest index first",
    ("sigmoid_formula", "expf"): "sigmoid as 1 / (1 + expf(-x))",
    ("sigmoid_formula", "correctly_rounded"): "sigmoid correctly rounded",
    ("bias", "in_weight"): "the correction bias added into the weights",
    ("bias", "ranks_only"): "the correction bias in the ranking only",
    ("scoring", "softmax_of_topk"): "softmax over the k chosen only",
    ("scoring", "softmax"): "softmax over all experts before the top-k",
    ("output_order", "any"): "column order (same experts, another order)",
}
_DTYPE_WORDS = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}


@dataclass(frozen=True)
class Departure:
    """How one side routes a row, against the contract (one of the kinds of the module docstring)."""

    kind: str  # follows | near_tie | declared | variant | unexplained
    clause: str | None = None  # the row's primary clause against the contract (declared, variant, unexplained)
    fields: tuple[tuple[str, str], ...] = ()  # variant: (field, value) changed
    declared: tuple[str, ...] = ()  # declared clauses still broken beside the variant (declared: the primary)
    words: str = ""

    @property
    def key(self) -> str:
        if self.kind == "declared":
            return f"declared:{self.clause}"
        parts = [self.kind]
        if self.fields:
            parts.append("+".join(f"{f}={v}" for f, v in self.fields))
        if self.declared:
            parts.append("declared " + "+".join(self.declared))
        if self.kind == "unexplained" and self.clause:
            parts.append(self.clause)
        return ":".join(parts)

    @property
    def departs(self) -> bool:
        return self.kind != "follows"


FOLLOWS = Departure("follows", words="follows the contract")
NEAR_TIE = Departure("near_tie", words="a near tie (experts within rounding of each other; the contract's choice up to rounding)")


@dataclass
class SideRows:
    """One side's departures on a case: ``codes[i]`` indexes ``causes`` (``-1``: follows the contract)."""

    codes: torch.Tensor  # int64 [M], on the CPU
    causes: list[Departure] = field(default_factory=list)

    def departure(self, code: int) -> Departure:
        return FOLLOWS if code < 0 else self.causes[code]

    @classmethod
    def following(cls, rows: int) -> "SideRows":
        return cls(torch.full((rows,), -1, dtype=torch.long))


@dataclass(frozen=True)
class Change:
    """One field changed from the contract, in words; ``own``: as the candidate's own contract has it."""

    field: str
    value: object
    words: str
    own: bool = False


def variant_pool(c, dtype: torch.dtype, *, own=None, device: str | None = None) -> list[Change]:
    """Every single-field change tried: the fields where the candidate's own contract ``own`` differs from ``c`` first
    (a trainer's arithmetic), then the diagnosis' variants of ``c`` (``oracle.variants``) not among them."""
    dt = _DTYPE_WORDS.get(dtype, str(dtype).removeprefix("torch."))
    on_cpu = device is not None and str(device).split(":")[0] == "cpu"
    labels = {}
    for v in oracle.variants(c, logits_dtype=dtype):
        if v.field == "tie_rule" and v.value == "aiter" and (c.scoring != "sigmoid" or on_cpu):
            continue  # aiter's lane order is a GPU's wave64 traversal (as the diagnosis offers it)
        labels[(v.field, _plain(v.value))] = (v.value, FIELD_WORDS.get((v.field, _plain(v.value)), v.label).format(dt=dt))
    pool: list[Change] = []
    if own is not None and own.name != c.name:
        for f in own.as_dict():
            value = getattr(own, f)
            if f in _META_FIELDS or f.startswith("admitted_") or value == getattr(c, f):
                continue
            words = FIELD_WORDS.get((f, _plain(value)), f"{f} = {_plain(value)} (as {own.name} has it)").format(dt=dt)
            pool.append(Change(f, value, words, own=True))
    taken = {(ch.field, _plain(ch.value)) for ch in pool}
    pool += [Change(f, value, words) for (f, plain), (value, words) in labels.items() if (f, plain) not in taken]
    return pool


def explain_rows(case, exp, answer, c, *, declared: dict, own=None, own_declared: dict | None = None, device: str | None = None,
                 pool=None, verdicts: RowVerdicts | None = None) -> SideRows:  # fmt: skip
    """Each row's ``Departure`` for ``answer`` (a valid answer to ``case``) against ``exp`` (the oracle's under ``c``).
    ``verdicts``: the rows' verdicts under ``declared`` where the caller compared them already (``compare_case``'s
    ``per_row``), else compared here."""
    v = verdicts if verdicts is not None else compare_case(case, exp, answer, c, deviations=declared, per_row=True, max_cells=0).per_row
    if v is None:  # no answer at all (compare_case's whole-case problem): nothing of it follows the contract
        return SideRows(torch.zeros(case.spec.rows, dtype=torch.long), [_unexplained("validity")])
    codes = torch.full((case.spec.rows,), -1, dtype=torch.long)
    out = SideRows(codes)
    index: dict[Departure, int] = {}

    def code_of(d: Departure) -> int:
        if d not in index:
            index[d] = len(out.causes)
            out.causes.append(d)
        return index[d]

    near, expected, mismatch = v.near_tie.cpu(), v.expected.cpu(), v.mismatch.cpu()
    primary = v.primary.cpu()
    if bool(near.any()):
        codes[near] = code_of(NEAR_TIE)
    for clause_i in primary[expected].unique().tolist():
        clause = A.CLAUSE_ORDER[clause_i]
        d = Departure("declared", clause=clause, declared=(clause,), words=f"{CLAUSE_WORDS.get(clause, clause)} [declared {clause}]")
        codes[expected & (primary == clause_i)] = code_of(d)
    rows = mismatch.nonzero().squeeze(1)
    if not rows.numel():
        return out
    # what the candidate declares, under this contract and its own, may stay broken beside a variant (bounded
    # declarations only within their bound, validity never: compare_case's own rules)
    deviations = {**(own_declared or {}), **declared}
    pool = pool if pool is not None else variant_pool(c, case.scores.dtype, own=own, device=device)
    found = _search(case, exp, answer, c, rows, deviations, pool, primary[rows])
    for j, row in enumerate(rows.tolist()):
        d = found[j]
        codes[row] = code_of(d if d is not None else _unexplained(A.CLAUSE_ORDER[int(primary[row])]))
    return out


def _unexplained(clause: str) -> Departure:
    return Departure("unexplained", clause=clause, words=f"unexplained ({CLAUSE_WORDS.get(clause, clause)} [{clause}], no known cause)")


def _search(case, exp, answer, c, rows: torch.Tensor, deviations: dict, pool: list[Change], primary: torch.Tensor,
            ids_only: bool = False) -> list[Departure | None]:  # fmt: skip
    """The fewest fields of ``pool`` (one, then two, then three) under which each of ``rows`` agrees with the oracle,
    or breaks only clauses of ``deviations`` (or differs by a near tie), each field changing the oracle's answer for
    the row; None where none do. ``ids_only``: the experts alone decide (a trace's flips are about ids), exactly."""
    dev = case.scores.device
    sub = case.sliced(_respec(case.spec, rows.numel()), rows.to(dev))
    ans = take_rows(answer, rows.to(answer[1].device))
    base = expected_for(sub, c)
    found: list[Departure | None] = [None] * rows.numel()
    moved: dict[int, torch.Tensor] = {}  # pool index -> rows whose answer the field changes
    budget = [MAX_COMPARED_ATTEMPTS]

    def attempt(members: tuple[int, ...], compare: bool) -> None:
        left = torch.tensor([d is None for d in found])
        fields = {pool[i].field: pool[i].value for i in members}
        if not bool(left.any()) or len(fields) != len(members):
            return  # nothing left, or one field set twice
        try:
            trial = c.replace(name=c.name, **fields)
            var = expected_for(sub, trial)
        except (ValueError, RuntimeError):  # a combination the contract or the case's shapes cannot take
            return
        if len(members) == 1:
            i = members[0]
            comparison_only = pool[i].field in COMPARISON_ONLY
            if comparison_only:  # the order of the columns: it moves only rows of the contract's experts in another order
                moved[i] = _reordered(base, ans)
            else:
                moved[i] = ~(_same_ids(var, (base.weights, base.ids), c) if ids_only else _same_answer(var, base))
        ok = left.clone()
        for i in members:  # every field must move the row: a field that changes nothing there explains nothing
            ok &= moved[i]
        if not bool(ok.any()):
            return
        agree = _same_ids(var, ans, trial) if ids_only else agrees(var, ans, trial)  # cheap: most rows, exactly
        agree = torch.zeros_like(ok) if agree is None else agree.cpu()
        held: dict[int, str] = {}
        check = (ok & ~agree).nonzero().squeeze(1)
        ok &= agree
        if compare and not ids_only and check.numel() and budget[0] > 0:  # the others compared as a check compares them (costly)
            budget[0] -= 1
            try:
                v = _verdicts_of(sub, trial, ans, check, deviations)
            except (ValueError, RuntimeError):
                return
            ok[check] = ~v.mismatch.cpu()
            for j, exp_j, near_j, prim_j in zip(check.tolist(), v.expected.tolist(), v.near_tie.tolist(), v.primary.tolist()):
                if exp_j:
                    held[j] = A.CLAUSE_ORDER[prim_j]
                elif near_j:
                    held[j] = "near_tie"
        words = " + ".join(pool[i].words for i in members)
        named = ", ".join(f"{f}={_plain(val)}" for f, val in fields.items())
        for j in ok.nonzero().squeeze(1).tolist():
            h = held.get(j)
            extra = "" if h is None else ("; and a near tie" if h == "near_tie" else f"; {CLAUSE_WORDS.get(h, h)} [declared {h}]")
            found[j] = Departure("variant", clause=A.CLAUSE_ORDER[int(primary[j])],
                                 fields=tuple((f, str(_plain(val))) for f, val in fields.items()),
                                 declared=() if h in (None, "near_tie") else (h,), words=f"{words} [{named}]{extra}")  # fmt: skip

    for i in range(len(pool)):
        attempt((i,), compare=False)
    # combinations only of fields that move some row still unexplained: the own contract's fields first, in pool order
    left = torch.tensor([d is None for d in found])
    useful = [i for i in range(len(pool)) if i in moved and bool((moved[i] & left).any())][:MAX_COMBINED_POOL]
    tries = [(i,) for i in range(len(pool)) if i in moved] + [m for n in range(2, MAX_FIELDS + 1) for m in itertools.combinations(useful, n)]
    for members in tries:
        if len(members) > 1:
            attempt(members, compare=False)
    # then the rows that agree with no variant, compared: a declared clause beside the variant (Megatron's torch.topk
    # ties under its bf16 scores), or a near tie; the own contract's fields first (what the candidate says it computes)
    for members in sorted(tries, key=lambda m: (not all(pool[i].own for i in m), len(m))):
        attempt(members, compare=True)
    return found


def _reordered(exp, answer) -> torch.Tensor:
    """bool [B] on the CPU: the expected experts in another column order (never for a dense answer: it has no order)."""
    if isinstance(answer, DenseAnswer):
        return torch.zeros(exp.ids.shape[0], dtype=torch.bool)
    a, e = answer[1].to(exp.ids.device).long(), exp.ids.long()
    return ((a.sort(1).values == e.sort(1).values).all(1) & ~(a == e).all(1)).cpu()


def _same_ids(exp, answer, c) -> torch.Tensor:
    """bool [B] on the CPU: the same experts (in the same columns where the contract fixes the order)."""
    a, e = answer[1].to(exp.ids.device).long(), exp.ids.long()
    if c.output_order == "any":
        a, e = a.sort(1).values, e.sort(1).values
    return (a == e).all(1).cpu()


def explain_ids(case, exp, ids: torch.Tensor, c, rows: torch.Tensor, primary: torch.Tensor, *, device: str | None = None) -> list[Departure]:
    """The ``Departure`` of each of ``rows`` whose ``ids`` break an ids clause (``primary``, CLAUSE_ORDER indices), the
    experts alone compared: a trace's flip (``contracts.run.trace_diff``) in the matrix's words. A trace declares
    nothing, so a row is a variant's or unexplained."""
    if not rows.numel():
        return []
    pool = variant_pool(c, case.scores.dtype, device=device)
    found = _search(case, exp, (exp.weights, ids), c, rows, {}, pool, primary, ids_only=True)
    return [d if d is not None else _unexplained(A.CLAUSE_ORDER[int(p)]) for d, p in zip(found, primary.tolist())]


def _verdicts_of(case, contract, answer, rows: torch.Tensor, deviations: dict) -> RowVerdicts:
    """``compare_case``'s verdicts of ``rows`` of ``case`` only: its cost grows with the rows it reads."""
    dev = case.scores.device
    sub = case.sliced(_respec(case.spec, rows.numel()), rows.to(dev))
    ans = take_rows(answer, rows.to(answer[1].device))
    return compare_case(sub, expected_for(sub, contract), ans, contract, deviations=deviations, per_row=True, max_cells=0).per_row


def _respec(spec, rows: int):
    import dataclasses

    return dataclasses.replace(spec, rows=int(rows))


def _same_answer(a, b) -> torch.Tensor:
    """bool [B] on the CPU: the two expected answers are the same, ids and weights bit for bit (NaN equal to NaN)."""
    ids = (a.ids == b.ids).all(1)
    wa, wb = a.weights, b.weights
    return (ids & ((wa == wb) | (torch.isnan(wa) & torch.isnan(wb))).all(1)).cpu()


def _plain(value):
    if isinstance(value, float):
        return "-inf" if value == float("-inf") else value
    return value


def pair_causes(differs: torch.Tensor, near: torch.Tensor, a: SideRows, b: SideRows) -> list[PairDeparture]:
    """The rows where ``differs`` (a pair's rows routed differently) counted by the two sides' departures; ``near``: the
    pair's own near-tie rows (where neither side departs, a near tie between the two, else the weight tolerance)."""
    rows = differs.cpu().nonzero().squeeze(1)
    if not rows.numel():
        return []
    ca, cb, nr = a.codes[rows], b.codes[rows], near.cpu()[rows]
    keys = torch.stack([ca, cb, nr.long()], 1)
    uniq, counts = keys.unique(dim=0, return_counts=True)
    merged: dict[tuple, PairDeparture] = {}
    for (ka, kb, kn), n in zip(uniq.tolist(), counts.tolist()):
        da, db = a.departure(ka), b.departure(kb)
        if not da.departs and not db.departs:  # each side within the contract: the pair's own verdict says how
            words = ("a near tie between the two (each within the contract)" if kn
                     else "both within the contract (weights each within its tolerance)")  # fmt: skip
            cause = PairDeparture("neither", words, words, "follows", "follows")
        else:
            departs = "both" if da.departs and db.departs else ("a" if da.departs else "b")
            cause = PairDeparture(departs, da.words, db.words, da.key, db.key, unexplained="unexplained" in (da.kind, db.kind))
        key = (cause.departs, cause.a_key, cause.b_key, cause.a)
        merged.setdefault(key, cause).rows += n
    return sorted(merged.values(), key=lambda p: -p.rows)
