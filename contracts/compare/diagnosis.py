"""Diagnosis: the nearest contract a failing router does meet.

A failing check keeps a sample of its unexpectedly mismatched rows (inputs,
the candidate's answer, the primary clause of each), spread over case
families and call options: rows are kept per (family, renormalize, scaling
factor, dtype pair, batch-size class) bucket, evenly within each case, and
the rows routed are shared out evenly between the buckets, so one family's
thousands of rows cannot drown another defect's few. At most
``MAX_SAMPLE_PARTS`` cases are routed (each family's largest first, in
turn): a case costs the same whatever its rows.

The diagnosis routes that sample under every single-field variant of the
contract (``oracle.variants``: scores in bf16, mask 0.0 for -inf,
lowest-index ties, NaN first, no renormalize guard, any output order, bias
in the weights...) and reports which variants explain the rows. A variant
*explains* a row when it changes the oracle's answer for it (or, for a
field of the comparison only such as the output order, how it is compared),
the row's primary clause is no longer broken, and no clause the row did not
break before is broken now (a blame that only moves explains nothing: a bf16
variant does not explain an fp32 router's bias in the weights); clauses the candidate
declares are left out throughout, so its known deviations never dominate the
text. Variants that give the same answer on every sampled row are said to be
indistinguishable on the rows seen. Then the best variants are combined
greedily (up to three fields) into the contract the router matches on the
most rows, and any other built-in contract of the same shape that the
sample matches better is named with the command that checks it.

A candidate whose own contract is the trainer's arithmetic (an mcore
contract: a Megatron router checked under its family's inference contract)
differs there in more fields than the greedy combination takes (scores and
weights in the logits' dtype, renormalized always, the output order, the
group score). Its own contract's arithmetic fields are scored as one
combination, the way a check under that contract scores it: a row counts
when it breaks no undeclared clause, the candidate's declarations under its
own contract excusing theirs row by row (torch.topk's tie and NaN order,
which no field can say; a bounded clause only within its bound), and the
entry says how many rows the arithmetic alone matches and which declared
clauses the rest needed. Named first when it matches more rows than the
greedy combination.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

import torch

import oracle

from ..command_words import without_options
from .expected import expected_for

__all__ = ["DiagnosisSample", "diagnose"]

MAX_SAMPLE_ROWS = 2048  # rows the diagnosis routes
# cases (parts) the diagnosis routes: a part's blame under a variant is a dozen milliseconds of small tensor operations
# whatever its rows, and a check's pinned batch sizes and call contexts make hundreds of buckets of a row or two (445
# parts, 31 s of a 45 s failing check under deepseek-v3); the largest parts of each family first, in turn
MAX_SAMPLE_PARTS = 96
QUICK_SAMPLE_ROWS, QUICK_SAMPLE_PARTS = 512, 16  # a quick look's (DiagnosisSample.quick): about a sixth of the time
PER_BUCKET = 256  # rows kept per (family, call options) bucket while a check runs
MAX_KEPT = 8192  # rows kept in all while a check runs (memory: a row is E logits)
MAX_COMBINED = 3
COMPARISON_ONLY = frozenset({"output_order"})  # fields that change how rows are compared, not the oracle's answer
BETTER_CONTRACT_SHARE = 0.99  # a built-in contract is named when it matches this share of the sampled rows


@dataclass
class _Part:
    case: object  # a Case of only the sampled rows, on the CPU
    weights: torch.Tensor
    ids: torch.Tensor
    primary: torch.Tensor  # int64 [B] primary clause index (CLAUSE_ORDER) under the contract


def _take(part: _Part, idx: torch.Tensor) -> _Part:
    case = part.case
    spec = case.spec.__class__(**{**case.spec.__dict__, "rows": int(idx.numel())})
    sub = case.sliced(spec, idx)
    return _Part(sub, part.weights.index_select(0, idx), part.ids.index_select(0, idx), part.primary.index_select(0, idx))


def _spread(n: int, k: int) -> torch.Tensor:
    """``k`` indices of ``range(n)`` spread evenly (all of them when ``k >= n``)."""
    if k >= n:
        return torch.arange(n)
    return torch.linspace(0, n - 1, k).round().long().unique()


@dataclass
class DiagnosisSample:
    """Mismatched rows gathered case by case while a check runs, per bucket of (family, call options)."""

    buckets: dict[tuple, list[_Part]] = field(default_factory=dict)
    kept: int = 0
    max_rows: int = MAX_SAMPLE_ROWS  # what the diagnosis routes (``quick``: fewer)
    max_parts: int = MAX_SAMPLE_PARTS
    # the selection, once made (rows, parts and the bucket count all read it); add() clears it
    _selection: list[tuple[tuple, _Part]] | None = field(default=None, init=False, repr=False)

    @property
    def full(self) -> bool:
        return self.kept >= MAX_KEPT

    def quick(self) -> None:
        """Route a quick look's sample (``check --quick``): at the defaults the diagnosis alone takes 30-40 s of a
        failing CPU check, more than the quick look's whole budget."""
        self.max_rows, self.max_parts, self._selection = QUICK_SAMPLE_ROWS, QUICK_SAMPLE_PARTS, None

    @property
    def rows(self) -> int:
        """The rows the diagnosis will route."""
        return sum(p.ids.shape[0] for p in self.selected()) if self.kept else 0

    @property
    def parts(self) -> list[_Part]:
        return self.selected()

    def add(self, case, rows: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, primary: torch.Tensor, key: tuple = ()) -> None:
        bucket = self.buckets.setdefault(key, [])
        room = min(PER_BUCKET - sum(p.ids.shape[0] for p in bucket), MAX_KEPT - self.kept)
        if room <= 0 or rows.numel() == 0:
            return
        pick = _spread(int(rows.numel()), room)
        rows, primary = rows.index_select(0, pick.to(rows.device)), primary.index_select(0, pick.to(primary.device))
        whole = _Part(case, weights, ids, primary)
        sub = _take(_Part(whole.case, weights, ids, torch.zeros(case.spec.rows, dtype=torch.long, device=ids.device)), rows)
        part = _Part(_to_cpu(sub.case), sub.weights.cpu(), sub.ids.cpu(), primary.cpu())
        bucket.append(part)
        self.kept += int(rows.numel())
        self._selection = None

    def selected(self) -> list[_Part]:
        """At most ``MAX_SAMPLE_ROWS`` rows, shared out evenly between the buckets (a small bucket gives all it has), from
        at most ``MAX_SAMPLE_PARTS`` cases."""
        return [part for _, part in self._selected()]

    def buckets_selected(self) -> int:
        """How many buckets the selected rows come from."""
        return len({key for key, _ in self._selected()})

    def _selected(self) -> list[tuple[tuple, _Part]]:
        if self._selection is None:
            self._selection = self._select()
        return self._selection

    def _select(self) -> list[tuple[tuple, _Part]]:
        sizes = {key: sum(p.ids.shape[0] for p in parts) for key, parts in self.buckets.items() if parts}
        quota, left = {}, self.max_rows
        for n, key in enumerate(sorted(sizes, key=lambda k: sizes[k])):
            quota[key] = min(sizes[key], left // (len(sizes) - n))
            left -= quota[key]
        out = []
        for key, parts in self.buckets.items():
            if key not in quota:
                continue
            size, want = sizes[key], quota[key]
            if want >= size:
                out += [(key, p) for p in parts]
                continue
            chosen = set(_spread(size, want).tolist())
            at = 0
            for p in parts:
                n = p.ids.shape[0]
                local = torch.tensor([i - at for i in range(at, at + n) if i in chosen], dtype=torch.long)
                if local.numel():
                    out.append((key, _take(p, local)))
                at += n
        return _fewest_parts(out, self.max_parts)


def _fewest_parts(parts: list[tuple[tuple, _Part]], cap: int) -> list[tuple[tuple, _Part]]:
    """At most ``cap`` of the (bucket, part) pairs, in their order: each family's largest part, then each one's next
    largest, in turn (every family sampled keeps a part while there is room for one per family)."""
    if len(parts) <= cap:
        return parts
    by_family: dict[str, list[int]] = {}
    for i, (_, p) in enumerate(parts):
        by_family.setdefault(p.case.spec.family, []).append(i)
    queues = [sorted(idx, key=lambda i: -parts[i][1].ids.shape[0]) for idx in by_family.values()]
    chosen: list[int] = []
    while len(chosen) < cap:
        for q in queues:
            if q and len(chosen) < cap:
                chosen.append(q.pop(0))
    return [parts[i] for i in sorted(chosen)]


def _to_cpu(case):
    from ..cases.build import Case

    return Case(case.spec, case.scores.cpu(), None if case.bias is None else case.bias.cpu(), case.renormalize, case.routed_scaling_factor,
                None if case.expert_scale is None else case.expert_scale.cpu())


def _broken(part: _Part, contract, declared_mask: torch.Tensor, exp=None) -> torch.Tensor:
    """bool [B, len(CLAUSE_ORDER)]: the undeclared clauses each sampled row breaks under ``contract``."""
    from .verdicts import row_blame

    exp = exp if exp is not None else expected_for(part.case, contract)
    return row_blame(part.case, exp, (part.weights, part.ids), contract) & ~declared_mask


@dataclass
class _Routed:
    """The sample under the contract: each part's expected answer and every clause each row breaks (no mask)."""

    parts: list[_Part]
    contract: object
    base: list
    blame: list


def _broken_under(routed: _Routed, i: int, contract, mask: torch.Tensor, var) -> torch.Tensor:
    """``_broken`` of part ``i`` under ``contract``, whose expected answer there is ``var``. A part whose every row gets
    the contract's own answer, compared the same way, breaks what it breaks under the contract: its blame is not routed
    again (most parts, for most variants: each changes a few kinds of row; the blame of a part is a dozen milliseconds
    of small tensor operations, and a check samples hundreds of parts)."""
    if contract.output_order == routed.contract.output_order and bool(_same_answer(var, routed.base[i]).all()):
        return routed.blame[i] & ~mask
    return _broken(routed.parts[i], contract, mask, var)


def _same_answer(a, b) -> torch.Tensor:
    """bool [B]: the two expected answers are the same, ids and weights bit for bit (NaN equal to NaN)."""
    ids = (a.ids == b.ids).all(1)
    wa, wb = a.weights, b.weights
    w = ((wa == wb) | (torch.isnan(wa) & torch.isnan(wb))).all(1)
    return ids & w


@dataclass
class _Scored:
    variant: object
    explained: int
    matched: int
    explained_mask: torch.Tensor  # bool over the sampled rows
    answers: list  # the variant's expected answer per part


def _declared_mask(declared) -> torch.Tensor:
    """The clauses a declaration excuses on every row. Not a bounded one (``tolerance.BOUNDED_CLAUSES``): the verdict
    excuses it only within its bound, and a sampled row is one it did not excuse; masking the clause whole let any
    variant that changes the row "explain" it (aiter's ``w * (rsf / sum)`` overflowing to inf was "explained" by
    ``sum + 1e-20`` on 100 % of the rows). Nor an undeclarable one (validity)."""
    from . import attribution as A
    from .tolerance import BOUNDED_CLAUSES
    from .verdicts import UNDECLARABLE

    excused = set(declared) - set(BOUNDED_CLAUSES) - set(UNDECLARABLE)
    return torch.tensor([name in excused for name in A.CLAUSE_ORDER], dtype=torch.bool)


def diagnose(sample: DiagnosisSample, contract, *, declared=(), command: str = "", device: str | None = None,
             own: tuple[str, dict] | None = None) -> list[dict]:
    """The variants that explain the sampled rows, best first, the best combination, and a better built-in contract;
    [] without a sample. ``declared``: the candidate's declared clauses (left out); ``command``: the check's command;
    ``device``: where the candidate ran (a variant tied to a GPU back end is offered only there; None: anywhere);
    ``own``: the candidate's own contract and its declared deviations there, ``(name, {clause: why})``: when it is
    another contract, its arithmetic is scored as one combination (``_own_arithmetic``)."""
    parts = sample.selected()
    total = sum(p.ids.shape[0] for p in parts)
    if not total:
        return []
    c = oracle.get_contract(contract)
    mask = _declared_mask(set(declared))
    base = [expected_for(p.case, c) for p in parts]
    routed = _Routed(parts, c, base, [_broken(p, c, _declared_mask(()), exp) for p, exp in zip(parts, base)])
    before = [raw & ~mask for raw in routed.blame]
    dtypes = {p.case.scores.dtype for p in parts}
    dtype = torch.bfloat16 if torch.bfloat16 in dtypes else next(iter(dtypes))
    scored: list[_Scored] = []
    for v in _offered(c, dtype, device):
        try:
            s = _score_variant(routed, v, mask, before)
        except (ValueError, RuntimeError):  # a variant the sample's shapes cannot take
            continue
        if s.explained:
            scored.append(s)
    scored.sort(key=lambda s: (-s.explained, -s.matched))
    out = [_variant_entry(s, scored, parts, base, total) for s in scored]
    best = _combine(routed, [s.variant for s in scored], mask, total, first={id(s.variant): s.matched for s in scored})
    if best is not None:
        chosen, matched = best
        labels = " and ".join(_label(v, parts, base) for v in chosen)
        out.insert(0, {"kind": "combination", "fields": {v.field: _plain(v.value) for v in chosen}, "matched_rows": matched,
                       "sampled_rows": total,
                       "text": f"matches {c.name} with {labels} on {_pct(matched, total)} of the mismatched rows "
                               f"({matched:,} of {total:,} sampled across {_groups(sample.buckets_selected())})"})  # fmt: skip
    trainer = _own_arithmetic(routed, own, mask, total, sample.buckets_selected()) if own is not None else None
    if trainer is not None and trainer["matched_rows"] > (best[1] if best else 0):  # the nearest contract the rows meet
        out.insert(0, trainer)
    better = _better_builtin(routed, total, max(best[1] if best else 0, trainer["matched_rows"] if trainer else 0), command)
    if better is not None:  # after the combination (what the router is), before the single variants
        out.insert(1 if out and out[0]["kind"] == "combination" else 0, better)
    return out


# The fields that say what a router computes (not its shape, call options or tolerances): a candidate's own contract
# differs from the checked one in some of these, and that set of changes is its arithmetic as contract data
ARITHMETIC_FIELDS = ("scoring", "softcap", "sigmoid_formula", "score_precision", "weight_precision", "bias", "group_score",
                     "group_mask", "group_tie_rule", "tie_rule", "nan_rule", "floor", "renormalize", "renormalize_when",
                     "renorm_eps", "renorm_p", "sum_order", "scaling", "output_order", "weight_scale")  # fmt: skip


def _own_arithmetic(routed: _Routed, own: tuple[str, dict], mask: torch.Tensor, total: int, groups: int) -> dict | None:
    """The checked contract with every arithmetic field of the candidate's own contract (a Megatron router's
    ``mcore-sigmoid``: scores and weights in the logits' dtype, renormalized always, the group score the top k/kept
    sum), scored as one combination, as a check under the own contract scores it: a row counts when it breaks no
    undeclared clause there, the candidate's declarations under its own contract excusing theirs per row (a bounded
    one only within its bound, as the verdict excuses it: ``_own_declared``), never a clause declared under neither.
    More fields than the greedy combination takes (Megatron's sigmoid router differs from kimi-k2 in three, from
    deepseek-v3's grouped shape in four), and the rows only torch.topk's own tie and NaN order keep apart (which
    Megatron's candidates declare: no field can say it) are named as such. None when the own contract is the checked
    one, differs in no arithmetic field, or the fields do not combine."""
    name, deviations = own
    try:
        o = oracle.get_contract(name)
    except (KeyError, ValueError):
        return None
    c = routed.contract
    fields = {f: getattr(o, f) for f in ARITHMETIC_FIELDS if not _same_value(getattr(o, f), getattr(c, f))
              and (c.is_grouped or not f.startswith("group_"))}  # an ungrouped contract has no group score to change
    if o.name == c.name or not fields:
        return None
    try:
        trial = c.replace(name=c.name, **fields)
    except (ValueError, TypeError):
        return None
    matched, by_fields, used = 0, 0, set()
    for i, part in enumerate(routed.parts):
        try:
            exp = expected_for(part.case, trial)
            broken = _broken_under(routed, i, trial, mask, exp)
        except (ValueError, RuntimeError):
            return None
        clean = ~broken.any(1)
        by_fields += int(clean.sum())
        ok = clean
        if deviations and not bool(clean.all()):
            excused = _own_declared(part, exp, trial, deviations, broken)
            ok = ~(broken & ~excused).any(1)
            for clause in (broken & excused)[ok & ~clean].any(0).nonzero().flatten().tolist():
                used.add(_clause_name(clause))
        matched += int(ok.sum())
    if not matched:
        return None
    changes = ", ".join(f"{f} {_plain_show(v)}" for f, v in fields.items())
    text = f"matches {c.name} with the trainer's arithmetic of {o.name} ({changes})"
    if used:
        text += f" and the clauses the candidate declares under {o.name} ({', '.join(sorted(used))})"
    text += f" on {_pct(matched, total)} of the mismatched rows ({matched:,} of {total:,} sampled across {_groups(groups)}"
    text += f"; {by_fields:,} by the arithmetic alone)" if used else ")"
    return {"kind": "combination", "contract": o.name, "fields": {f: _plain(v) for f, v in fields.items()},
            "declared": sorted(used), "matched_rows": matched, "matched_by_fields": by_fields, "sampled_rows": total,
            "text": text}  # fmt: skip


def _same_value(a, b) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and a != a and b != b)


