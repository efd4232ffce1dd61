"""How many candidates radix4's bound lets through, simulated on the CPU.

radix4 (kernels/radix4/radix4_router.h) ranks only the keys at or above a
bound ``lo`` that at least k keys reach; the rank step's cost grows with
their number C, and C <= lanes allows the one-candidate-per-lane shuffle
ranking. This script computes C for random sigmoid rows (bf16 logits
``randn * 2``, fp32 bias ``randn * 0.05``, as contracts.bench) under the
kernel's layout (vector g = e >> 2 on thread g % threads) for:

- ``lane maxima``: the kernel's bound. Per lane group, v_n = the n-th largest
  lane maximum; bound m = the m-th largest v_ceil(k/m) over the groups;
  lo = the largest bound.
- ``exact``: the k-th largest lane maximum of the whole token (the best any
  lane-maximum bound can do).

Run: ``python kernels/radix4/lab/radix4_bound_sim.py [--rows 4000]``. No GPU needed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

from radix4_gpu_check import rank_keys  # noqa: E402  (the kernel's key map, in torch)


def candidate_counts(keys: np.ndarray, *, threads: int, lanes: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(C under the kernel's bound, C under the exact k-th lane maximum) for each row."""
    experts = keys.shape[1]
    thread = (np.arange(experts) >> 2) % threads
    groups = threads // lanes
    ours, exact = [], []
    for row in keys:
        lane_max = np.full(threads, -1, dtype=np.int64)
        np.maximum.at(lane_max, thread, row)
        per_group = -np.sort(-lane_max.reshape(groups, lanes), axis=1)  # descending
        bounds = [np.sort(per_group[:, -(-k // m) - 1])[::-1][m - 1] for m in range(1, groups + 1)]
        lo = max(bounds)
        ours.append(int((row >= lo).sum()))
        exact.append(int((row >= np.sort(lane_max)[::-1][k - 1]).sum()))
    return np.array(ours), np.array(exact)


def describe(name: str, c: np.ndarray, lanes: int) -> str:
    return (f"{name:46s} median {np.median(c):4.0f}  mean {c.mean():5.1f}  p99 {np.percentile(c, 99):4.0f}  "
            f"max {c.max():4d}  above {lanes} lanes {(c > lanes).mean():6.1%}  above 128 {(c > 128).mean():6.2%}")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4000, help="random rows to simulate (default 4000)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.rows < 1:
        ap.error(f"--rows {args.rows}: give at least 1 row")
    g = torch.Generator().manual_seed(args.seed)
    logits = (torch.randn(args.rows, 896, generator=g) * 2).bfloat16().float()
    bias = torch.randn(896, generator=g) * 0.05
    keys = rank_keys(torch.sigmoid(logits) + bias).numpy()
    print(f"C = keys at or above the bound, {args.rows} random rows, E = 896, k = 16")
    for label, threads in (("warp per token (32 lanes)", 32), ("block of 4 warps (128 threads)", 128)):
        ours, exact = candidate_counts(keys, threads=threads, lanes=32, k=16)
        print(describe(f"{label}: kernel bound", ours, 32))
        print(describe(f"{label}: exact", exact, 32))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
