"""``python -m contracts merge OUT SHARD_BUNDLE...``: one bundle from the shards of a check.

Run the same check as N jobs with ``check --shard I/N`` (same candidate,
contract, seed, rows, families, shape and repeats), then merge the N
bundles; ``contracts.reports.merge`` says how. The exit code is the merged
check's, as ``check`` gives it: 1 for a FAIL, ERROR or interrupted shard, 5
for NOT COVERED (unless --allow-not-covered), 3 when nothing could run; 2
here: shards that do not belong together, missing shards without
--allow-partial, a path that is not a bundle.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import ExitCode, UsageError, make_parser, run_main

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts merge"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, "Merge the shard bundles of one check (check --shard I/N).", __doc__.split("\n\n", 1)[1])
    ap.add_argument("out", type=Path, help="the merged bundle's folder (empty or new, unless --force)")
    ap.add_argument("shards", nargs="+", type=Path, metavar="SHARD_BUNDLE")
    ap.add_argument("--allow-partial", action="store_true", help="merge even if some shards of the split are missing")
    ap.add_argument("--force", action="store_true", help="replace a bundle already in OUT")
    ap.add_argument("--allow-not-covered", action="store_true", help="exit 0 although the merged check is NOT COVERED (default: 5)")
    return ap


def _exit_code(merged, allow_not_covered: bool) -> int:
    """The worst merged status as ``check`` exits on it: a merged FAIL or ERROR is never exit 0."""
    from ..reports.schema import Status, worst_status

    worst = worst_status(s.status for s in merged)
    if worst in (Status.FAIL, Status.ERROR, Status.INTERRUPTED):
        return ExitCode.FAILED
    if worst is Status.NOT_COVERED and not allow_not_covered:
        return ExitCode.NOT_COVERED
    if worst is Status.UNAVAILABLE:
        return ExitCode.UNAVAILABLE
    return ExitCode.OK


def run(args: argparse.Namespace) -> int:
    from ..reports.out_folder import prepare_out
    from ..reports.merge import MergeError, merge_bundles
    from ..reports.terminal import reason_lines

    if any(args.out.resolve() == s.resolve() for s in args.shards):
        raise UsageError(f"OUT {args.out} is one of the shards; merge into a new folder")
    args.out = prepare_out(args.out, force=args.force, what="OUT")  # a symlink resolved; this process its one writer
    try:
        merged = merge_bundles(args.out, args.shards, allow_partial=args.allow_partial)
    except MergeError as exc:
        raise UsageError(str(exc)) from None
    for s in merged:
        if s.status.value == "unavailable":
            print(f"{s.candidate}: UNAVAILABLE: {s.reason or ''}")
            continue
        print(f"{s.candidate}: {s.status.word}, {s.rows_checked:,} rows, "
              f"{s.mismatched_rows:,} unexpected mismatched rows (shards {', '.join(s.merged_shards or [])})")  # fmt: skip
        for label, text in reason_lines(s):  # a failing merge says why on the console, as the check does
            print(f"  {label}: {text}")
    print(f"bundle: {args.out}")
    return _exit_code(merged, args.allow_not_covered)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