def _plain_show(value) -> str:
    return "-inf" if isinstance(value, float) and value == -float("inf") else str(value)


def _clause_name(index: int) -> str:
    from . import attribution as A

    return A.CLAUSE_ORDER[index]


def _own_declared(part: _Part, exp, contract, deviations: dict, broken: torch.Tensor) -> torch.Tensor:
    """bool [B, len(CLAUSE_ORDER)]: what the candidate's declarations (``deviations``, under its own contract) excuse on
    each sampled row routed under ``contract``, as the verdict excuses them (``verdicts._declared_per_row``): a clause
    declared without a bound on every row, a bounded one only where the row lies within its bound; never validity.
    ``broken``: what each row breaks there; the bound is measured only on rows that a bounded declaration could still
    excuse whole (the attribution of a row is the costly part)."""
    from . import attribution as A
    from .tolerance import BOUNDED_CLAUSES, declared_bound
    from .verdicts import UNDECLARABLE, _declared_per_row, read_answer_for_blame

    rows = part.case.spec.rows
    declared = torch.tensor([n in deviations and n not in UNDECLARABLE for n in A.CLAUSE_ORDER], dtype=torch.bool)
    bounded = torch.tensor([n in BOUNDED_CLAUSES for n in A.CLAUSE_ORDER], dtype=torch.bool) & declared
    out = (declared & ~bounded).unsqueeze(0).repeat(rows, 1)
    # rows where a bounded declared clause is broken and every other broken clause is declared: only these can turn
    need = (broken & bounded).any(1) & ~(broken & ~declared).any(1)
    if not bool(need.any()):
        return out
    read = read_answer_for_blame(part.case, exp, (part.weights, part.ids), contract)
    at = need.nonzero().squeeze(1)
    blame = read.attribute(part.case, at)
    bounds = {clause: declared_bound(deviations, clause) for clause in BOUNDED_CLAUSES}
    within = _declared_per_row(declared, blame, read.w_act.index_select(0, at), bounds)
    out[at] = within if within.dim() == 2 else within.unsqueeze(0).expand(at.numel(), -1)
    return out



