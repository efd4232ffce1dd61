"""Diagnosis: the nearest contract a failing router does meet.

A failing check keeps a sample of its unexpectedly mismatched rows (inputs,
the candidate's answer, the primary clause of each). The diagnosis routes
that sample under every single-field variant of the contract
(``oracle.variants``: scores in bf16, mask 0.0 for -inf, lowest-index ties,
NaN first, no renormalize guard, any output order, bias in the weights...)
and reports which variants explain the rows: a variant *explains* a row when
the row's primary clause is no longer broken under it. Then it combines the
best variants greedily (up to three fields) into the contract the router
matches on the most rows ("matches deepseek-v3 with the scores computed in
bf16 and the output in any order on 100% of mismatched rows"). Real routers
differ from a contract in a few fields at once; naming them is what a user
needs, not "selection".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

import oracle

from .expected import expected_for

__all__ = ["DiagnosisSample", "diagnose"]

MAX_SAMPLE_ROWS = 2048
MAX_COMBINED = 3


@dataclass
class _Part:
    case: object  # a Case of only the sampled rows, on the CPU
    weights: torch.Tensor
    ids: torch.Tensor
    primary: torch.Tensor  # int64 [B] primary clause index (CLAUSE_ORDER) under the contract


@dataclass
class DiagnosisSample:
    """Up to ``MAX_SAMPLE_ROWS`` mismatched rows, gathered case by case while a check runs."""

    parts: list[_Part] = field(default_factory=list)
    rows: int = 0

    @property
    def full(self) -> bool:
        return self.rows >= MAX_SAMPLE_ROWS

    def add(self, case, rows: torch.Tensor, weights: torch.Tensor, ids: torch.Tensor, primary: torch.Tensor) -> None:
        from ..cases.build import Case

        room = MAX_SAMPLE_ROWS - self.rows
        if room <= 0 or rows.numel() == 0:
            return
        rows, primary = rows[:room], primary[:room]
        spec = case.spec.__class__(**{**case.spec.__dict__, "rows": int(rows.numel())})
        sub = Case(spec, case.scores.index_select(0, rows).cpu(), None if case.bias is None else case.bias.cpu(),
                   case.renormalize, case.routed_scaling_factor)  # fmt: skip
        self.parts.append(_Part(sub, weights.index_select(0, rows).cpu(), ids.index_select(0, rows).cpu(), primary.cpu()))
        self.rows += int(rows.numel())


def _still_broken(part: _Part, contract) -> torch.Tensor:
    """bool [B, len(CLAUSE_ORDER)]: the clauses each sampled row breaks under ``contract``."""
    from .verdicts import row_blame

    exp = expected_for(part.case, contract)
    return row_blame(part.case, exp, (part.weights, part.ids), contract)


def _score(sample: DiagnosisSample, contract) -> tuple[int, int]:
    """(rows whose primary clause is gone, rows that match entirely) under ``contract``."""
    explained = matched = 0
    for part in sample.parts:
        broken = _still_broken(part, contract)
        explained += int((~broken.gather(1, part.primary.unsqueeze(1)).squeeze(1)).sum())
        matched += int((~broken.any(1)).sum())
    return explained, matched


def diagnose(sample: DiagnosisSample, contract) -> list[dict]:
    """The variants that explain the sampled rows, best first, and the best combination; [] without a sample."""
    if not sample.rows:
        return []
    c = oracle.get_contract(contract)
    dtypes = {p.case.scores.dtype for p in sample.parts}
    dtype = torch.bfloat16 if torch.bfloat16 in dtypes else next(iter(dtypes))
    single = []
    for v in oracle.variants(c, logits_dtype=dtype):
        try:
            explained, matched = _score(sample, v.contract)
        except (ValueError, RuntimeError):  # a variant the sample's shapes cannot take
            continue
        if explained:
            single.append((explained, matched, v))
    single.sort(key=lambda t: (-t[0], -t[1]))
    out = [{"kind": "variant", "field": v.field, "value": _plain(v.value), "label": v.label, "explained_rows": e, "matched_rows": m,
            "sampled_rows": sample.rows,
            "text": f"with {v.label}: explains {_pct(e, sample.rows)} of the mismatched rows ({e:,} of {sample.rows:,} sampled)"}
           for e, m, v in single]  # fmt: skip
    best = _combine(sample, c, [v for _, _, v in single])
    if best is not None:
        chosen, matched = best
        labels = " and ".join(v.label for v in chosen)
        out.insert(0, {"kind": "combination", "fields": {v.field: _plain(v.value) for v in chosen}, "matched_rows": matched,
                       "sampled_rows": sample.rows,
                       "text": f"matches {c.name} with {labels} on {_pct(matched, sample.rows)} of the mismatched rows "
                               f"({matched:,} of {sample.rows:,} sampled)"})  # fmt: skip
    return out


def _combine(sample: DiagnosisSample, c, ranked: list) -> tuple[list, int] | None:
    """Greedily add variants while the rows matching entirely grow (fields already set are not changed twice)."""
    chosen, matched, contract = [], 0, c
    for _ in range(MAX_COMBINED):
        best = None
        for v in ranked:
            if any(v.field == w.field for w in chosen):
                continue
            try:
                trial = contract.replace(name=c.name, **{v.field: v.value})
                _, m = _score(sample, trial)
            except (ValueError, RuntimeError):
                continue
            if m > matched and (best is None or m > best[1]):
                best = (v, m, trial)
        if best is None:
            break
        chosen.append(best[0])
        matched, contract = best[1], best[2]
        if matched == sample.rows:
            break
    return (chosen, matched) if chosen else None


def _pct(n: int, total: int) -> str:
    return f"{100.0 * n / total:.0f}%" if total else "0%"


def _plain(value):
    return value if isinstance(value, (str, int, bool)) or value is None else float(value)

