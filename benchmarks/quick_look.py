"""How long ``check --quick`` takes, as a new user runs it: the command in a fresh process, wall clock to exit.

Times, one after the other (each in its own ``python -m contracts check ... --quick`` process, so the import of
torch and the worker's start count, as they do for a user):

- ``torch-native`` (a router that passes: the plan, the bundle), and
- a failing router (default: ``examples.deepseek_v3_router:route`` under ``deepseek-v3``, the README's worked
  example: its failing rows add the diagnosis),

and prints each one's wall seconds, status, exit code, cases and rows (from the run's own "planned" line and its
summary.json). The goal (issue 58, item 3): each under 30 s on the 2-core CPU. Speed is checked here, never by a
timed test.

    python benchmarks/quick_look.py
    python benchmarks/quick_look.py --failing tests.broken_candidates:wrong_tie_order --failing-contract aiter
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 30.0


def time_quick(candidate: str, contract: str | None, out: Path) -> dict:
    """One ``check --quick`` in a fresh process: its wall seconds, exit code, planned cases and rows, and verdict."""
    argv = [sys.executable, "-m", "contracts", "check", "--candidate", candidate, "--quick", "--out", str(out)]
    argv += ["--contract", contract] if contract else []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("ROUTER_CONTRACTS_MAX_BATCH", None)  # the product's default sweep, as a user gets it
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    planned = re.search(r"planned ([\d,]+) cases, ([\d,]+) rows", done.stderr)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {}
    return {"candidate": candidate, "contract": summary.get("contract", contract or ""), "wall_s": wall, "exit": done.returncode,
            "status": summary.get("status", "?"), "quick": summary.get("quick"),
            "cases": int(planned.group(1).replace(",", "")) if planned else None,
            "rows": summary.get("rows_checked"), "stderr_tail": done.stderr[-600:] if done.returncode not in (0, 1) else ""}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--passing", default="torch-native", help="a router that passes (default torch-native)")
    ap.add_argument("--failing", default="examples.deepseek_v3_router:route", help="a router that fails (default: the README's example)")
    ap.add_argument("--failing-contract", default="deepseek-v3", help="its contract (default deepseek-v3)")
    args = ap.parse_args()
    print(f"check --quick on {os.cpu_count()} CPU cores, load average {os.getloadavg()[0]:.2f} before (goal: each under {GOAL_S:.0f} s)")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for candidate, contract in ((args.passing, None), (args.failing, args.failing_contract)):
            results.append(time_quick(candidate, contract, Path(tmp) / f"run{len(results)}"))
    print(f"{'candidate':<40} {'contract':<12} {'status':<6} {'exit':>4} {'cases':>6} {'rows':>8} {'wall s':>7}  goal")
    for r in results:
        ok = "ok" if r["wall_s"] < GOAL_S and r["quick"] else "OVER" if r["quick"] else "not a quick run"
        print(f"{r['candidate']:<40} {r['contract']:<12} {r['status']:<6} {r['exit']:>4} {r['cases'] or 0:>6,} {r['rows'] or 0:>8,} "
              f"{r['wall_s']:>7.1f}  {ok}")  # fmt: skip
        if r["stderr_tail"]:
            print(f"  stderr: {r['stderr_tail']}")
    print(f"load average after: {os.getloadavg()[0]:.2f} (a loaded machine's figures are not the 2-core CPU's own)")
    return 0 if all(r["wall_s"] < GOAL_S and r["quick"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
