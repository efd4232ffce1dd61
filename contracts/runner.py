"""Run one candidate over planned cases and gather the result.

Data flows one way: case -> candidate and oracle -> comparison -> aggregate.
Counts are accumulated case by case, so memory stays bounded by the largest
case however many rows run: the plan is an iterator (``iter_plan``), per-cell
records are capped (``max_cells``), row-level examples are capped per clause,
and only the counts grow, exactly.

A candidate runs in this process or, given a ``contracts.isolation.Worker``,
in a worker process; either way a crash, hang, out-of-memory or CUDA error
ends its run with status ``error``, keeping every row checked before it. A
``should_stop`` callable that turns true (the command line's SIGINT/SIGTERM
handler) ends the run after the current case with status ``interrupted``.
"""

from __future__ import annotations

import shlex
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

import oracle

from .compare import Expected, agrees, compare_case, expected_for
from .families import CaseSpec, build_case, iter_plan, planned_rows
from .isolation import CallOutcome, CaseRunner, Interrupted, Worker, WorkerFailure
from .registry import Candidate

__all__ = ["CheckResult", "check_candidate", "iter_plan", "planned_rows", "replay_command"]

SCHEMA_VERSION = 1
DETAILS_PER_CLAUSE = 5
DETERMINISM_EXAMPLES = 5


@dataclass
class CheckResult:
    summary: dict
    cells: list[dict] = field(default_factory=list)
    details: list[dict] = field(default_factory=list)  # row-level examples for the report


def replay_command(
    candidate: str, contract: str, device: str, spec: CaseSpec, row: int | None, against: str | None, exact: bool, repeat: int = 1
) -> str:
    parts = ["python", "-m", "contracts.check", "--candidate", candidate, "--contract", contract, "--device", device]
    if against:
        parts += ["--against", against]
    if exact:
        parts.append("--exact")
    if (spec.experts, spec.topk) != (896, 16):
        parts += ["--experts", str(spec.experts), "--topk", str(spec.topk)]
    if repeat > 1:
        parts += ["--repeat", str(repeat)]
    parts += ["--replay", spec.replay_id]
    if row is not None:
        parts += ["--row", str(row)]
    return shlex.join(parts)


def _empty_family():
    return {"rows": 0, "rows_skipped": 0, "mismatched_rows": 0, "near_tie_rows": 0, "expected_rows": 0, "clauses": {}}


def _error_record(kind: str, spec: CaseSpec, message: str, traceback_text: str, replay: str) -> dict:
    # ``case`` and ``traceback`` are what report.md shows; the rest is for machines.
    return {"kind": kind, "case": spec.replay_id, "message": message, "traceback": traceback_text or message, "replay": replay}