def _offered(c, dtype, device: str | None = None) -> list:
    """The variants that exist for this contract's scoring and the candidate's device: aiter's lane order (the traversal
    of a GPU's wave64 lanes) only under a sigmoid contract, and never to a router that ran on the CPU."""
    on_cpu = device is not None and str(device).split(":")[0] == "cpu"
    return [v for v in oracle.variants(c, logits_dtype=dtype)
            if not (v.field == "tie_rule" and v.value == "aiter" and (c.scoring != "sigmoid" or on_cpu))]  # fmt: skip


def _score_variant(routed: _Routed, v, mask: torch.Tensor, before: list) -> _Scored:
    explained_rows, answers, explained, matched = [], [], 0, 0
    for i, (part, exp, was) in enumerate(zip(routed.parts, routed.base, before)):
        var = expected_for(part.case, v.contract)
        answers.append(var)
        broken = _broken_under(routed, i, v.contract, mask, var)
        # the primary clause gone and nothing new broken: the blame did not merely move to another clause
        fixed = ~broken.gather(1, part.primary.unsqueeze(1)).squeeze(1) & ~(broken & ~was).any(1)
        if v.field not in COMPARISON_ONLY:  # a variant that gives this row the contract's own answer explains nothing
            fixed &= ~_same_answer(var, exp)
        explained_rows.append(fixed)
        explained += int(fixed.sum())
        matched += int((~broken.any(1)).sum())
    return _Scored(v, explained, matched, torch.cat(explained_rows), answers)


