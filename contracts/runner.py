"""Run one candidate over planned cases and gather the result.

Data flows one way: case -> candidate and oracle -> comparison -> aggregate.
Counts are accumulated case by case, so memory stays bounded by the largest
case however many rows run; per-cell records are capped (``max_cells``) while
the counts stay exact.
"""

from __future__ import annotations

import shlex
import time
import traceback
from dataclasses import dataclass, field

import torch

import oracle

from .compare import Expected, compare_case, expected_for
from .families import CaseSpec, build_case
from .registry import Candidate

__all__ = ["CheckResult", "check_candidate", "replay_command"]

SCHEMA_VERSION = 1
DETAILS_PER_CLAUSE = 5


@dataclass
class CheckResult:
    summary: dict
    cells: list[dict] = field(default_factory=list)
    details: list[dict] = field(default_factory=list)  # row-level examples for the report


def replay_command(candidate: str, contract: str, device: str, spec: CaseSpec, row: int | None, against: str | None, exact: bool) -> str:
    parts = ["python", "-m", "contracts.check", "--candidate", candidate, "--contract", contract, "--device", device]
    if against:
        parts += ["--against", against]
    if exact:
        parts.append("--exact")
    if (spec.experts, spec.topk) != (896, 16):
        parts += ["--experts", str(spec.experts), "--topk", str(spec.topk)]
    parts += ["--replay", spec.replay_id]
    if row is not None:
        parts += ["--row", str(row)]
    return shlex.join(parts)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.view(as_int), b.view(as_int)))


def _call(route, case):
    return route(case.scores, case.bias, case.topk, case.renormalize, case.routed_scaling_factor)


def _empty_family():
    return {"rows": 0, "rows_skipped": 0, "mismatched_rows": 0, "near_tie_rows": 0, "expected_rows": 0, "clauses": {}}


