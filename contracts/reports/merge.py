"""One bundle from the shards of a check (``python -m contracts merge OUT SHARD_BUNDLE...``).

Run the same check as N jobs with ``check --shard I/N`` (same candidate,
contract, seed, rows, families, shape and repeats; e.g. a CI matrix), then
merge the N bundles. Counts are summed (rows, verdicts, clauses, families,
declared deviations), the worst weight distance is kept, the mismatch cells
are the shards' concatenated, details are merged (tie-straddling examples
first, a few per clause), the status is recomputed by the schema's rules
and the reports are regenerated. The result has the same counts as one
unsharded run with that seed and rows.

Shard bundles may be single check bundles or multi-candidate ones
(``--candidate all --shard I/N``, with one folder per candidate): those are
merged candidate by candidate, with a new ``index.json``.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

from ..command_words import without_options
from .bundle import BundleError, open_check, write_check_bundle, write_index
from .cells import CellKeeper
from .expert_load import sum_records
from .schema import (
    INT64_MAX,
    CELL_COLUMNS,
    AgainstSides,
    CheckResult,
    DeclaredDeviation,
    Determinism,
    FamilyCounts,
    OptionCounts,
    RowDetail,
    Status,
    Summary,
    worst_status,
)
from .text import CELLS_NOTE

__all__ = ["MergeError", "identity", "merge_bundles", "merge_summaries"]

DETAILS_PER_CLAUSE = 5
# Shards of one check must agree on everything that changes a verdict. That is said as a whitelist: every field of a
# summary is compared (options and the inputs' digests included, key by key) except what a shard found (_RESULT:
# summed or merged below) and what may differ between shards of one check (_MAY_DIFFER: which shard, where and
# when it ran, how long it took). A field added to the summary is compared until it is listed here.
_RESULT = frozenset({"status", "reason", "rows_checked", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_deviation_rows",
                     "exact_rows", "within_tolerance_rows", "max_weight_ulp", "clauses", "families", "expected_deviations", "error",
                     "determinism", "interrupted", "against_sides", "cells_recorded", "clauses_broken", "raised_rows", "cells_capped",
                     "cells_total", "notes", "diagnosis", "by_option", "expert_load", "top_reason"})  # fmt: skip
_MAY_DIFFER = frozenset({"shard", "bundle", "merged_shards", "shard_environments", "duration_s", "rows_per_s", "stages", "environment",
                         "world_size", "ranks", "files", "command"})  # fmt: skip
# Within options: what a shard's own cases covered, and host paths whose contents are compared by digest instead.
_OPTIONS_MAY_DIFFER = frozenset({"coverage", "contract_source"})
# Within the environment (else a host's own: may differ): torch (what a torch candidate, and the oracle, compute) and
# the backend (cuda or rocm). Not the git commit: a shard run from a tree one docs commit later is the same check.
_ENVIRONMENT_COMPARED = ("torch", "backend")
_LOGITS_MAY_DIFFER = frozenset({"path"})  # the logits file's path on that host: its sha256 is compared
_SUMMED = ("rows_checked", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_deviation_rows", "exact_rows",
           "within_tolerance_rows", "cells_recorded", "cells_total", "raised_rows")  # fmt: skip
_FAMILY_SUMMED = ("rows", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_rows", "rows_raised")
_FAMILY_COUNTERS = ("clauses", "clauses_broken", "expected_clauses", "skip_reasons")


class MergeError(ValueError):
    """The bundles cannot be merged; the message says why."""


def parse_shard(text) -> tuple[int, int] | None:
    if not text:
        return None
    i, n = (int(p) for p in str(text).split("/"))
    return i, n


def _add(into: dict, key, value) -> None:
    into[key] = into.get(key, 0) + value


def unsharded_command(command: str) -> str:
    """``command`` without its ``--shard I/N`` (and ``--out DIR``, which differs per shard)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    return shlex.join(without_options(words, ("--shard", "--out")))


def _plain(value):
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value.value if hasattr(value, "value") and not isinstance(value, (dict, list, str, int, float)) else value


def _flat(prefix: str, value, into: dict) -> dict:
    value = _plain(value)
    if isinstance(value, dict) and value:
        for key, v in value.items():
            _flat(f"{prefix}.{key}" if prefix else str(key), v, into)
    else:
        into[prefix] = value
    return into


