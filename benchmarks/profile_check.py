"""Where a check's time goes: one in-process check under cProfile, with honest per-stage times.

The summary's stage times come from host clocks around asynchronous work: on
a GPU a stage that launches kernels is charged to whichever later stage waits
for them. ``--sync`` synchronizes the device at every stage boundary, so each
stage carries its own GPU time (the run gets a little slower). Prints the
stages, then the functions with the most time of their own and the most
time below them.

    python benchmarks/profile_check.py --candidate radix4 --device cuda --rows 5M --sync
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from contracts.commands._common import row_count  # noqa: E402
from contracts.run import tally as tally_module  # noqa: E402
from contracts.run.checks import run_checks  # noqa: E402


def _synced_timer(device: str):
    def timed(self, stage: str, rows: int):
        @contextlib.contextmanager
        def clock():
            torch.cuda.synchronize(device)
            start = time.perf_counter()
            try:
                yield
            finally:
                torch.cuda.synchronize(device)
                self.add_time(stage, time.perf_counter() - start, rows)

        return clock()

    return timed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", default="oracle")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--rows", type=row_count, default=1_000_000)
    ap.add_argument("--families", help="comma-separated subset (default all)")
    ap.add_argument("--sync", action="store_true", help="synchronize the GPU at every stage boundary")
    ap.add_argument("--top", type=int, default=25, help="functions to list (default 25)")
    args = ap.parse_args(argv)
    if args.sync and args.device.startswith("cuda"):
        tally_module.Tally.timed = _synced_timer(args.device)
    families = [f.strip() for f in args.families.split(",")] if args.families else None
    with tempfile.TemporaryDirectory(prefix="profile-check-") as tmp:
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        done = run_checks([args.candidate], rows=args.rows, device=args.device, isolate=False, families=families,
                          out=Path(tmp) / "bundle", force=True, progress=False, command="profile_check")  # fmt: skip
        profile.disable()
        wall = time.perf_counter() - start
    s = done.results[0].summary
    print(f"{args.candidate} on {args.device}: {s.rows_checked:,} rows in {wall:.1f} s ({s.rows_checked / wall:,.0f} rows/s), {s.status.value}")
    for name, v in (s.stages or {}).items():
        if isinstance(v, dict) and "rows" in v:
            print(f"  {name:<11} {v['seconds']:7.2f} s")
    stats = pstats.Stats(profile)
    for key, title in (("tottime", "own time"), ("cumulative", "time below")):
        print(f"\nby {title}:")
        stats.sort_stats(key).print_stats(args.top)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