def check_candidate(
    candidate: Candidate,
    specs: list[CaseSpec],
    *,
    contract: str,
    device: str,
    against: Candidate | None = None,
    exact: bool = False,
    seed: int = 0,
    command: str = "",
    progress=None,
    max_cells: int = 100_000,
) -> CheckResult:
    c = oracle.get_contract(contract)
    deviations = {} if against is not None else candidate.deviations(contract)
    route = candidate.route_under(contract)
    other = against.route_under(contract) if against is not None else None
    fam: dict[str, dict] = {}
    clauses = dict.fromkeys(c.clause_names, 0)
    expected_seen = dict.fromkeys(deviations, 0)
    verdicts: dict[str, int] = {}
    cells: list[dict] = []
    details: dict[str, list] = {}
    inexact_rows, max_ulp = 0, 0.0
    error = None
    start = time.perf_counter()

    for spec in specs:
        f = fam.setdefault(spec.family, _empty_family())
        case = build_case(spec, device)
        shape = dict(rows=spec.rows, experts=spec.experts, topk=spec.topk, dtype=case.scores.dtype, bias_dtype=case.bias.dtype)
        skip = not candidate.covered(**shape) or (against is not None and not against.covered(**shape))
        if skip:
            f["rows_skipped"] += spec.rows
            if progress:
                progress.update(spec.rows)
            continue
        before = (case.scores.clone(), case.bias.clone())
        try:
            actual = _call(route, case)
            if device.startswith("cuda"):
                torch.cuda.synchronize()
        except Exception as exc:  # the candidate's failure is a finding, not a harness crash
            actual = f"raised {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
            if error is None:
                error = {"case": spec.replay_id, "traceback": traceback.format_exc(limit=3)[-2000:]}
        changed = not (_same_bits(case.scores, before[0]) and _same_bits(case.bias, before[1]))
        if other is not None:
            ref = expected_for(case, c)
            w, i = _call(other, case)
            exp = Expected(w, i, ref.sig, ref.ranking, ref.keys)
        else:
            exp = expected_for(case, c)
        if isinstance(actual, str):
            actual_for_compare = (actual,)  # fails validity with the message below
        else:
            actual_for_compare = actual
        outcome = compare_case(case, exp, actual_for_compare, c, deviations=deviations, inputs_changed=changed, exact=exact)
        if isinstance(actual, str):
            for d in outcome.rows_detail + outcome.cells:
                d["reason"] = actual

        f["rows"] += spec.rows
        for verdict, n in outcome.verdict_counts.items():
            verdicts[verdict] = verdicts.get(verdict, 0) + n
        f["mismatched_rows"] += outcome.verdict_counts.get("mismatch", 0)
        f["near_tie_rows"] += outcome.verdict_counts.get("near_tie", 0)
        f["expected_rows"] += outcome.verdict_counts.get("expected", 0)
        for clause, n in outcome.clause_rows.items():
            clauses[clause] = clauses.get(clause, 0) + n
            f["clauses"][clause] = f["clauses"].get(clause, 0) + n
        for clause, n in outcome.expected_rows.items():
            expected_seen[clause] = expected_seen.get(clause, 0) + n
        inexact_rows += outcome.inexact_weight_rows
        max_ulp = max(max_ulp, outcome.max_weight_ulp)

        meta = {"family": spec.family, "case_seed": spec.case_seed, "case": spec.replay_id}
        for cell in outcome.cells:
            if len(cells) >= max_cells:
                break
            cells.append({**meta, **cell})
        for d in outcome.rows_detail:
            key = d["clause"] if d["verdict"] != "near_tie" else "near_tie"
            bucket = details.setdefault(key, [])
            if len(bucket) < DETAILS_PER_CLAUSE or (d.get("straddles_cutoff") and not all(x.get("straddles_cutoff") for x in bucket)):
                d = {
                    **meta,
                    **d,
                    "renormalize": case.renormalize,
                    "routed_scaling_factor": case.routed_scaling_factor,
                    "replay": replay_command(candidate.name, contract, device, spec, d["row"], against.name if against else None, exact),
                }
                bucket.append(d)
                bucket.sort(key=lambda x: not x.get("straddles_cutoff"))
                del bucket[DETAILS_PER_CLAUSE:]
        if progress:
            progress.update(spec.rows)

    elapsed = time.perf_counter() - start
    rows_checked = sum(v["rows"] for v in fam.values())
    mismatched = verdicts.get("mismatch", 0)
    expected_summary = {
        clause: {"reason": why, "rows": expected_seen.get(clause, 0), "observed": expected_seen.get(clause, 0) > 0}
        for clause, why in deviations.items()
    }
    if "weight_accuracy" in deviations and inexact_rows:
        # Within tolerance yet not bit-equal: the ULP-level deviation shows here.
        expected_summary["weight_accuracy"]["inexact_rows"] = inexact_rows
        expected_summary["weight_accuracy"]["observed"] = True
    status = "fail" if mismatched else ("error" if error and not rows_checked else "pass")
    summary = {
        "schema_version": SCHEMA_VERSION,
        "candidate": candidate.name,
        "contract": c.name,
        "against": against.name if against else None,
        "device": device,
        "status": status,
        "rows_checked": rows_checked,
        "rows_skipped": sum(v["rows_skipped"] for v in fam.values()),
        "mismatched_rows": mismatched,
        "near_tie_rows": verdicts.get("near_tie", 0),
        "expected_deviation_rows": verdicts.get("expected", 0),
        "exact_rows": verdicts.get("exact", 0),
        "within_tolerance_rows": verdicts.get("within_tolerance", 0),
        "max_weight_ulp": max_ulp,
        "clauses": clauses,
        "families": fam,
        "expected_deviations": expected_summary,
        "bit_exact": exact,
        "error": error,
        "environment": None,  # filled by the caller, who knows the process
        "seed": seed,
        "command": command,
        "duration_s": round(elapsed, 3),
        "rows_per_s": round(rows_checked / elapsed, 1) if elapsed > 0 else None,
        "cells_recorded": len(cells),
    }
    flat_details = [d for key in sorted(details) for d in details[key]]
    return CheckResult(summary, cells, flat_details)