def identity(s: Summary) -> dict[str, object]:
    """What shards of one check must share, as dotted keys (``options.max_batch``, ``options.logits.sha256``): every field
    but the results and what may differ (the shard, host and timing); the device by its class (``cuda``, not
    ``cuda:1``), the captured file by its digests, not its path."""
    fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name not in _RESULT | _MAY_DIFFER}
    fields["device"] = str(s.device or "").split(":")[0]
    options = {k: v for k, v in (s.options or {}).items() if k not in _OPTIONS_MAY_DIFFER} if s.options is not None else None
    if options and isinstance(options.get("logits"), dict):
        logits = {k: v for k, v in options["logits"].items() if k not in _LOGITS_MAY_DIFFER}
        bias = logits.get("bias")
        logits["bias"] = bias if bias in ("none", "zero", None) else "given"  # which file: by bias_sha256 (or the logits' sha256)
        options["logits"] = logits
    fields["options"] = options
    env = s.environment if isinstance(s.environment, dict) else {}
    for key in _ENVIRONMENT_COMPARED:  # torch and the backend change what a shard finds
        fields[f"environment.{key}"] = env.get(key)
    target = _plain(s.replay_target)
    if isinstance(target, dict):
        fields["replay_target"] = {k: v for k, v in target.items() if k != "pythonpath"}  # a host's path
    return _flat("", fields, {})


def _check_shards(summaries: list[Summary], sources: list[str], allow_partial: bool) -> list[str]:
    first = summaries[0]
    want = identity(first)
    for s, src in zip(summaries[1:], sources[1:]):
        have = identity(s)
        for key in sorted(set(want) | set(have), key=lambda k: (k.startswith("options."), k)):
            if have.get(key, "<absent>") != want.get(key, "<absent>"):
                raise MergeError(f"{src} has {key}={have.get(key, '<absent>')!r} but {sources[0]} has {want.get(key, '<absent>')!r}: not shards of "
                                 "one check (shards share every option and input that changes a verdict; only the shard, host and timing may differ)")  # fmt: skip
        if (s.options is None) != (first.options is None) or s.options is None:
            if unsharded_command(s.command) != unsharded_command(first.command):
                raise MergeError(f"{src} ran `{s.command}` but {sources[0]} ran `{first.command}`: not shards of one check")
    shards = []
    for s, src in zip(summaries, sources):
        try:
            shard = parse_shard(s.shard)
        except ValueError:
            raise MergeError(f"{src}: shard {s.shard!r} is not I/N") from None
        if shard is None:
            raise MergeError(f"{src} is not a shard (its summary has no shard I/N); run the check with --shard I/N")
        shards.append(shard)
    totals = {n for _, n in shards}
    if len(totals) != 1:
        raise MergeError(f"shards of different splits: {', '.join(f'{i}/{n}' for i, n in shards)}")
    n = totals.pop()
    seen = [i for i, _ in shards]
    duplicates = sorted({i for i in seen if seen.count(i) > 1})
    if duplicates:
        raise MergeError(f"shard(s) {', '.join(f'{i}/{n}' for i in duplicates)} given more than once")
    missing = sorted(set(range(1, n + 1)) - set(seen))
    if missing and not allow_partial:
        raise MergeError(f"missing shard(s) {', '.join(f'{i}/{n}' for i in missing)}; pass --allow-partial to merge anyway")
    return [f"{i}/{n}" for i, _ in sorted(shards)]


