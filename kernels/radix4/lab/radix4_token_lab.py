"""Where a batch's time goes: the step clocks of every token of one launch. Needs a GPU.

radix4_lab.py times the steps of one token; a batch of M tokens takes longer
than one token for reasons that token cannot show: tokens that share an SM
sub-partition, the order the blocks start in, the slowest token's path. A
``RADIX4_LAB_TOKENS`` build (radix4_router.h) records, for every token, the
SM clock at the six step points (0 entry, 1 keys, 2 bound, 3 copy, 4 placed,
5 written), the global timer (ns, one clock for all SMs) at entry and end,
its SM and its warp slot.

For each M the bench's own inputs and timing (contracts.run.bench: logits
randn * 2, bias randn * 0.05, seed 0; a CUDA graph of 20 launches,
replayed) route in the launch shape radix4 picks for M (or ``--flags``),
and the clocks of the last launch are read. Printed per M:

- the launch (ns, global timer): first entry to last end, and how late the
  last token starts;
- the token (cycles, entry to written): min / median / p90 / max, and the
  median of each step;
- the slowest tokens: their steps, SM, how many tokens their SM ran, and C,
  the candidates the bound lets through (kernels/radix4/lab/radix4_bound_sim.py),
  which decides the rank step's path (C <= 32: one per lane);
- ``--per-sm``: each SM's tokens, first start and last end.

Run from the repository root: ``python kernels/radix4/lab/radix4_token_lab.py [--m 64,1024]``.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # radix4_gpu_check
sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import kernels.radix4 as radix4  # noqa: E402
import oracle  # noqa: E402
from contracts.commands.bench import _m_list as bench_m_list  # noqa: E402
from contracts.run.bench import make_inputs, time_cuda  # noqa: E402
from radix4_bound_sim import candidate_counts  # noqa: E402
from radix4_gpu_check import rank_keys, route_with  # noqa: E402

STEPS = ("keys", "bound", "copy", "rank", "write")
BLOCK_PER_TOKEN_MAX_ROWS = 256  # radix4_entry.h's default: above it a warp routes each token
LAB_TOKENS = 8192  # kLabTokens in radix4_router.h


def _m_list(text: str) -> list[int]:
    """The bench's --m parser, and the lab build's bound."""
    ms = bench_m_list(text)
    if max(ms) > LAB_TOKENS:
        raise argparse.ArgumentTypeError(f"--m {text!r}: every M must be <= {LAB_TOKENS} (the tokens the lab build records)")
    return ms


def token_clocks(lib, tokens: int) -> np.ndarray:
    words = lib.radix4_lab_token_words()
    out = (ctypes.c_ulonglong * (words * tokens))()
    rc = lib.radix4_lab_tokens(out, tokens)
    if rc:
        raise RuntimeError(f"radix4_lab_tokens returned {rc}")
    return np.frombuffer(out, dtype=np.uint64).reshape(tokens, words).astype(np.int64)


def candidates_per_token(scores: torch.Tensor, bias: torch.Tensor, threads: int, k: int) -> np.ndarray:
    """C under the kernel's bound, from the oracle's ranking values of the aiter contract."""
    _, ranking = oracle.ranking_values(scores.cpu(), bias.cpu(), "aiter")
    keys = rank_keys(ranking).numpy().astype(np.int64)
    ours, _ = candidate_counts(keys, threads=threads, lanes=32, k=k)
    return ours


def describe(M: int, clocks: np.ndarray, cands: np.ndarray, us: float, per_sm: bool) -> None:
    entry, end = clocks[:, 6], clocks[:, 7]
    total = clocks[:, 5] - clocks[:, 0]
    steps = np.diff(clocks[:, :6], axis=1)
    reached = (clocks[:, :6] != 0).all(axis=1)
    sm = clocks[:, 8]
    t0 = entry.min()
    print(f"\nM = {M}: {us:.2f} us per launch (graph replay); tokens {len(clocks)}, SMs {len(np.unique(sm))}, "
          f"tokens per SM {np.bincount(sm).max()} at most; C > 32 for {int((cands > 32).sum())} tokens")  # fmt: skip
    print(f"  launch (global timer): first entry to last end {end.max() - t0} ns; last entry {entry.max() - t0} ns "
          f"after the first; median entry {np.median(entry - t0):.0f} ns, median end {np.median(end - t0):.0f} ns")  # fmt: skip
    if not reached.all():
        print(f"  {int((~reached).sum())} tokens missed a step stamp (the radix path's other threads): left out below")
    t, s = total[reached], steps[reached]
    q = np.percentile(t, [0, 50, 90, 100])
    print(f"  token cycles, entry to written: min {q[0]:.0f}  median {q[1]:.0f}  p90 {q[2]:.0f}  max {q[3]:.0f}")
    print("  median step cycles: " + "  ".join(f"{n} {np.median(s[:, i]):.0f}" for i, n in enumerate(STEPS)))
    late = np.argsort(end)[::-1][:6]
    print("  last to end:   token  SM  on SM  C   entry ns  end ns  cycles  " + "  ".join(f"{n:>6}" for n in STEPS))
    counts = np.bincount(sm)
    for i in late:
        print(f"               {i:6d} {sm[i]:3d} {counts[sm[i]]:6d} {cands[i]:3d} {entry[i] - t0:9d} {end[i] - t0:7d} "
              f"{total[i]:7d}  " + "  ".join(f"{v:6d}" for v in steps[i]))  # fmt: skip
    slow = np.argsort(total)[::-1][:4]
    print("  slowest tokens: " + ", ".join(f"#{i} {total[i]} cycles (C {cands[i]}, SM {sm[i]})" for i in slow))
    if per_sm:
        for s_id in np.unique(sm):
            mine = sm == s_id
            print(f"    SM {s_id:3d}: {int(mine.sum()):3d} tokens, entries {entry[mine].min() - t0:6d}..{entry[mine].max() - t0:6d} ns, "
                  f"last end {end[mine].max() - t0:6d} ns")  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--m", type=_m_list, default=[1, 64, 256, 1024, 4096], metavar="M1,M2,...")
    ap.add_argument("--experts", type=int, default=896)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--flags", type=int, default=0,
                    help="launch-shape flags (radix4_entry.h: 2 block per token, 4 warp per token, 16 dense, | 8 PDL); 0 lets radix4 pick")  # fmt: skip
    ap.add_argument("--defines", default="", help="comma-separated extra defines, e.g. RADIX4_TOKENS_PER_BLOCK=2")
    ap.add_argument("--per-sm", action="store_true", help="also print each SM's tokens and times")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("radix4_token_lab.py needs a CUDA GPU (the lab build records GPU clocks)", file=sys.stderr)
        return 2
    extra = tuple(d for d in args.defines.split(",") if d)
    lib = radix4.library(defines=("RADIX4_LAB_TOKENS", *extra))
    lib.radix4_lab_tokens.argtypes, lib.radix4_lab_tokens.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_int
    lib.radix4_lab_tokens_reset.argtypes, lib.radix4_lab_tokens_reset.restype = [], ctypes.c_int
    lib.radix4_lab_token_words.argtypes, lib.radix4_lab_token_words.restype = [], ctypes.c_int
    dev = torch.device("cuda")
    print(f"every token's step clocks, {torch.cuda.get_device_properties(0).name}, {args.experts}/{args.topk}, "
          f"bf16 logits and bias (the bench's inputs), flags {args.flags}, defines {list(extra)}")  # fmt: skip
    for M in args.m:
        inputs = make_inputs(M, experts=args.experts, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cuda",
                             seed=0, rotate=1)  # fmt: skip
        scores, bias = inputs[0][0], inputs[1]
        weights = torch.empty(M, args.topk, device=dev)
        ids = torch.empty(M, args.topk, dtype=torch.int32, device=dev)
        # The bench's own timing (a graph of 20 launches, replayed); every
        # launch writes every token's clocks, so the last one's remain.
        assert lib.radix4_lab_tokens_reset() == 0
        timing = time_cuda(lambda: route_with(lib, scores, bias, weights, ids, args.flags), 20, 50, 3)
        us = float(np.median(timing.samples_us))
        clocks = token_clocks(lib, M)
        block = (args.flags & 2) or (not (args.flags & (4 | 16)) and M <= BLOCK_PER_TOKEN_MAX_ROWS)
        cands = candidates_per_token(scores, bias, 128 if block else 32, args.topk)
        describe(M, clocks, cands, us, args.per_sm)
    return 0


if __name__ == "__main__":
    sys.exit(main())