def _label(v, parts: list[_Part], base: list, answers: list | None = None) -> str:
    """The variant's words; a softmax over the k chosen logits that differs from the contract only on rows called with
    renormalize=False is what renormalizing against the flag gives: said so."""
    if v.field == "scoring" and v.value == "softmax_of_topk":
        flags = set()
        for i, (part, exp) in enumerate(zip(parts, base)):
            var = answers[i] if answers is not None else expected_for(part.case, v.contract)
            differs = ~_same_answer(var, exp)
            if bool(differs.any()):
                flags.add(bool(part.case.renormalize))
        if flags == {False}:
            return "the weights renormalized over the k chosen although renormalize=False (there the same as a softmax over the k chosen logits)"
    return v.label


def _variant_entry(s: _Scored, scored: list[_Scored], parts: list[_Part], base: list, total: int) -> dict:
    v = s.variant
    label = _label(v, parts, base, s.answers)
    twins = [o.variant.label for o in scored if o is not s and _indistinguishable(s, o)]
    text = f"with {label}: explains {_pct(s.explained, total)} of the mismatched rows ({s.explained:,} of {total:,} sampled)"
    if twins:
        text += f"; the rows seen cannot tell it apart from: {'; '.join(twins)}"
    return {"kind": "variant", "field": v.field, "value": _plain(v.value), "label": label, "explained_rows": s.explained,
            "matched_rows": s.matched, "sampled_rows": total, "indistinguishable_from": twins, "text": text}  # fmt: skip