def sum_summaries(parts: list[Summary], base: Summary) -> Summary:
    """``base`` with the counts of ``parts`` summed and the status recomputed (shards, or ranks of one run)."""
    merged = dataclasses.replace(base)
    for key in _SUMMED:
        setattr(merged, key, sum(getattr(s, key) for s in parts))
    merged.max_weight_ulp = max((s.max_weight_ulp for s in parts), default=0.0)
    clauses: dict[str, int] = {}
    broken: dict[str, int] = {}
    families: dict[str, FamilyCounts] = {}
    for s in parts:
        for clause, n in s.clauses.items():
            _add(clauses, clause, n)
        for clause, n in s.clauses_broken.items():
            _add(broken, clause, n)
        for family, f in s.families.items():
            into = families.setdefault(family, FamilyCounts())
            for key in _FAMILY_SUMMED:
                setattr(into, key, getattr(into, key) + getattr(f, key))
            for key in _FAMILY_COUNTERS:
                for name, n in getattr(f, key).items():
                    _add(getattr(into, key), name, n)
    merged.clauses, merged.clauses_broken, merged.families = clauses, broken, families
    by_option: dict[str, dict[str, OptionCounts]] = {}
    for s in parts:
        for option, values in s.by_option.items():
            for value, c in values.items():
                into = by_option.setdefault(option, {}).setdefault(value, OptionCounts())
                into.rows += c.rows
                into.mismatched_rows += c.mismatched_rows
                for clause, n in c.clauses.items():
                    _add(into.clauses, clause, n)
    # a part that checked rows without counting them by option (an older bundle): the split would be short, so none
    merged.by_option = {} if any(s.rows_checked and not s.by_option for s in parts) else by_option
    deviations: dict[str, DeclaredDeviation] = {}
    for s in parts:
        for clause, d in s.expected_deviations.items():
            into = deviations.setdefault(clause, DeclaredDeviation(d.reason))
            into.rows += d.rows
            into.observed = into.observed or d.observed
            if d.inexact_rows is not None:
                into.inexact_rows = (into.inexact_rows or 0) + d.inexact_rows
    merged.expected_deviations = deviations

    merged.expert_load = sum_records([s.expert_load for s in parts])  # captured logits: one histogram for the whole file
    merged.error = next((s.error for s in parts if s.error), None)
    # the reason of a part whose own top clause is the whole's (its first example of that clause), else the first one
    merged.top_reason = next((s.top_reason for s in parts if s.top_reason and s.top_clause == merged.top_clause),
                             next((s.top_reason for s in parts if s.top_reason), None)) if merged.top_clause else None  # fmt: skip
    merged.duration_s = round(sum(s.duration_s or 0.0 for s in parts), 3)
    merged.rows_per_s = round(merged.rows_checked / merged.duration_s, 1) if merged.duration_s else None
    merged.cells_capped = any(s.cells_capped for s in parts)
    determinism = [s.determinism for s in parts if s.determinism]
    if determinism:
        merged.determinism = Determinism(
            **{**dataclasses.asdict(determinism[0]),
               "rows_differing": sum(d.rows_differing for d in determinism),
               "cases": sum(d.cases for d in determinism),
               "examples": [x for d in determinism for x in d.examples][:5],
               "notes": list(dict.fromkeys(n for d in determinism for n in d.notes))}
        )  # fmt: skip
    sides = [s.against_sides for s in parts if s.against_sides]
    if sides:
        merged.against_sides = AgainstSides(*(sum(getattr(x, k) for x in sides) for k in ("candidate", "against", "neither")))
    merged.interrupted = next((s.interrupted for s in parts if s.interrupted), None)
    merged.notes = list(dict.fromkeys(n for s in parts for n in s.notes))
    statuses = [s.status for s in parts]
    if merged.mismatched_rows:
        statuses.append(Status.FAIL)
    merged.status = worst_status(statuses) if statuses else Status.PASS
    if merged.status is Status.UNAVAILABLE:
        merged.status = Status.PASS
    return merged


def merge_summaries(summaries: list[Summary], *, sources: list[str] | None = None, allow_partial: bool = False) -> Summary:
    """One summary from the shards' summaries (counts summed, status recomputed)."""
    sources = sources or [f"shard {k + 1}" for k in range(len(summaries))]
    first = summaries[0]
    ran = [s for s in summaries if s.status is not Status.UNAVAILABLE]
    if not ran:
        # unavailable on every shard (unavailable bundles carry no shard): the first reason says why
        return dataclasses.replace(first, shard=None, merged_shards=None, command=unsharded_command(first.command))
    merged_shards = _check_shards(ran, [src for src, s in zip(sources, summaries) if s in ran], allow_partial)
    merged = sum_summaries(ran, ran[0])
    for key in _SUMMED:
        if getattr(merged, key) > INT64_MAX:
            raise MergeError(f"the shards' {key} add up to {getattr(merged, key):,}, past the largest count a bundle holds ({INT64_MAX:,})")
    merged.shard = None
    merged.reason = None
    merged.command = unsharded_command(first.command)
    merged.merged_shards = merged_shards
    envs = [s.environment for s in ran]
    if any(e != envs[0] for e in envs[1:]):
        merged.shard_environments = envs
    return merged


def merge_details(groups: list[list[RowDetail]]) -> list[RowDetail]:
    buckets: dict[str, list[RowDetail]] = {}
    for details in groups:
        for d in details:
            buckets.setdefault(d.clause if d.verdict != "near_tie" else "near_tie", []).append(d)
    out = []
    for key in sorted(buckets):
        out += sorted(buckets[key], key=lambda d: not d.straddles_cutoff)[:DETAILS_PER_CLAUSE]  # stable: shard order otherwise
    return out


