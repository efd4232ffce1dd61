"""Oracle speed: the vectorized oracle against a plain argsort oracle, side by side.

The argsort oracle is the obvious way to write the aiter contract: reorder
the columns by tie priority, take a stable descending argsort of the rank
keys, keep the first k. Both run on the same inputs in one process; ids must
be bit-identical. Prints rows/s for each and the ratio.

    python benchmarks/oracle_speed.py [--rows 65536] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time

import torch

import oracle


def argsort_oracle(scores, bias, topk, contract="aiter"):
    c = oracle.get_contract(contract)
    sig, ranking = oracle.ranking_values(scores, bias, c)
    order = oracle.tie_order(scores.shape[1], c.tie_rule).to(scores.device)
    keys = oracle.rank_keys(ranking)[:, order]
    pos = torch.argsort(keys, dim=1, descending=True, stable=True)[:, :topk]
    return order[pos]


def best_of(fn, repeats, sync):
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--experts", type=int, default=896)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)

    gen = torch.Generator().manual_seed(0)
    scores = torch.randn(args.rows, args.experts, generator=gen).bfloat16().to(args.device)
    bias = (torch.randn(args.experts, generator=gen) * 0.01).to(args.device)
    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    fast_ids = oracle.route(scores, bias, args.topk)[1]
    slow_ids = argsort_oracle(scores, bias, args.topk)
    identical = torch.equal(fast_ids.long(), slow_ids)

    t_fast = best_of(lambda: oracle.route(scores, bias, args.topk), args.repeats, sync)
    t_slow = best_of(lambda: argsort_oracle(scores, bias, args.topk), args.repeats, sync)
    t_topk = best_of(lambda: torch.topk(scores.float(), args.topk, dim=1), args.repeats, sync)
    name = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"cpu x{torch.get_num_threads()} threads"
    print(f"device: {name}; M={args.rows} E={args.experts} k={args.topk} bf16 logits; torch {torch.__version__}")
    print(f"{'method':<28}{'rows/s':>14}")
    print(f"{'argsort oracle':<28}{args.rows / t_slow:>14,.0f}")
    print(f"{'oracle.route':<28}{args.rows / t_fast:>14,.0f}")
    print(f"{'torch.topk alone (ceiling)':<28}{args.rows / t_topk:>14,.0f}")
    print(f"ids bit-identical: {identical}")
    print(f"speed-up of oracle.route over the argsort oracle: {t_slow / t_fast:.2f}x")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
