"""radix4's launch shapes timed at every batch size, and the switch points chosen from the timings.

    python -m kernels.radix4.shape_sweep --out DIR [--max-m 4096] [--contracts aiter,serial] [--seeds 4] [--shapes 896/16]   # GPU
    python -m kernels.radix4.shape_sweep --analyse DIR/sweep.csv --out DIR                     # anywhere

On the GPU, for each contract and (experts, topk) of ``KIMI_SHAPES`` (the shapes
whose launch shape switches with M; ``--shapes`` picks some), each launch
shape (``LAUNCH_SHAPES``) is timed at every M of its range (a block per token
for M <= 1024, a warp per token for every M, the dense warp per token for
M >= 256: outside those ranges each shape is far from the best, as the
tuning log's earlier sweeps showed). A point is the median of ``--replays``
replays of a CUDA graph holding ``--launches`` launches of the library's
entry point on one buffer of bf16 logits (``randn * 2``) and a bf16 bias,
sliced to M rows, per launch: ``kernels.timing``'s graph-replay timer, the
one ``contracts bench`` uses, with the outputs allocated once outside it.
The launch shapes of one M are timed back to back, so a drift of the clocks
moves them together.

A batch takes as long as its slowest token, and a few rows of random data
take a slow path (about 2 % of ``randn * 2`` rows at 896/16 hold more
candidates than the block shape's fast path takes): where the first such row
falls in one buffer moves the block shape's curve by half a microsecond, so
switch points read off one buffer fit that buffer. ``--seeds N`` sweeps N
buffers (seeds ``--seed`` .. ``--seed + N - 1``; each M takes the first M rows
of each) and the analysis picks from the mean over them: the time a batch of
M random rows takes on average.

The analysis smooths each curve by a running median over 9 batch sizes (the
noise of one point is a few per cent), then picks per (experts, topk), both
contracts together, the two switch points (first M of the warp shape, first M
of the dense shape) that minimise the summed excess of the chosen shape over the
best shape at each M. It writes ``sweep.csv``, ``switch_points.json`` (the
points, the excess, and the monotonicity of the chosen curve: the largest drop
below the maximum of all smaller M, in per cent) and ``sweep.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SHAPE_RANGES = {"block": (1, 1024), "warp": (1, 1 << 30), "dense": (256, 1 << 30)}
SMOOTH = 9


def sweep(out: Path, *, max_m: int, contracts: list[str], launches: int, replays: int, seed: int, log, seeds: int = 1,
          shapes: list[tuple[int, int]] | None = None) -> Path:
    import ctypes  # noqa: F401 -- the entry point is a ctypes function

    import torch

    from . import CONTRACTS, KIMI_SHAPES, LAUNCH_SHAPES, _DTYPE_CODES, _LAUNCH_SHAPES, _RENORMALIZE, library

    path = out / "sweep.csv"
    rows_written = 0
    with path.open("w") as f:
        f.write("contract,experts,topk,seed,m,launch_shape,us\n")
        for contract in contracts:
            lib = library(contract=contract)
            swept = [(shape, seed + k) for shape in sorted(shapes or KIMI_SHAPES, reverse=True) for k in range(seeds)]
            for (experts, topk), draw in swept:
                g = torch.Generator().manual_seed(draw)
                scores = (torch.randn(max_m, experts, generator=g) * 2).to(torch.bfloat16).cuda()
                bias = (torch.randn(experts, generator=g) * 0.05).to(torch.bfloat16).cuda()
                weights = torch.empty((max_m, topk), dtype=torch.float32, device="cuda")
                ids = torch.empty((max_m, topk), dtype=torch.int32, device="cuda")
                start_t = time.time()
                for m in range(1, max_m + 1):
                    for shape in LAUNCH_SHAPES:
                        lo, hi = SHAPE_RANGES[shape]
                        if not lo <= m <= hi:
                            continue
                        flags = _RENORMALIZE | _LAUNCH_SHAPES[shape]

                        def call():
                            rc = lib.route(scores.data_ptr(), _DTYPE_CODES["bfloat16"], experts, bias.data_ptr(),
                                           _DTYPE_CODES["bfloat16"], m, experts, topk, flags, 2.5, weights.data_ptr(),
                                           ids.data_ptr(), torch.cuda.current_stream().cuda_stream)  # fmt: skip
                            if rc != 0:
                                raise RuntimeError(f"{CONTRACTS[contract][2]} returned {rc}")

                        us = _time_point(call, launches, replays)
                        f.write(f"{contract},{experts},{topk},{draw},{m},{shape},{us:.4f}\n")
                        rows_written += 1
                log(f"{contract} {experts}/{topk} seed {draw}: M 1..{max_m} in {time.time() - start_t:.0f} s")
                f.flush()
                scores = bias = weights = ids = None  # the device memory freed before the next shape's
    log(f"{rows_written} points in {path}")
    return path


def _time_point(call, launches: int, replays: int) -> float:
    """Median us per launch of ``call`` by the shared graph timer. One warm-up call and one untimed replay (the
    sweep times thousands of points, and the shapes of one M are timed back to back); a launch that cannot be
    captured is an error here, never an eager figure in a table of graph replays."""
    import statistics

    from ..timing import time_cuda

    timing = time_cuda(call, launches, replays, warmup=1, warmup_calls=1, eager_fallback=False)
    return statistics.median(timing.samples_us)


# ---------------------------------------------------------------- the analysis (CPU)


def analyse(csv: Path, out: Path) -> dict:
    import numpy as np
    import pandas as pd

    from . import LAUNCH_SHAPES

    data = pd.read_csv(csv)
    if "seed" not in data:  # a sweep of one buffer (before --seeds)
        data["seed"] = 0
    seeds = sorted(int(x) for x in data["seed"].unique())
    # The mean over the buffers, per point: the time a batch of M random rows takes on average.
    data = data.groupby(["contract", "experts", "topk", "m", "launch_shape"], as_index=False)["us"].mean()
    result = {"source": csv.name, "seeds": seeds, "smoothing": f"mean over {len(seeds)} buffer(s), then a running median "
              f"over {SMOOTH} batch sizes", "shapes": {}}  # fmt: skip
    for (experts, topk), part in data.groupby(["experts", "topk"]):
        ms = np.arange(1, int(part["m"].max()) + 1)
        # Per contract and launch shape, the smoothed curve over every M (NaN outside the shape's range).
        curves = {}
        for contract, cpart in part.groupby("contract"):
            table = cpart.pivot_table(index="m", columns="launch_shape", values="us").reindex(ms)
            curves[contract] = {s: table[s].rolling(SMOOTH, center=True, min_periods=1).median().to_numpy()
                                if s in table else np.full(len(ms), np.nan) for s in LAUNCH_SHAPES}  # fmt: skip
        best = {c: np.nanmin(np.vstack([v[s] for s in LAUNCH_SHAPES]), axis=0) for c, v in curves.items()}
        # excess[s][i]: summed over contracts, the chosen shape's excess over the best at M = ms[i] (inf off range).
        excess = {s: sum(np.nan_to_num(v[s] - best[c], nan=np.inf) for c, v in curves.items()) for s in LAUNCH_SHAPES}
        prefix = {s: np.concatenate([[0.0], np.cumsum(excess[s])]) for s in ("block", "warp")}
        suffix = np.concatenate([np.cumsum(excess["dense"][::-1])[::-1], [0.0]])  # suffix[k]: dense on M > k
        n, choice = len(ms), None
        # first_warp = w, first_dense = d (1-based M; w <= d <= n + 1 where n + 1 means never).
        for w in range(1, n + 2):
            block_cost = prefix["block"][w - 1]
            if not np.isfinite(block_cost):
                break
            warp_part = prefix["warp"][w - 1:] - prefix["warp"][w - 1]  # cost of warp on [w, d) for d = w .. n+1
            dense_tail = suffix[w - 1:]  # cost of dense on [d, n]
            total = block_cost + warp_part + dense_tail
            i = int(np.argmin(total))
            if choice is None or total[i] < choice[0] - 1e-9:
                choice = (float(total[i]), w, w + i)
        _, first_warp, first_dense = choice
        chosen = {c: np.where(ms < first_warp, v["block"], np.where(ms < first_dense, v["warp"], v["dense"]))
                  for c, v in curves.items()}  # fmt: skip
        raw = {}
        for contract, cpart in part.groupby("contract"):
            table = cpart.pivot_table(index="m", columns="launch_shape", values="us").reindex(ms)
            pick = np.where(ms < first_warp, "block", np.where(ms < first_dense, "warp", "dense"))
            raw[contract] = np.array([table.at[m, s] if s in table else np.nan for m, s in zip(ms, pick)])
        key = f"{experts}/{topk}"
        result["shapes"][key] = {
            "first_warp_m": int(first_warp),
            "first_dense_m": int(first_dense),
            "excess_us_summed": round(choice[0], 3),
            "contracts": {
                c: {
                    "monotone_drop_pct_smoothed": _largest_drop(chosen[c]),
                    "monotone_drop_pct_raw": _largest_drop(raw[c]),
                    "us_at": {str(m): round(float(chosen[c][m - 1]), 3) for m in (1, 64, 128, 256, 512, 1024, 1536, 2048, 4096)
                              if m <= n},
                    "mean_excess_over_best_pct": round(float(np.nanmean(chosen[c] / best[c] - 1) * 100), 2),
                }
                for c in curves
            },
        }
        _plot(out / f"sweep-{experts}-{topk}.png", ms, curves, chosen, key, first_warp, first_dense)
    (out / "switch_points.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def _largest_drop(curve) -> float:
    """The largest fall, in per cent, of the curve below the maximum it reached at any smaller M."""
    import numpy as np

    running = np.fmax.accumulate(np.nan_to_num(curve, nan=-np.inf))
    valid = np.isfinite(curve) & np.isfinite(running) & (running > 0)
    drops = np.where(valid, 1 - curve / np.where(running > 0, running, 1), 0)
    return round(float(max(0.0, drops.max())) * 100, 2)


def _plot(path: Path, ms, curves, chosen, key, first_warp, first_dense) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(7 * len(curves), 4.5), dpi=100, squeeze=False)
    for ax, (contract, v) in zip(axes[0], sorted(curves.items())):
        for shape, values in v.items():
            ax.plot(ms, values, lw=0.8, label=f"{shape} (smoothed)")
        ax.plot(ms, chosen[contract], lw=2, color="black", alpha=0.5, label="chosen")
        for m in (first_warp, first_dense):
            if m <= ms[-1]:
                ax.axvline(m, color="0.5", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("M (rows per launch)")
        ax.set_ylabel("us per launch (CUDA graph replay)")
        ax.set_title(f"radix4 {key}, contract {contract}: warp from M={first_warp}, dense from M={first_dense}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m kernels.radix4.shape_sweep", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--analyse", type=Path, help="a sweep.csv to analyse instead of sweeping")
    ap.add_argument("--max-m", type=int, default=4096)
    ap.add_argument("--contracts", default="aiter,serial")
    ap.add_argument("--launches", type=int, default=20)
    ap.add_argument("--replays", type=int, default=7)
    ap.add_argument("--seed", type=int, default=0, help="the first buffer's seed (default 0)")
    ap.add_argument("--seeds", type=int, default=1, help="buffers of random rows to sweep, seeds --seed.. (default 1)")
    ap.add_argument("--shapes", help="comma-separated E/K to sweep, e.g. 896/16 (default every shape radix4 switches)")
    args = ap.parse_args(argv)
    if args.max_m < 1 or args.launches < 1 or args.replays < 1 or args.seeds < 1:
        ap.error("--max-m, --launches, --replays and --seeds must be >= 1")
    shapes = None
    if args.shapes:
        try:
            shapes = [tuple(int(v) for v in s.split("/")) for s in args.shapes.split(",")]
        except ValueError:
            ap.error(f"--shapes {args.shapes}: write each as E/K, e.g. --shapes 896/16,384/8")
        from . import KIMI_SHAPES

        unknown = [f"{e}/{k}" for e, k in shapes if (e, k) not in KIMI_SHAPES]
        if unknown:
            ap.error(f"--shapes {','.join(unknown)}: radix4 switches launch shapes only at "
                     f"{', '.join(f'{e}/{k}' for e, k in sorted(KIMI_SHAPES))}")
    if args.analyse is not None and not args.analyse.is_file():
        ap.error(f"--analyse {args.analyse}: no such file; pass the sweep.csv(.gz) a GPU run wrote")
    args.out.mkdir(parents=True, exist_ok=True)
    log = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    csv = args.analyse
    if csv is None:
        csv = sweep(args.out, max_m=args.max_m, contracts=args.contracts.split(","), launches=args.launches,
                    replays=args.replays, seed=args.seed, seeds=args.seeds, shapes=shapes, log=log)  # fmt: skip
    result = analyse(csv, args.out)
    for key, r in result["shapes"].items():
        drops = ", ".join(f"{c} drop {v['monotone_drop_pct_smoothed']}% (raw {v['monotone_drop_pct_raw']}%)"
                          for c, v in r["contracts"].items())  # fmt: skip
        print(f"{key}: warp from M={r['first_warp_m']}, dense from M={r['first_dense_m']}; {drops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