def _cells_in_plan_order(frames: list, merged: Summary):
    """The shards' cells case by case, in the order one unsharded run meets the cases (so the cell policy keeps the
    same cells it would have kept); in shard order when the summaries do not say how the plan was made (v1)."""
    import pandas as pd

    if not frames:
        return []
    cells = pd.concat(frames, ignore_index=True)
    o = merged.options or {}
    if isinstance(o.get("logits"), dict):  # captured logits: the plan walks the file's rows, which the replay ids name
        from ..cases.captured import plan_position

        tokens = int(o["logits"]["tokens"])
        cells["_order"] = cells["case"].map(lambda case: plan_position(case, tokens))
        cells = cells.sort_values(["_order", "row", "col"], kind="stable").drop(columns="_order")
        return [part for _, part in cells.groupby("case", sort=False)]
    if not all(k in o for k in ("rows", "families", "experts", "topk")):
        return [cells]
    from ..cases.plan import iter_plan

    groups = o.get("groups") or [1, 1]
    plan = iter_plan(list(o["families"]), int(o["rows"]), merged.seed, int(o["experts"]), int(o["topk"]), bulk_rows=o.get("bulk_rows"),
                     n_group=int(groups[0]), topk_group=int(groups[1]))  # fmt: skip
    order = {spec.replay_id: i for i, spec in enumerate(plan)}
    cells["_order"] = cells["case"].map(order).fillna(len(order))
    cells = cells.sort_values(["_order", "row", "col"], kind="stable").drop(columns="_order")
    return [part for _, part in cells.groupby("case", sort=False)]


def _merge_one(out: Path, folders: list[Path], allow_partial: bool) -> Summary:
    bundles = []
    for folder in folders:
        if not (folder / "summary.json").exists():
            raise MergeError(f"{folder} has no summary.json: not a check bundle (or an incomplete one)")
        try:
            bundles.append(open_check(folder))
        except BundleError as exc:
            raise MergeError(str(exc)) from None
    merged = merge_summaries([b.summary for b in bundles], sources=[str(f) for f in folders], allow_partial=allow_partial)
    if merged.status is Status.UNAVAILABLE:
        write_check_bundle(out, CheckResult(merged))
        return merged
    ran = [b for b in bundles if b.summary.status is not Status.UNAVAILABLE]
    details = merge_details([b.details() for b in ran])
    keeper = CellKeeper(int((merged.options or {}).get("max_cells", 100_000)))  # the policy of one run, over the shards' cells
    for frame in _cells_in_plan_order([b.cells() for b in ran if len(b.cells())], merged):
        keeper.keep(frame)
    cells = keeper.table(CELL_COLUMNS)
    merged.cells_recorded = keeper.kept
    merged.cells_capped = merged.cells_total > keeper.kept
    # Each shard's note on its own cell sample gives its own numbers: the note of the whole takes the first one's place
    # (as contracts.run.rank_merge does for torchrun's ranks), so the notes read as an unsharded run's.
    at = next((i for i, n in enumerate(merged.notes) if n.startswith(CELLS_NOTE)), None)
    merged.notes = [n for n in merged.notes if not n.startswith(CELLS_NOTE)]
    note = keeper.note(merged.cells_total)
    if note:
        merged.notes.insert(len(merged.notes) if at is None else at, note)
    write_check_bundle(out, CheckResult(merged, cells, details))
    return merged


def merge_bundles(out: str | Path, shard_bundles: list[str | Path], *, allow_partial: bool = False) -> list[Summary]:
    """Merge shard bundles into ``out``; returns the merged summaries (one per candidate)."""
    from .bundle import read_json

    out = Path(out)
    folders = [Path(p) for p in shard_bundles]
    if not folders:
        raise MergeError("give at least one shard bundle")
    for folder in folders:
        if not folder.is_dir():
            raise MergeError(f"{folder} is not a folder")
    if all((f / "summary.json").exists() for f in folders):
        return [_merge_one(out, folders, allow_partial)]
    if not all((f / "index.json").exists() for f in folders):
        raise MergeError("mix of single and multi-candidate bundles, or a folder that is not a check bundle")
    try:
        indexes = [read_json(f / "index.json") for f in folders]
    except BundleError as exc:
        raise MergeError(str(exc)) from None
    per_candidate: dict[str, list[Path]] = {}
    for folder, index in zip(folders, indexes):
        entries = index.get("candidates") if isinstance(index, dict) else None
        if not isinstance(entries, list):
            raise MergeError(f"{folder / 'index.json'}: field candidates must be a list")
        for entry in entries:
            name = entry["candidate"]
            sub = folder / Path(entry.get("bundle") or name).name
            per_candidate.setdefault(name, []).append(sub)
    merged_all = []
    for name, subs in per_candidate.items():
        if len(subs) != len(folders):
            raise MergeError(f"candidate {name!r} is in {len(subs)} of the {len(folders)} shard bundles")
        target = out / Path(subs[0]).name
        summary = _merge_one(target, subs, allow_partial)
        summary.bundle = str(target)
        merged_all.append(summary)
    write_index(out, merged_all, command=unsharded_command(indexes[0].get("command", "")), merged_shards=merged_all[0].merged_shards)
    return merged_all
