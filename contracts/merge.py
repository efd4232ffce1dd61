"""``python -m contracts.merge OUT SHARD_BUNDLE...``: one bundle from the shards of a check.

Run the same check as N jobs with ``contracts.check --shard I/N`` (same
candidate, contract, seed, rows and families; e.g. a CI matrix), then merge
the N bundles. Counts are summed (rows, verdicts, clauses, families, declared
deviations), the worst weight distance is kept, ``mismatches.csv`` is the
shards' concatenated, details are merged (tie-straddling examples first, a few
per clause), the status is recomputed and ``report.md`` is regenerated. The
result has the same counts as one unsharded run with that seed and rows.

Shard bundles may be single check bundles or multi-candidate ones
(``--candidate all --shard I/N``, with one folder per candidate): those are
merged candidate by candidate, with a new ``index.json``.

Exit codes: 0 merged, 2 usage (shards that do not belong together, missing
shards without ``--allow-partial``, a path that is not a bundle).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

import pandas as pd

from ._atomic import write_json, write_text
from .report import CELL_COLUMNS, render_markdown, write_bundle
from .runner import CheckResult

__all__ = ["MergeError", "main", "merge_bundles", "merge_summaries"]

EXIT_OK, EXIT_USAGE = 0, 2
DETAILS_PER_CLAUSE = 5
# Fields every shard of one check must agree on.
_SAME = ("candidate", "contract", "against", "device", "seed", "bit_exact")
_SUMMED = ("rows_checked", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_deviation_rows", "exact_rows",
           "within_tolerance_rows", "cells_recorded")  # fmt: skip
_FAMILY_SUMMED = ("rows", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_rows")
_STRING_COLUMNS = ("family", "case", "clause", "verdict", "reason")


class MergeError(ValueError):
    """The bundles cannot be merged; the message says why."""


def _read_json(path: Path):
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _parse_shard(text) -> tuple[int, int] | None:
    if not text:
        return None
    i, n = (int(p) for p in str(text).split("/"))
    return i, n


def _add(into: dict, key, value) -> None:
    into[key] = into.get(key, 0) + value


def _unsharded_command(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word == "--shard":
            skip = True
        elif not word.startswith("--shard="):
            out.append(word)
    return shlex.join(out)


def _check_shards(summaries: list[dict], sources: list[str], allow_partial: bool) -> list[str]:
    first = summaries[0]
    for s, src in zip(summaries[1:], sources[1:]):
        for key in _SAME:
            if s.get(key) != first.get(key):
                raise MergeError(f"{src} has {key}={s.get(key)!r} but {sources[0]} has {first.get(key)!r}: not shards of one check")
    shards = []
    for s, src in zip(summaries, sources):
        try:
            shard = _parse_shard(s.get("shard"))
        except ValueError:
            raise MergeError(f"{src}: shard {s.get('shard')!r} is not I/N") from None
        if shard is None:
            raise MergeError(f"{src} is not a shard (its summary has no shard I/N); run contracts.check with --shard I/N")
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


def merge_summaries(summaries: list[dict], *, sources: list[str] | None = None, allow_partial: bool = False) -> dict:
    """One summary from the shards' summaries (counts summed, status recomputed)."""
    sources = sources or [f"shard {k + 1}" for k in range(len(summaries))]
    first = summaries[0]
    ran = [s for s in summaries if s.get("status") != "unavailable"]
    merged = dict(first)
    merged["shard"] = None
    merged["command"] = _unsharded_command(first.get("command", ""))
    if not ran:
        merged["merged_shards"] = None
        return merged  # unavailable on every shard (unavailable bundles carry no shard): the first reason says why
    merged["merged_shards"] = _check_shards(ran, [src for src, s in zip(sources, summaries) if s in ran], allow_partial)
    merged["reason"] = None
    for key in _SUMMED:
        merged[key] = sum(int(s.get(key) or 0) for s in ran)
    merged["max_weight_ulp"] = max(float(s.get("max_weight_ulp") or 0.0) for s in ran)
    clauses: dict[str, int] = {}
    families: dict[str, dict] = {}
    for s in ran:
        for clause, n in (s.get("clauses") or {}).items():
            _add(clauses, clause, n)
        for family, f in (s.get("families") or {}).items():
            into = families.setdefault(family, {k: 0 for k in _FAMILY_SUMMED} | {"clauses": {}})
            for key in _FAMILY_SUMMED:
                _add(into, key, f.get(key, 0))
            for clause, n in (f.get("clauses") or {}).items():
                _add(into["clauses"], clause, n)
    merged["clauses"] = clauses
    merged["families"] = families
    deviations: dict[str, dict] = {}
    for s in ran:
        for clause, d in (s.get("expected_deviations") or {}).items():
            into = deviations.setdefault(clause, {"reason": d.get("reason"), "rows": 0, "observed": False})
            into["rows"] += d.get("rows", 0)
            into["observed"] = into["observed"] or bool(d.get("observed"))
            if "inexact_rows" in d:
                _add(into, "inexact_rows", d["inexact_rows"])
    merged["expected_deviations"] = deviations
    merged["error"] = next((s["error"] for s in ran if s.get("error")), None)
    merged["duration_s"] = round(sum(float(s.get("duration_s") or 0.0) for s in ran), 3)
    merged["rows_per_s"] = round(merged["rows_checked"] / merged["duration_s"], 1) if merged["duration_s"] > 0 else None
    envs = [s.get("environment") for s in ran]
    if any(e != envs[0] for e in envs[1:]):
        merged["shard_environments"] = envs
    determinism = [s["determinism"] for s in ran if s.get("determinism")]
    if determinism:
        merged["determinism"] = {
            **determinism[0],
            "rows_differing": sum(d.get("rows_differing", 0) for d in determinism),
            "cases": sum(d.get("cases", 0) for d in determinism),
            "examples": [x for d in determinism for x in d.get("examples", [])][:5],
        }
    merged["interrupted"] = next((s["interrupted"] for s in ran if s.get("interrupted")), None)
    # The worst shard decides: an interrupted or crashed shard is never hidden by healthy ones.
    statuses = {s.get("status") for s in ran}
    if "interrupted" in statuses:
        merged["status"] = "interrupted"
    elif "error" in statuses:
        merged["status"] = "error"
    elif "fail" in statuses or merged["mismatched_rows"]:
        merged["status"] = "fail"
    else:
        merged["status"] = "pass"
    return merged


