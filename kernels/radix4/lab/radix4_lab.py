"""Where a radix4 launch spends its time: SM clocks at each step of one token. Needs a GPU.

A ``RADIX4_LAB`` build of the kernel (radix4_router.h, RADIX4_STAMP) records
clock64() of block 0, thread 0 at six points:

    0 entry   1 rank keys computed (loads, sigmoid, bias)
    2 max, min and the bound lo known (reductions, lane ranking, barrier)
    3 rank step's candidates copied   4 winners in output order
    5 outputs written

Each build and row kind is launched eagerly (--launches times, synchronized,
clocks reset before each) and from a CUDA graph of 20 launches (clocks of the
last); the table gives the median cycles between consecutive points and
entry-to-end. A step a row does not take shows ``-``. Together with the
per-launch time of radix4_gpu_check.py this separates in-kernel time from
launch overhead.

``--defines A=1,B=2`` adds compile-time switches to every build (the tuning
variants of radix4_router.h), ``--contract serial`` times the radix4-serial
library, ``--pdl`` launches with programmatic dependent launch (the step
clocks then start after the previous launch's tail).

Run from the repository root: ``python kernels/radix4/lab/radix4_lab.py``.
"""

from __future__ import annotations

import argparse
import ctypes
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))  # the repository root
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))  # radix4_gpu_check
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

import kernels.radix4 as radix4  # noqa: E402
from radix4_gpu_check import route_with  # noqa: E402

BUILDS = {  # name -> (defines, shape flag: 2 block per token, 4 warp per token)
    "block_4w": (("RADIX4_LAB",), 2),
    "block_4w_radix": (("RADIX4_LAB", "RADIX4_RANK_MAX=0"), 2),
    "warp": (("RADIX4_LAB",), 4),
}
STEPS = ("load+keys", "bound", "copy", "rank/place", "write")


def clocks(lib) -> list[int]:
    out = (ctypes.c_ulonglong * 8)()
    assert lib.radix4_lab_clocks(out) == 0
    return list(out)


def deltas(c: list[int]) -> list[float | None]:
    """Cycles of each step; None where the step's stamp was not reached."""
    got, prev, out = c[:6], c[0], []
    for v in got[1:]:
        if v == 0:
            out.append(None)
            continue
        out.append(float(v - prev))
        prev = v
    out.append(float(got[5] - got[0]))
    return out


def median_row(samples: list[list[float | None]]) -> list[str]:
    cols = []
    for i in range(len(samples[0])):
        vals = [s[i] for s in samples if s[i] is not None]
        cols.append(f"{statistics.median(vals):8.0f}" if vals else f"{'-':>8}")
    return cols


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--launches", type=int, default=40)
    ap.add_argument("--defines", default="", help="comma-separated extra defines for every build, e.g. RADIX4_EX2_FTZ=1")
    ap.add_argument("--contract", default="aiter", choices=["aiter", "serial"])
    ap.add_argument("--pdl", action="store_true")
    args = ap.parse_args(argv)
    extra = tuple(d for d in args.defines.split(",") if d)
    pdl = 8 if args.pdl else 0
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(5)
    rows = {
        "random": (torch.randn(1, 896, generator=g) * 2).bfloat16().to(dev),
        "all-equal": torch.zeros(1, 896, dtype=torch.bfloat16, device=dev),
    }
    bias = (torch.randn(896, generator=g) * 0.05).to(dev)
    weights = torch.empty(1, 16, device=dev)
    ids = torch.empty(1, 16, dtype=torch.int32, device=dev)
    print(f"SM clock cycles of one token (median), {torch.cuda.get_device_properties(0).name}, contract {args.contract}, "
          f"defines {list(extra)}{', PDL' if pdl else ''}")  # fmt: skip
    print(f"{'build':<16}{'row':<11}{'timer':<7}" + "".join(f"{s:>11}" for s in STEPS) + f"{'total':>9}")
    for name, (defines, flag) in BUILDS.items():
        lib = radix4.library(defines=(*defines, *extra), contract=args.contract)
        lib.radix4_lab_clocks.argtypes, lib.radix4_lab_clocks.restype = [ctypes.c_void_p], ctypes.c_int
        lib.radix4_lab_reset.argtypes, lib.radix4_lab_reset.restype = [], ctypes.c_int
        for kind, scores in rows.items():
            eager = []
            for _ in range(args.launches):
                assert lib.radix4_lab_reset() == 0
                route_with(lib, scores, bias, weights, ids, flag | pdl)
                torch.cuda.synchronize()
                eager.append(deltas(clocks(lib)))
            graph = torch.cuda.CUDAGraph()
            stream = torch.cuda.Stream()
            with torch.cuda.stream(stream):
                route_with(lib, scores, bias, weights, ids, flag | pdl)
            torch.cuda.synchronize()
            with torch.cuda.graph(graph):
                for _ in range(20):
                    route_with(lib, scores, bias, weights, ids, flag | pdl)
            replayed = []
            for _ in range(args.launches // 4 + 1):
                assert lib.radix4_lab_reset() == 0
                graph.replay()
                torch.cuda.synchronize()
                replayed.append(deltas(clocks(lib)))
            for timer, samples in (("eager", eager), ("graph", replayed)):
                cols = median_row(samples)
                print(f"{name:<16}{kind:<11}{timer:<7}" + "".join(f"{c:>11}" for c in cols[:-1]) + f"{cols[-1]:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
