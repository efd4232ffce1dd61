"""One radix4 launch per configuration, for a profiler to catch. Needs a GPU.

Each configuration (rows, launch shape, row kind) is launched a few times
unprofiled, then once between ``cudaProfilerStart`` / ``cudaProfilerStop``,
so ``ncu --profile-from-start off`` sees exactly one launch of each:

    ncu --profile-from-start off --clock-control none --set full -o prof \\
        python kernels/radix4/lab/radix4_profile.py

Row kinds: ``random`` (bf16 logits randn * 2, fp32 bias randn * 0.05, as in
contracts.bench) and ``all-equal`` (zeros: every key ties, the k first in tie
priority win without a selection step). Run from the repository root.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # radix4_gpu_check
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import kernels.radix4 as radix4  # noqa: E402
from radix4_gpu_check import route_with  # noqa: E402

DEFAULT_CONFIGS = "1:block:random,1024:warp:random,1024:warp:all-equal,1024:block:random"


def parse_configs(text: str) -> list[tuple[int, str, str]]:
    out = []
    for item in text.split(","):
        try:
            m, shape, kind = item.split(":")
            out.append((int(m), shape, kind))
        except ValueError:
            raise SystemExit(f"--configs: {item!r} is not ROWS:SHAPE:KIND, e.g. 1024:warp:random") from None
        if shape not in ("block", "warp", "dense") or kind not in ("random", "all-equal"):
            raise SystemExit(f"--configs: {item!r}: SHAPE is block, warp or dense, KIND is random or all-equal")
    return out


def inputs(m: int, kind: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1_000_003 + m)
    if kind == "all-equal":
        return torch.zeros(m, 896, dtype=torch.bfloat16, device=device), torch.zeros(896, device=device)
    scores = (torch.randn(m, 896, generator=g) * 2).bfloat16().to(device)
    return scores, (torch.randn(896, generator=g) * 0.05).to(device)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"ROWS:SHAPE:KIND,... (default {DEFAULT_CONFIGS})")
    ap.add_argument("--defines", default="", help="comma-separated defines of the build to profile (tuning variants)")
    ap.add_argument("--contract", default="aiter", choices=["aiter", "serial"])
    args = ap.parse_args(argv)
    lib = radix4.library(defines=tuple(d for d in args.defines.split(",") if d), contract=args.contract)
    dev = torch.device("cuda")
    for m, shape, kind in parse_configs(args.configs):
        scores, bias = inputs(m, kind, dev)
        weights = torch.empty(m, 16, device=dev)
        ids = torch.empty(m, 16, dtype=torch.int32, device=dev)
        flag = {"block": 2, "warp": 4, "dense": 16}[shape]
        for _ in range(3):
            route_with(lib, scores, bias, weights, ids, flag)
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        route_with(lib, scores, bias, weights, ids, flag)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()
        print(f"profiled M={m} shape={shape} rows={kind}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
