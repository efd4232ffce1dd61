"""The merge of torchrun ranks' records: one check's parts (one per rank) as the record of one run.

The ranks' plumbing (the store, heartbeats, the gather, the exit codes) is ``contracts.run.distributed``;
this module only combines what rank 0 collected, so it needs no torch.distributed and is tested with
hand-made ``Part`` values. Counts are those of a one-process run over the same cases; a rank that sent
nothing, could not run the candidate, or planned a different set of cases makes the result an ``error``
naming the rank, never a silent sum.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

from ..reports.cells import CellKeeper
from ..reports.merge import _cells_in_plan_order, merge_details, sum_summaries
from ..reports.text import CELLS_NOTE
from ..reports.schema import CELL_COLUMNS, CheckResult, ErrorRecord, Status, Summary, worst_status

__all__ = ["PLAN_OPTIONS", "Part", "Shards", "combine_checks"]

# The options of a rank's plan: ranks whose plans differ split different case lists, and their sum is no run's.
PLAN_OPTIONS = ("rows", "families", "experts", "topk", "groups", "bulk_rows", "repeat")


class Shards(Protocol):
    """How the cases were split over the ranks (``contracts.run.world.World`` is one)."""

    world_size: int

    def shard_of(self, rank: int, user: tuple[int, int] | None) -> tuple[int, int]: ...


@dataclass
class Part:
    """What one rank sent for one gather: its value, or why there is none (``missing``: lost, raised, stopped, finished, diverged)."""

    rank: int
    host: str
    device: str  # cpu, or cuda:N with N the host's GPU index
    value: Any = None
    missing: str | None = None
    error: ErrorRecord | None = None  # for a missing value that is an error (lost, raised, finished, diverged)
    stopped: str | None = None  # for missing == "stopped": the stop reason


# ---------------------------------------------------------------- combining one check's parts


def _rank_entry(part: Part, world: Shards | None, user_shard: tuple[int, int] | None) -> dict:
    entry: dict = {"rank": part.rank, "host": part.host, "device": part.device}
    summary = part.value.summary if part.value is not None else None
    entry["rows_checked"] = summary.rows_checked if summary else 0
    entry["status"] = summary.status.value if summary else (Status.INTERRUPTED.value if part.missing == "stopped" else Status.ERROR.value)
    entry["duration_s"] = summary.duration_s if summary else None
    if summary and summary.stages:
        entry["stages"] = summary.stages
    if world is not None:
        i, n = world.shard_of(part.rank, user_shard)
        entry["shard"] = f"{i}/{n}"
    reason = (summary.reason or summary.interrupted or (summary.error.message if summary.error else None)) if summary else (
        part.error.message if part.error else part.stopped)  # fmt: skip
    if reason and entry["status"] != Status.PASS.value:
        entry["reason"] = reason
    return entry


def combine_checks(parts: list[Part], *, world: Shards | None = None) -> CheckResult:
    """The ranks' results of one check as one record, with the counts of a one-process run over the same cases.

    Counts are summed (``reports.merge.sum_summaries``); the cells are the
    ranks' cells put back in the plan's order and kept by the cell policy
    of one run (``reports.cells``, as the merge of shards does), so they are
    the cells a one-process run keeps; details are merged. Stage seconds and rows
    are summed over the ranks (``ranks[].stages`` has each rank's), ``wall``
    is the world's. A rank that sent nothing, or could not run the candidate
    while others did, leaves its share unchecked: that is an ``error`` naming
    the rank (a rank that was stopped before it started is ``interrupted``).
    The duration is the slowest rank's, so rows/s is the world's rate.
    """

    results = [p.value for p in parts if p.value is not None]
    summaries = [r.summary for r in results]
    ran = [s for s in summaries if s.status is not Status.UNAVAILABLE]
    problems: list[tuple[Part, ErrorRecord | None, str | None]] = [(p, p.error, p.stopped) for p in parts if p.value is None]
    if ran:
        for p in parts:
            s = p.value.summary if p.value is not None else None
            if s is not None and s.status is Status.UNAVAILABLE:
                message = f"rank {p.rank} (host {p.host}) could not run {s.label}: {s.reason}; its share of the cases is not in these counts"
                problems.append((p, ErrorRecord("rank_unavailable", f"rank {p.rank}", message), None))
    problems += _plan_differences(parts, ran)
    user_shard = _user_shard(summaries)
    ranks = [_rank_entry(p, world, user_shard) for p in parts]
    world_size = world.world_size if world is not None else len(parts)
    if not ran and not problems:  # unavailable on every rank: rank 0's reason says why
        summary = dataclasses.replace(summaries[0], world_size=world_size, ranks=ranks)
        return CheckResult(summary)
    base = ran[0] if ran else summaries[0] if summaries else None
    if base is None:
        raise ValueError("no rank sent a record for this check")
    merged = sum_summaries(ran, base) if ran else dataclasses.replace(base)
    merged.world_size, merged.ranks = world_size, ranks
    durations = [s.duration_s for s in ran if s.duration_s]
    merged.duration_s = round(max(durations), 3) if durations else None
    merged.rows_per_s = round(merged.rows_checked / merged.duration_s, 1) if merged.duration_s else None
    rank_errors = [e for _, e, _ in problems if e is not None]
    first_error = next(((p.rank, p.value.summary.error) for p in parts if p.value is not None and p.value.summary.error), None)
    if rank_errors:
        merged.error = rank_errors[0]
    elif first_error is not None:
        rank, error = first_error
        merged.error = dataclasses.replace(error, message=f"rank {rank}: {error.message}")
    # Each rank's note on its own cell sample gives its own numbers: the note of the whole (below) stands in for them.
    # It takes their place among the notes, so the notes read as a one-process run's (a --logits zero-bias warning after it).
    at = next((i for i, n in enumerate(merged.notes) if n.startswith(CELLS_NOTE)), None)
    notes = [n for n in merged.notes if not n.startswith(CELLS_NOTE)]
    merged.notes = list(dict.fromkeys([*notes, *(e.message for e in rank_errors[1:]), *(s for _, _, s in problems if s)]))
    merged.stages = _summed_stages([s.stages for s in ran if s.stages], merged.duration_s)
    statuses = [s.status for s in ran] + [Status.ERROR if e is not None else Status.INTERRUPTED for _, e, _ in problems]
    if merged.mismatched_rows:
        statuses.append(Status.FAIL)
    merged.status = worst_status(statuses)
    if any(e is not None and e.kind in ("rank_lost", "rank_exception") for _, e, _ in problems):
        # torchrun stops the other ranks when one dies: their interruption is the consequence, the death the cause.
        merged.status = Status.ERROR
    if merged.status is Status.INTERRUPTED and not merged.interrupted:
        merged.interrupted = next(s for _, _, s in problems if s)
    keeper = CellKeeper(int((merged.options or {}).get("max_cells", 100_000)))
    for frame in _cells_in_plan_order([r.cells for r in results if r.cells is not None and len(r.cells)], merged):
        keeper.keep(frame)
    cells = keeper.table(CELL_COLUMNS)
    merged.cells_recorded, merged.cells_capped = keeper.kept, merged.cells_total > keeper.kept
    note = keeper.note(merged.cells_total)
    if note:
        merged.notes.insert(len(merged.notes) if at is None else at, note)
    details = merge_details([r.details for r in results])
    return CheckResult(merged.validate("combined ranks"), cells, details)


def _plan_differences(parts: list[Part], ran: list[Summary]) -> list[tuple[Part, ErrorRecord, None]]:
    """Ranks whose plan options differ from the first rank's that ran: their shards are not slices of one plan."""
    if not ran:
        return []
    first = ran[0]
    first_rank = next(p.rank for p in parts if p.value is not None and p.value.summary is first)
    out = []
    for p in parts:
        s = p.value.summary if p.value is not None else None
        if s is None or s is first or s.status is Status.UNAVAILABLE:
            continue
        a, b = s.options or {}, first.options or {}
        for key in PLAN_OPTIONS:
            if key in a and key in b and a[key] != b[key]:
                message = (f"rank {p.rank} (host {p.host}) planned its cases with {key}={a[key]!r} where rank {first_rank} used "
                           f"{b[key]!r}: the ranks split different plans, so these counts are not one run's; run every rank on the "
                           "same kind of device")  # fmt: skip
                out.append((p, ErrorRecord("rank_plan_differs", f"rank {p.rank}", message), None))
                break
    return out


def _summed_stages(stages: list[dict], wall: float | None) -> dict | None:
    """Per stage, the seconds and rows of all ranks (rows/s is then per rank-second); the world's wall time; the largest peak RSS."""
    if not stages:
        return None
    out: dict = {}
    for ranked_stages in stages:
        for name, value in ranked_stages.items():
            if isinstance(value, dict) and "rows" in value:
                into = out.setdefault(name, {"seconds": 0.0, "rows": 0})
                into["seconds"] += value.get("seconds") or 0.0
                into["rows"] += value.get("rows") or 0
    for value in out.values():
        value["seconds"] = round(value["seconds"], 3)
        value["rows_per_s"] = round(value["rows"] / value["seconds"], 1) if value["seconds"] > 0 else None
    out["wall"] = {"seconds": wall}
    peaks = [x["peak_rss_mb"] for x in stages if isinstance(x.get("peak_rss_mb"), (int, float))]
    if peaks:
        out["peak_rss_mb"] = max(peaks)
    return out


def _user_shard(summaries: list[Summary]) -> tuple[int, int] | None:
    shard = next((s.shard for s in summaries if s.shard), None)
    if not shard:
        return None
    i, n = (int(x) for x in shard.split("/"))
    return i, n
