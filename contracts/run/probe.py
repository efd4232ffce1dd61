"""Recover a candidate's tie priority from its answers alone (``python -m contracts probe``).

A router's tie order is a fact nobody writes down. This probe treats the
candidate as a black box and asks it questions whose only unknown is the
tie order, then checks that what it learned is one consistent total order.

Examples::

    python -m contracts probe --candidate aiter-model
    python -m contracts probe --candidate oracle --contract serial
    python -m contracts probe --candidate torch-native --device cuda --out reports/probe-tn-h200

How a probe asks and verifies: ``contracts.run.tie_probe`` (the expert order) and
``contracts.run.group_probe`` (a grouped contract's group order). This module runs one and writes
``probe.json``, whatever the outcome.

Exit codes: 0 probe done (whatever the rule), 1 the candidate raised or gave
answers that are not a tie order at all (wrong shape, a demoted expert
chosen over a tied one), 2 usage error, 3 candidate unavailable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import oracle

from ..candidates import Candidate
from ..reports._atomic import write_json
from ..reports.environment import environment
from .group_probe import probe_groups
from .tie_probe import DEFAULT_BATCH_SIZES, Asker, ProbeError, ProbeResult, call_options, pick_dtypes, probe

__all__ = ["PROBE_SCHEMA_VERSION", "RULE_TEXT", "ProbeRun", "dependence", "known_orders", "lane_table", "match_rules", "run_probe"]

PROBE_SCHEMA_VERSION = 1
RULE_TEXT = {"aiter": "aiter lane order", "lowest": "lowest index", "highest": "highest index"}


# -- interpretation ---------------------------------------------------------------------


def known_orders(experts: int) -> dict[str, list[int]]:
    return {
        "aiter": oracle.tie_order(experts, "aiter").tolist(),
        "lowest": list(range(experts)),
        "highest": list(range(experts - 1, -1, -1)),
    }


def match_rules(permutation: list[int]) -> tuple[str, dict[str, dict]]:
    """``(rule or 'none', {rule: first disagreement {position, expected, got}})``."""
    matches, disagreements = "none", {}
    for rule, order in known_orders(len(permutation)).items():
        diff = next((i for i, (a, b) in enumerate(zip(order, permutation)) if a != b), None)
        if diff is None:
            matches = rule if matches == "none" else matches
        else:
            disagreements[rule] = {"position": diff, "expected": order[diff], "got": permutation[diff]}
    return matches, disagreements


def lane_table(permutation: list[int]) -> list[int] | None:
    """The 64-entry lane -> traversal rank table of a wave64 order, or None if it is not one.

    A wave64 order groups experts by lane ``(e >> 2) & 63`` and breaks ties
    inside a lane by expert id; lane ranks are the order of first appearance.
    Needs every lane present (E >= 256).
    """
    experts = len(permutation)
    if experts < 256:
        return None
    first_seen: list[int] = []
    for e in permutation:
        lane = (e >> 2) & 63
        if lane not in first_seen:
            first_seen.append(lane)
    rank = [0] * 64
    for r, lane in enumerate(first_seen):
        rank[lane] = r
    implied = sorted(range(experts), key=lambda e: (rank[(e >> 2) & 63], e))
    return rank if implied == permutation else None


def dependence(result: ProbeResult) -> str:
    """One line on what the ties depend on, from the verification counts."""
    if result.consistent:
        return "one consistent total order at every batch size tried"
    checked = {int(b): v for b, v in result.verified.items() if "pools" in v}
    bad = sorted(b for b, v in checked.items() if v["failures"])
    good = sorted(b for b, v in checked.items() if not v["failures"])
    parts = []
    if result.recovery_disagreements:
        parts.append(f"the recovery's own answers were not nested ({result.recovery_disagreements} ordering rows)")
    if bad and good:
        parts.append(f"ties depend on the batch size: disagreements at M={bad}, none at M={good}")
    elif bad:
        parts.append(f"disagreements at every batch size tried (M={bad}): ties depend on other values, row position or chance")
    return "; ".join(parts) or "inconsistent"


# -- a probe run, written to a folder ---------------------------------------------------


@dataclass
class ProbeRun:
    """What ``run_probe`` did: ``status`` done / unavailable / error, the document it wrote, where."""

    status: str
    doc: dict
    path: Path
    result: ProbeResult | None = None

    @property
    def reason(self) -> str:
        return self.doc.get("reason") or self.doc.get("error") or ""


def _gate(candidate: Candidate, *, experts: int, topk: int, rows: int, device: str) -> tuple[tuple | None, str]:
    """``(logits and bias dtypes, "")`` where the candidate runs here and covers the probe's calls of ``rows`` rows
    at E=``experts``, k=``topk``; else ``(None, why)``."""
    ok, why = candidate.available(device)
    if not ok:
        return None, why
    dtypes = pick_dtypes(candidate, experts, topk, rows)
    if dtypes is None:
        at = f" (M={rows})" if rows > 1 else ""
        return None, f"it does not cover E={experts}, k={topk}{at} with bf16/fp32 logits"
    return dtypes, ""


def _written(path: Path, doc: dict, result: ProbeResult | None = None) -> ProbeRun:
    """``doc`` written as ``path`` (probe.json), whatever its status, and the run that says so."""
    write_json(path, doc)
    return ProbeRun(doc["status"], doc, path, result)


def _stopped(path: Path, base: dict, device: str, status: str, **why: str) -> ProbeRun:
    """A probe that did not get to the end: ``unavailable`` with its ``reason``, or ``error`` with the ``error``."""
    return _written(path, {**base, "status": status, **why, "environment": environment(device)})



def _run_group_probe(candidate: Candidate, c, contract: str, path: Path, base: dict, *, experts: int, topk: int, device: str) -> "ProbeRun":
    dtypes, why = _gate(candidate, experts=experts, topk=topk, rows=1, device=device)
    if dtypes is None:
        return _stopped(path, base, device, "unavailable", reason=why)
    asker = Asker(candidate.route_under(contract), experts=experts, topk=topk, device=device, dtype=dtypes[0], bias_dtype=dtypes[1],
                   groups={"num_expert_group": c.n_group, "topk_group": c.topk_group}, bias=c.has_bias, options=call_options(c))  # fmt: skip
    start = time.perf_counter()
    try:
        order, calls = probe_groups(asker, experts=experts, n_group=c.n_group, topk_group=c.topk_group, topk=topk)
    except ProbeError as exc:
        return _stopped(path, base, device, "error", error=str(exc))
    rules = {"lowest": list(range(c.n_group)), "highest": list(range(c.n_group - 1, -1, -1))}
    matches = next((rule for rule, perm in rules.items() if perm == order), "none")
    doc = {
        **base, "status": "done", "contract": c.name, "E": experts, "k": topk, "n_group": c.n_group, "topk_group": c.topk_group,
        "group_permutation": order, "group_matches": matches, "group_rule": c.group_tie_rule, "matches_contract": matches == c.group_tie_rule,
        "calls": calls, "expert_order": "probed on ungrouped contracts only (under groups the kept groups decide which experts can tie)",
        "environment": environment(device), "duration_s": round(time.perf_counter() - start, 3),
    }  # fmt: skip
    return _written(path, doc)


def run_probe(
    candidate: Candidate,
    *,
    out: Path,
    contract: str | None = None,
    experts: int | None = None,
    topk: int | None = None,
    device: str = "cpu",
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES,
    seed: int = 0,
    verify: bool = True,
    command: str = "",
) -> ProbeRun:
    """Probe ``candidate`` (gates first) and write ``out/probe.json``, whatever the outcome.

    Under a grouped contract the probe recovers the group tie order (the expert order is probed on
    ungrouped contracts); ``experts``/``topk`` default to the contract's shape.
    """
    path = Path(out) / "probe.json"
    base = {"schema_version": PROBE_SCHEMA_VERSION, "candidate": candidate.name, "device": device, "command": command}
    c = oracle.get_contract(contract or candidate.contract)
    experts, topk = experts or c.experts, topk or c.topk
    if c.is_grouped:
        return _run_group_probe(candidate, c, contract or candidate.contract, path, base, experts=experts, topk=topk, device=device)
    dtypes, why = _gate(candidate, experts=experts, topk=topk, rows=2 * topk, device=device)
    if dtypes is None:
        return _stopped(path, base, device, "unavailable", reason=why)
    start = time.perf_counter()
    try:
        result = probe(candidate, contract=contract, experts=experts, topk=topk, device=device, batch_sizes=batch_sizes, seed=seed, verify=verify)
    except ProbeError as exc:
        return _stopped(path, base, device, "error", error=str(exc))
    matches, disagreements = match_rules(result.permutation)
    rule = oracle.get_contract(result.contract).tie_rule
    doc = {
        "schema_version": PROBE_SCHEMA_VERSION,
        "status": "done",
        "candidate": result.candidate,
        "device": result.device,
        "contract": result.contract,
        "contract_rule": rule,
        "matches_contract": matches == rule,
        "E": result.experts,
        "k": result.topk,
        "dtype": result.dtype,
        "bias_dtype": result.bias_dtype,
        "calls": result.calls,
        "recovery_calls": result.recovery_calls,
        "verification_calls": result.verification_calls,
        "recovery_batch_size": result.recovery_batch_size,
        "permutation": result.permutation,
        "matches": matches,
        "first_disagreement": disagreements,
        "consistent": result.consistent,
        "dependence": dependence(result),
        "inconsistencies": result.inconsistencies,
        "recovery_disagreements": result.recovery_disagreements,
        "verified": result.verified,
        "evidence": result.evidence,
        "output_order": result.output_order,
        "lane_table": lane_table(result.permutation),
        "environment": environment(device),
        "seed": seed,
        "command": command,
        "duration_s": round(time.perf_counter() - start, 3),
    }
    return _written(path, doc, result)
