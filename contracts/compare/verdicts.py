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
from dataclasses import dataclass, field

import torch

import oracle

from .attribution import RowAttribution, fast_attribution, row_facts
from .expected import Expected
from .tolerance import ulp_distance, weights_close

__all__ = ["DETAILS_PER_CLAUSE", "VERDICTS", "CaseOutcome", "compare_case"]

VERDICTS = ("exact", "within_tolerance", "near_tie", "mismatch", "expected")
DETAILS_PER_CLAUSE = 5


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
    close = weights_close(w_act, w_exp, c)
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
    group, straddles, nan_count = row_facts(keys_b, rank_b, e_b, k)
    fast = fast_attribution(case, c, bad_t, e_b, a_b, keys_b, rank_b, ids_equal[bad_t], invalid_rows[bad_t])
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
            attr = RowAttribution(
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
