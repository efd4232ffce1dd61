"""How fast the harness checks rows, against the raw speed of its oracle, in one run on one device.

Prints, side by side:

- the raw oracle: ``oracle.route`` on batches of ``--batch`` rows of random
  bf16 logits (the ceiling: a check calls the oracle once per row, plus the
  candidate, plus generation and comparison);
- the harness in-process (``isolate=False``) and isolated (a worker
  process), checking ``--candidate`` (default: the oracle against itself on
  a CPU, radix4 on a GPU) over ``--rows`` rows of every family;
- the ratios (against the fastest of the raw oracle's timings, taken before
  and after each harness run), and each run's time per stage (generation, candidate, oracle,
  comparison) from the summary, and its peak RSS.

    python benchmarks/harness_speed.py                      # CPU: oracle vs itself
    python benchmarks/harness_speed.py --device cuda --candidate radix4 --rows 100M

The goals (issue 19): on a CPU the oracle-vs-itself check at >= 0.30x the
raw oracle's rows/s; on an H200 radix4 at >= 1M rows/s isolated and
>= 2M rows/s in-process; RSS under 2 GiB at any row count.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

import oracle  # noqa: E402
from contracts.commands._common import row_count  # noqa: E402
from contracts.reports.json_records import to_json  # noqa: E402
from contracts.run.checks import run_checks  # noqa: E402


def raw_oracle(device: str, batch: int, seconds: float) -> float:
    g = torch.Generator(device=device).manual_seed(0)
    x = (torch.randn(batch, 896, generator=g, device=device) * 2).to(torch.bfloat16)
    b = (torch.randn(896, generator=g, device=device) * 0.05).to(torch.bfloat16)
    oracle.route(x, b, 16, renormalize=True, routed_scaling_factor=2.5, contract="aiter")  # warm-up
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    rows, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        oracle.route(x, b, 16, renormalize=True, routed_scaling_factor=2.5, contract="aiter")
        rows += batch
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return rows / (time.perf_counter() - start)


def harness(candidate: str, *, rows: int, device: str, isolate: bool, families, out: Path) -> dict:
    start = time.perf_counter()
    done = run_checks([candidate], rows=rows, device=device, isolate=isolate, families=families, out=out, force=True, progress=False,
                      command=f"harness_speed {candidate} isolate={isolate}")  # fmt: skip
    wall = time.perf_counter() - start
    s = done.results[0].summary
    return {"status": s.status.value, "rows": s.rows_checked, "wall_s": round(wall, 2), "rows_per_s": s.rows_checked / wall,
            "mismatched": s.mismatched_rows, "stages": s.stages, "summary": to_json(s),
            "findings": _first_findings(s, done.results[0].details)}  # fmt: skip


def _first_findings(summary, details, limit: int = 3) -> list[str]:
    """A failed run's error and first mismatched rows (clause, case, reason, replay line): a speed figure never hides a finding."""
    lines = [f"error: {summary.error.message}"] if summary.error else []
    for row in [d for d in details if d.verdict == "mismatch"][:limit]:
        lines.append(f"{row.clause} in {row.case} row {row.row}: {row.reason}; replay: {row.replay}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--candidate", help="default: oracle on a CPU, radix4 on a GPU")
    ap.add_argument("--rows", type=row_count, default=None, help="rows per harness run (default 1M on a CPU, 100M on a GPU)")
    ap.add_argument("--families", help="comma-separated subset (default all)")
    ap.add_argument("--batch", type=int, default=65_536, help="raw oracle batch (default 65,536)")
    ap.add_argument("--modes", default="in-process,isolated", help="which harness runs (default both)")
    ap.add_argument("--json", type=Path, help="also write the figures as JSON")
    ap.add_argument("--keep", type=Path, help="write each run's bundle under this folder (default: a temporary one)")
    args = ap.parse_args(argv)
    gpu = args.device.startswith("cuda")
    candidate = args.candidate or ("radix4" if gpu else "oracle")
    rows = args.rows or (100_000_000 if gpu else 1_000_000)
    families = [f.strip() for f in args.families.split(",")] if args.families else None
    name = torch.cuda.get_device_name() if gpu else "cpu"
    print(f"device: {args.device} ({name}); torch {torch.__version__}; {torch.get_num_threads()} CPU threads; candidate {candidate}; {rows:,} rows")
    # The raw oracle is timed before and after the harness runs and the faster figure is the reference: a
    # noisy first timing (a busy neighbour, a cold cache) would otherwise flatter every ratio.
    raws = [raw_oracle(args.device, args.batch, 5.0)]
    print(f"raw oracle (oracle.route, M={args.batch:,}): {raws[0]:,.0f} rows/s")
    raw = raws[0]
    figures = {"device": args.device, "device_name": name, "candidate": candidate, "rows": rows, "raw_oracle_rows_per_s": raw, "runs": {}}
    with tempfile.TemporaryDirectory(prefix="harness-speed-") as scratch:
        tmp = args.keep or scratch
        for mode in [m.strip() for m in args.modes.split(",") if m.strip()]:
            run = harness(candidate, rows=rows, device=args.device, isolate=(mode == "isolated"), families=families, out=Path(tmp) / mode)
            raws.append(raw_oracle(args.device, args.batch, 5.0))
            raw = max(raws)
            figures["runs"][mode] = {k: v for k, v in run.items() if k != "summary"}
            st = run["stages"] or {}
            parts = ", ".join(f"{k} {v['seconds']:.1f} s" for k, v in st.items() if isinstance(v, dict) and "rows" in v)
            print(f"harness {mode:>10}: {run['rows_per_s']:,.0f} rows/s ({run['rows']:,} rows in {run['wall_s']:.1f} s, {run['status']}, "
                  f"{run['mismatched']} mismatched) = {run['rows_per_s'] / raw:.3f}x the raw oracle; peak RSS {st.get('peak_rss_mb', 0):,.0f} MB")  # fmt: skip
            print(f"{'':>20}stages: {parts}")
            for failure in run["findings"]:
                print(f"{'':>20}{failure}")
    print(f"raw oracle timings: {', '.join(f'{r:,.0f}' for r in raws)} rows/s; every ratio above is against the "
          f"fastest timed by then, the last against {max(raws):,.0f}")
    figures["raw_oracle_rows_per_s"] = max(raws)
    figures["raw_oracle_timings"] = raws
    for run in figures["runs"].values():
        run["ratio_to_raw_oracle"] = run["rows_per_s"] / max(raws)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