def _merge_details(groups: list[list[dict]]) -> list[dict]:
    buckets: dict[str, list[dict]] = {}
    for details in groups:
        for d in details:
            key = d["clause"] if d.get("verdict") != "near_tie" else "near_tie"
            buckets.setdefault(key, []).append(d)
    out = []
    for key in sorted(buckets):
        bucket = sorted(buckets[key], key=lambda d: not d.get("straddles_cutoff"))  # stable: shard order otherwise
        out += bucket[:DETAILS_PER_CLAUSE]
    return out


def _read_cells(folder: Path) -> pd.DataFrame:
    if (folder / "mismatches.parquet").exists():
        try:
            return pd.read_parquet(folder / "mismatches.parquet")
        except ImportError:
            pass
    if not (folder / "mismatches.csv").exists():
        return pd.DataFrame(columns=CELL_COLUMNS)
    frame = pd.read_csv(folder / "mismatches.csv")
    for column in _STRING_COLUMNS:
        if column in frame:
            frame[column] = frame[column].fillna("").astype(str)
    return frame


def _merge_one(out: Path, folders: list[Path], allow_partial: bool) -> dict:
    summaries = []
    for folder in folders:
        if not (folder / "summary.json").exists():
            raise MergeError(f"{folder} has no summary.json: not a check bundle (or an incomplete one)")
        summaries.append(_read_json(folder / "summary.json"))
    merged = merge_summaries(summaries, sources=[str(f) for f in folders], allow_partial=allow_partial)
    if merged["status"] == "unavailable":
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "report.md", render_markdown(CheckResult(merged)))
        write_json(out / "summary.json", merged)
        return merged
    ran = [f for f, s in zip(folders, summaries) if s.get("status") != "unavailable"]
    details = _merge_details([_read_json(f / "details.json") if (f / "details.json").exists() else [] for f in ran])
    frames = [frame for frame in (_read_cells(f) for f in ran) if not frame.empty]
    cells = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CELL_COLUMNS)
    merged["cells_recorded"] = len(cells)
    write_bundle(out, CheckResult(merged, cells.to_dict("records"), details))
    return merged


def merge_bundles(out: str | Path, shard_bundles: list[str | Path], *, allow_partial: bool = False) -> list[dict]:
    """Merge shard bundles into ``out``; returns the merged summaries (one per candidate)."""
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
    indexes = [_read_json(f / "index.json") for f in folders]
    per_candidate: dict[str, list[Path]] = {}
    for folder, index in zip(folders, indexes):
        for entry in index.get("candidates", []):
            name = entry["candidate"]
            sub = folder / Path(entry.get("bundle") or name).name
            per_candidate.setdefault(name, []).append(sub)
    merged_all = []
    for name, subs in per_candidate.items():
        if len(subs) != len(folders):
            raise MergeError(f"candidate {name!r} is in {len(subs)} of the {len(folders)} shard bundles")
        target = out / Path(subs[0]).name
        summary = _merge_one(target, subs, allow_partial)
        summary["bundle"] = str(target)
        merged_all.append(summary)
    index = [{k: s.get(k) for k in ("candidate", "contract", "device", "status", "rows_checked", "mismatched_rows", "reason", "bundle")} for s in merged_all]
    write_json(out / "index.json", {"schema_version": indexes[0].get("schema_version"), "command": _unsharded_command(indexes[0].get("command", "")),
                                    "merged_shards": merged_all[0].get("merged_shards"), "candidates": index})  # fmt: skip
    table = pd.DataFrame(index).drop(columns=["bundle"]).fillna("").to_string(index=False)
    write_text(out / "index.md", "# Check index (merged shards)\n\n```\n" + table + "\n```\n")
    return merged_all


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m contracts.merge", description="Merge the shard bundles of one check (contracts.check --shard I/N).")
    ap.add_argument("out", type=Path, help="the merged bundle's folder")
    ap.add_argument("shards", nargs="+", type=Path, metavar="SHARD_BUNDLE")
    ap.add_argument("--allow-partial", action="store_true", help="merge even if some shards of the split are missing")
    try:
        args = ap.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code else EXIT_OK
    try:
        merged = merge_bundles(args.out, args.shards, allow_partial=args.allow_partial)
    except (MergeError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for s in merged:
        if s["status"] == "unavailable":
            print(f"{s['candidate']}: UNAVAILABLE: {s.get('reason', '')}")
            continue
        print(f"{s['candidate']}: {s['status'].upper()}, {s.get('rows_checked', 0):,} rows, "
              f"{s.get('mismatched_rows', 0):,} unexpected mismatched rows (shards {', '.join(s['merged_shards'])})")  # fmt: skip
    print(f"bundle: {args.out}")
    return EXIT_OK


if __name__ == "__main__":
    raise SystemExit(main())