def _indistinguishable(a: _Scored, b: _Scored) -> bool:
    """The same rows explained and the same answer on every sampled row: nothing seen tells the two apart."""
    if a.explained != b.explained or not torch.equal(a.explained_mask, b.explained_mask):
        return False
    if a.variant.field in COMPARISON_ONLY or b.variant.field in COMPARISON_ONLY:
        return False
    return all(bool(_same_answer(x, y).all()) for x, y in zip(a.answers, b.answers))


def _matched(routed: _Routed, contract, mask: torch.Tensor) -> int:
    """The sampled rows that break no undeclared clause under ``contract``."""
    total = 0
    for i, part in enumerate(routed.parts):
        broken = _broken_under(routed, i, contract, mask, expected_for(part.case, contract))
        total += int((~broken.any(1)).sum())
    return total


def _combine(routed: _Routed, ranked: list, mask: torch.Tensor, total: int, first: dict | None = None) -> tuple[list, int] | None:
    """Greedily add variants while the rows matching entirely grow (fields already set are not changed twice);
    ``first``: each variant's rows matched alone, already counted (the first round routes nothing again)."""
    c = routed.contract
    chosen, matched, contract = [], 0, c
    for round_ in range(MAX_COMBINED):
        best = None
        for v in ranked:
            if any(v.field == w.field for w in chosen):
                continue
            try:
                trial = contract.replace(name=c.name, **{v.field: v.value})
                m = first[id(v)] if round_ == 0 and first is not None and id(v) in first else _matched(routed, trial, mask)
            except (ValueError, RuntimeError):
                continue
            if m > matched and (best is None or m > best[1]):
                best = (v, m, trial)
        if best is None:
            break
        chosen.append(best[0])
        matched, contract = best[1], best[2]
        if matched == total:
            break
    return (chosen, matched) if chosen else None