def check_candidate(
    candidate: Candidate,
    specs: Iterable[CaseSpec],
    *,
    contract: str,
    device: str,
    against: Candidate | None = None,
    exact: bool = False,
    seed: int = 0,
    command: str = "",
    progress=None,
    max_cells: int = 100_000,
    repeat: int = 1,
    worker: Worker | None = None,
    should_stop: Callable[[], object] | None = None,
) -> CheckResult:
    """Check ``candidate`` on ``specs`` (any iterable; consumed once).

    ``worker``: a loaded ``isolation.Worker`` that runs the candidate (and
    ``against``) in its own process; without it they run here. ``repeat``:
    calls per case (differences are a ``determinism`` finding).
    """
    c = oracle.get_contract(contract)
    deviations = {} if against is not None else candidate.deviations(contract)
    if worker is None:
        case_runner = CaseRunner(
            candidate.route_under(contract),
            other=against.route_under(contract) if against is not None else None,
            other_name=against.name if against is not None else "",
            repeat=repeat,
            graph=device.startswith("cuda") and repeat > 1,
        )
    fam: dict[str, dict] = {}
    clauses = dict.fromkeys(c.clause_names, 0)
    expected_seen = dict.fromkeys(deviations, 0)
    verdicts: dict[str, int] = {}
    cells: list[dict] = []
    details: dict[str, list] = {}
    inexact_rows, max_ulp = 0, 0.0
    error = None  # the first failure: a Python exception (a finding) or what ended the run
    fatal = False
    interrupted = None
    nondeterminism_declared = deviations.get("determinism")
    sides = {"candidate": 0, "against": 0, "neither": 0}  # --against: rows that differ, by the side the oracle agrees with
    determinism = {
        "repeat": repeat,
        "graph_replay": device.startswith("cuda") and repeat > 1,
        "rows_differing": 0,
        "cases": 0,
        "examples": [],
        "declared": nondeterminism_declared,
        "notes": [],
    }
    against_name = against.name if against else None

    def replay(spec, row=None):
        return replay_command(candidate.name, contract, device, spec, row, against_name, exact, repeat)

    start = time.perf_counter()
    specs_iter = iter(specs)
    try:  # a KeyboardInterrupt outside a call (no signal handler installed) still keeps what ran
        while True:
            reason = should_stop() if should_stop else None
            if reason:
                interrupted = str(reason)
                break
            try:
                spec = next(specs_iter)
            except StopIteration:
                break
            try:
                f = fam.setdefault(spec.family, _empty_family())
                case = build_case(spec, device)
                if worker is not None:
                    call = worker.run(spec)
                else:
                    shape = dict(rows=spec.rows, experts=spec.experts, topk=spec.topk, dtype=case.scores.dtype, bias_dtype=case.bias.dtype)
                    try:
                        covered = candidate.covered(**shape) and (against is None or against.covered(**shape))
                    except Exception as exc:  # noqa: BLE001 -- a gate that raises ends the candidate's run
                        error = _error_record("gate_failed", spec, f"covered() raised {type(exc).__name__}: {exc}", "", replay(spec))
                        fatal = True
                        break
                    call = case_runner.run(case) if covered else None
            except WorkerFailure as failure:
                text = failure.message + (f"\n\nworker stderr (tail):\n{failure.stderr_tail}" if failure.stderr_tail else "")
                error = _error_record(failure.kind, spec, failure.message, text, replay(spec))
                error["stderr_tail"] = failure.stderr_tail
                fatal = True
                break
            except (Interrupted, KeyboardInterrupt) as exc:
                interrupted = (should_stop() if should_stop else None) or str(exc) or "KeyboardInterrupt"
                break
            if call is None:
                f["rows_skipped"] += spec.rows
                if progress:
                    progress.update(spec.rows)
                continue
            if call.fatal:
                error = _error_record(call.fatal["kind"], spec, call.fatal["message"], call.fatal["traceback"], replay(spec))
                fatal = True
                break
            determinism["notes"].extend(n for n in call.notes if n not in determinism["notes"])

            actual = call.actual
            if call.traceback is not None and error is None:  # it raised: keep the first traceback
                error = _error_record("exception", spec, actual, call.traceback or actual, replay(spec))
            exp = expected_for(case, c)
            oracle_side = None
            if call.other is not None:
                w, i = call.other
                # Which side the oracle agrees with, per row: tells a reader which of two
                # disagreeing routers breaks the contract (the clause names the difference).
                exp_oracle = exp
                exp = Expected(w, i, exp.sig, exp.ranking, exp.keys)
                oracle_side = (agrees(exp_oracle, actual, c), agrees(exp_oracle, call.other, c), agrees(exp, actual, c))
            actual_for_compare = (actual,) if isinstance(actual, str) else actual  # a message fails validity
            outcome = compare_case(case, exp, actual_for_compare, c, deviations=deviations, inputs_changed=call.changed, exact=exact)
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
            if oracle_side is not None and None not in oracle_side:
                _count_sides(sides, oracle_side, outcome)
            for cell in outcome.cells:
                if len(cells) >= max_cells:
                    break
                cells.append({**meta, **cell})
            for d in outcome.rows_detail:
                key = d["clause"] if d["verdict"] != "near_tie" else "near_tie"
                bucket = details.setdefault(key, [])
                if len(bucket) < DETAILS_PER_CLAUSE or (d.get("straddles_cutoff") and not all(x.get("straddles_cutoff") for x in bucket)):
                    d = {**meta, **d, "renormalize": case.renormalize, "routed_scaling_factor": case.routed_scaling_factor, "replay": replay(spec, d["row"])}
                    bucket.append(d)
                    bucket.sort(key=lambda x: not x.get("straddles_cutoff"))
                    del bucket[DETAILS_PER_CLAUSE:]
            if call.differing_rows:
                _record_nondeterminism(determinism, details, call, spec, meta, case, replay)
            if progress:
                progress.update(spec.rows)
    except KeyboardInterrupt:
        interrupted = interrupted or (should_stop() if should_stop else None) or "KeyboardInterrupt"

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
    if nondeterminism_declared:
        expected_summary["determinism"]["rows"] = determinism["rows_differing"]
        expected_summary["determinism"]["observed"] = determinism["rows_differing"] > 0
    nondeterministic = determinism["rows_differing"] > 0 and not nondeterminism_declared
    if interrupted:
        status = "interrupted"
    elif fatal:
        status = "error"
    elif mismatched or nondeterministic:
        status = "fail"
    else:
        status = "error" if error and not rows_checked else "pass"
    summary = {
        "schema_version": SCHEMA_VERSION,
        "candidate": candidate.name,
        "contract": c.name,
        "against": against_name,
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
        "determinism": determinism,
        "interrupted": interrupted,
        "against_sides": sides if against is not None else None,
        "isolated": worker is not None,
        "environment": None,  # filled by the caller, who knows the process
        "seed": seed,
        "command": command,
        "duration_s": round(elapsed, 3),
        "rows_per_s": round(rows_checked / elapsed, 1) if elapsed > 0 else None,
        "cells_recorded": len(cells),
    }
    flat_details = [d for key in sorted(details) for d in details[key]]
    return CheckResult(summary, cells, flat_details)