def _better_builtin(routed: _Routed, total: int, best_matched: int, command: str) -> dict | None:
    """Another built-in contract of the same shape that the sampled rows meet (nearly) whole, better than any variant."""
    c, nothing = routed.contract, _declared_mask(())
    found = None
    for name, other in oracle.BUILTIN_CONTRACTS.items():
        if name == c.name or (other.experts, other.topk, other.n_group, other.scoring) != (c.experts, c.topk, c.n_group, c.scoring):
            continue
        try:
            m = _matched(routed, other, nothing)
        except (ValueError, RuntimeError):
            continue
        if m >= BETTER_CONTRACT_SHARE * total and m >= best_matched and (found is None or m > found[1]):
            found = (name, m)
    if found is None:
        return None
    name, m = found
    run = _with_contract(command, name)
    text = (f"matches the built-in contract {name} on {_pct(m, total)} of the mismatched rows ({m:,} of {total:,} sampled): "
            f"if that is the contract it implements, check it under {name}" + (f": {run}" if run else f" (--contract {name})"))  # fmt: skip
    return {"kind": "contract", "contract": name, "matched_rows": m, "sampled_rows": total, "command": run, "text": text}


def _with_contract(command: str, name: str) -> str:
    """``command`` with ``--contract name`` (replacing any), without its ``--out`` and ``--force``; "" without one."""
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    if not words:
        return ""
    return shlex.join(without_options(words, ("--contract", "--out"), ("--force",)) + ["--contract", name])


def _groups(n: int) -> str:
    return f"{n:,} group{'' if n == 1 else 's'} of family and call options"


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.0f}%" if total else "0%"


def _plain(value):
    return value if isinstance(value, (str, int, bool)) or value is None else float(value)