def _count_sides(sides: dict, oracle_side, outcome) -> None:
    """Where the two candidates differ, count the rows by the side the oracle agrees with; label the examples."""
    candidate_ok, against_ok, pair_ok = (t.tolist() for t in oracle_side)
    label = {}
    for row, (a_ok, b_ok, same) in enumerate(zip(candidate_ok, against_ok, pair_ok)):
        if not same:
            label[row] = "candidate" if a_ok else ("against" if b_ok else "neither")
            sides[label[row]] += 1
    for d in outcome.rows_detail:
        d["oracle_agrees_with"] = label.get(d["row"], "both")


def _record_nondeterminism(determinism: dict, details: dict, call: CallOutcome, spec: CaseSpec, meta: dict, case, replay) -> None:
    determinism["rows_differing"] += call.differing_rows
    determinism["cases"] += 1
    if len(determinism["examples"]) < DETERMINISM_EXAMPLES:
        determinism["examples"].append(
            {**meta, "calls": call.differing_calls, "rows_differing": call.differing_rows, "rows": call.differing_sample, "replay": replay(spec)}
        )
    bucket = details.setdefault("determinism", [])
    if len(bucket) < DETAILS_PER_CLAUSE and call.difference:
        d = call.difference
        bucket.append(
            {
                **meta,
                "row": d["row"],
                "clause": "determinism",
                "verdict": "expected" if determinism["declared"] else "mismatch",
                "reason": f"{d['call']} differs from call 1 on {call.differing_rows} of {spec.rows} rows"
                + (f" ({d['message']})" if d.get("message") else ""),
                # "expected" is the first call's answer, "actual" the differing call's
                "expected_ids": d["first_ids"],
                "actual_ids": d["ids"],
                "expected_weights": d["first_weights"],
                "actual_weights": d["weights"],
                "renormalize": case.renormalize,
                "routed_scaling_factor": case.routed_scaling_factor,
                "replay": replay(spec, d["row"]),
            }
        )
