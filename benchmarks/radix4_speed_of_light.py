"""How close radix4 is to what its work allows: speed-of-light probes timed beside radix4 (issue 37).

The probes (kernels/radix4/lab/radix4_speed_of_light.cu) are laid out and launched as radix4's warp-per-token
shapes and each does a strict part of a router's work a token: ``read`` (every logit and bias read, an add and a max
a value), ``keys`` (+ every value's approximate key, as radix4's dense kernel), ``bound`` (+ the k-th largest lane
maximum and the count of keys reaching it), ``write`` (+ k weights and ids written); ``write_16w`` is ``write`` held
to sixteen warps an SM (dynamic shared memory leaves room for four blocks), radix4's dense kernel's occupancy;
``read_block`` is ``read`` with a block a token, a vector of four a thread (the shortest chain a row's read has).
The PDL columns launch the probes and radix4 with programmatic dependent launch. A router that does at least a
probe's work cannot, laid out the same way, go below that probe's time above the launch floor. ``read`` and ``keys``
are such floors for every router (each value read, each value keyed); ``bound`` and ``write`` are one plain way of
those steps, not the fastest (radix4's own bound step is cheaper), so the gap between ``keys`` and radix4 is what its
selection and write cost, and ``bound`` / ``write`` only show how a plain bound adds to it.

Timed with contracts.bench's timer (``kernels.timing.time_cuda``: a CUDA graph of 20 launches, a spin ahead of
each sample, the median of 25 replays), bf16 logits (randn * 2) and bias (randn * 0.05), outputs allocated once,
one buffer not rotated (``--rotate R`` cycles R buffers, launch by launch, to read past the L2). The floors, timed
before each M's columns: ``torch.cuda._sleep(0)`` (contracts.bench's floor) and an empty kernel with the probes'
PDL hooks, launched plain and with PDL. radix4 and radix4 PDL run their default launch shape for each M.

Before timing, each probe's answer is checked against torch (``read``'s maximum, ``bound``'s count at least k):
a probe that skipped its work would time nothing.

Run from the repository root on a CUDA GPU (sm_90 for the PDL columns) with nvcc:
``python benchmarks/radix4_speed_of_light.py --out DIR [--m 1,1024,4096] [--shapes 896/16,384/8]``. Writes
``speed_of_light.json`` and ``speed_of_light.txt`` under DIR. Exit code 0 when every probe's check passes.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

import kernels.radix4 as radix4  # noqa: E402
from kernels._build import compile_shared, load_library  # noqa: E402
from kernels.timing import time_cuda  # noqa: E402
from radix4_kernels_bench import FLAG_PDL, FLAG_RENORM, Router  # noqa: E402

SOURCE = ROOT / "kernels" / "radix4" / "lab" / "radix4_speed_of_light.cu"
STAGES = ("read", "keys", "bound", "write")
READ_IN_A_BLOCK = 4  # the probe's stage number of the read with a block a token
LAUNCHES, REPLAYS, WARMUP = 20, 25, 1
DEFAULT_M = (1, 8, 64, 256, 1024, 2048, 4096)


def log(msg: str) -> None:
    print(msg, flush=True)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of integers; e.g. --m 1,1024,4096") from None
    if any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every batch size must be at least 1; e.g. --m 1,1024,4096")
    return values


def _shapes(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for part in text.split(","):
        try:
            e, k = (int(v) for v in part.split("/"))
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not EXPERTS/TOPK; e.g. --shapes 896/16,384/8") from None
        if (e, k) not in ((896, 16), (384, 8), (224, 16)):
            raise argparse.ArgumentTypeError(f"{part!r}: the probes serve 896/16, 384/8 and 224/16")
        out.append((e, k))
    return tuple(out)


class Probes:
    """The probe library's entry points, launched on the current stream."""

    def __init__(self, lib: ctypes.CDLL):
        p, i, i64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64
        self.lib = lib
        lib.radix4_speed_of_light.argtypes = [i, i, i, p, i64, p, i, p, p, p, p, i, i]
        lib.radix4_speed_of_light.restype = i
        lib.radix4_speed_of_light_empty.argtypes, lib.radix4_speed_of_light_empty.restype = [p, i], i

    def run(self, stage: int, scores, bias, topk: int, out, weights, ids, pdl: bool, four_blocks: bool = False) -> None:
        rc = self.lib.radix4_speed_of_light(stage, scores.shape[1], topk, scores.data_ptr(), scores.stride(0), bias.data_ptr(),
                                            scores.shape[0], out.data_ptr(), weights.data_ptr(), ids.data_ptr(),
                                            torch.cuda.current_stream().cuda_stream, int(pdl), int(four_blocks))  # fmt: skip
        if rc:
            raise RuntimeError(f"probe {STAGES[stage]} returned {rc}")

    def empty(self, pdl: bool) -> None:
        rc = self.lib.radix4_speed_of_light_empty(torch.cuda.current_stream().cuda_stream, int(pdl))
        if rc:
            raise RuntimeError(f"empty kernel returned {rc}")


def inputs(M: int, E: int, rotate: int, device) -> tuple[list[torch.Tensor], torch.Tensor]:
    g = torch.Generator(device="cpu").manual_seed(1_000_003 + M * 7 + E)
    scores = [(torch.randn(M, E, generator=g) * 2).bfloat16().to(device) for _ in range(rotate)]
    bias = (torch.randn(E, generator=g) * 0.05).bfloat16().to(device)
    return scores, bias


def check(probes: Probes, E: int, K: int, device) -> list[dict]:
    """Each probe's answer against torch on 4,096 rows: a probe that skipped its work would time nothing."""
    (scores,), bias = inputs(4096, E, 1, device)
    out = torch.empty(4096, device=device)
    w = torch.empty(4096, K, device=device)
    ids = torch.empty(4096, K, dtype=torch.int32, device=device)
    results = []
    probes.run(0, scores, bias, K, out, w, ids, False)
    want = (scores.float() + bias.float()).amax(1)
    results.append({"probe": "read", "shape": f"{E}/{K}", "passed": bool(torch.equal(out, want))})
    out.zero_()
    probes.run(READ_IN_A_BLOCK, scores, bias, K, out, w, ids, False)
    results.append({"probe": "read_block", "shape": f"{E}/{K}", "passed": bool(torch.equal(out, want))})
    for stage in (1, 2):
        probes.run(stage, scores, bias, K, out, w, ids, False)
        torch.cuda.synchronize()
        if stage == 1:  # tanh.approx is within 2^-10 of tanh (the PTX manual); 2^-8 leaves room for the sums
            exact = (torch.tanh(scores.float() * 0.5) + 2 * bias.float()).amax(1)
            passed = bool(((out - exact).abs() <= 2.0**-8).all())
        else:
            passed = bool(((out >= K) & (out <= E)).all())
        results.append({"probe": STAGES[stage], "shape": f"{E}/{K}", "passed": passed})
    for r in results:
        log(f"check {r['probe']} {r['shape']}: {'pass' if r['passed'] else 'FAIL'}")
    return results


def median_us(fn) -> float:
    timing = time_cuda(fn, LAUNCHES, REPLAYS, WARMUP, eager_fallback=False)
    return round(statistics.median(timing.samples_us), 3)


def cycling(fn, buffers: list[torch.Tensor]):
    """``fn(buffer)`` on the next buffer at each call (captured in order into the graph)."""
    state = {"i": 0}

    def call():
        buf = buffers[state["i"] % len(buffers)]
        state["i"] += 1
        fn(buf)

    return call


def time_shape(probes: Probes, r4: Router, E: int, K: int, ms, rotate: int, device) -> list[dict]:
    rows = []
    for M in ms:
        buffers, bias = inputs(M, E, rotate, device)
        out = torch.empty(M, device=device)
        w = torch.empty(M, K, device=device)
        ids = torch.empty(M, K, dtype=torch.int32, device=device)
        row = {"shape": f"{E}/{K}", "M": M}
        # the floors first, in the state the columns run in (after other kernels)
        row["floor"] = median_us(lambda: torch.cuda._sleep(0))
        row["empty"] = median_us(lambda: probes.empty(False))
        row["empty_pdl"] = median_us(lambda: probes.empty(True))
        for stage, name in enumerate(STAGES):
            row[name] = median_us(cycling(lambda s, st=stage: probes.run(st, s, bias, K, out, w, ids, False), buffers))
        for stage, name in ((0, "read"), (1, "keys"), (3, "write")):
            row[f"{name}_pdl"] = median_us(cycling(lambda s, st=stage: probes.run(st, s, bias, K, out, w, ids, True), buffers))
        row["read_block"] = median_us(cycling(lambda s: probes.run(READ_IN_A_BLOCK, s, bias, K, out, w, ids, False), buffers))
        row["read_block_pdl"] = median_us(cycling(lambda s: probes.run(READ_IN_A_BLOCK, s, bias, K, out, w, ids, True), buffers))
        row["write_16w"] = median_us(cycling(lambda s: probes.run(3, s, bias, K, out, w, ids, False, True), buffers))
        row["radix4"] = median_us(cycling(lambda s: r4(s, bias, K, w, ids, FLAG_RENORM), buffers))
        row["radix4_pdl"] = median_us(cycling(lambda s: r4(s, bias, K, w, ids, FLAG_RENORM | FLAG_PDL), buffers))
        rows.append(row)
        log("  " + " ".join(f"{k}={v}" for k, v in row.items()))
    return rows


COLUMNS = ("floor", "empty", "empty_pdl", *STAGES, "write_16w", "read_block", "radix4",
           "read_pdl", "keys_pdl", "write_pdl", "read_block_pdl", "radix4_pdl")  # fmt: skip
PDL_COLUMNS = ("read_pdl", "keys_pdl", "write_pdl", "read_block_pdl", "radix4_pdl")


def render(rows: list[dict], header: str) -> str:
    def line(r, cells):
        return f"{r['shape']:>7} {r['M']:>5} " + "".join(f"{c:>15.2f}" for c in cells)

    def head(names):
        return f"{'shape':>7} {'M':>5} " + "".join(f"{c:>15}" for c in names)

    plain = (*STAGES, "write_16w", "read_block", "radix4")
    lines = [header, "", "us per launch:", head(COLUMNS), *(line(r, [r[c] for c in COLUMNS]) for r in rows)]
    lines += ["", "above the floor (torch.cuda._sleep(0), timed before the same M); after_keys = radix4 - keys:",
              head((*plain, "after_keys")), *(line(r, [*(r[c] - r["floor"] for c in plain), r["radix4"] - r["keys"]]) for r in rows)]
    lines += ["", "with PDL, above the same floor and (after the slash) above the empty kernel launched with PDL:",
              f"{'shape':>7} {'M':>5} " + "".join(f"{c:>16}" for c in PDL_COLUMNS)]
    for r in rows:
        pairs = (f"{r[c] - r['floor']:.2f} / {r[c] - r['empty_pdl']:.2f}" for c in PDL_COLUMNS)
        lines.append(f"{r['shape']:>7} {r['M']:>5} " + "".join(f"{p:>16}" for p in pairs))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="folder for speed_of_light.json and .txt")
    ap.add_argument("--m", type=_int_list, default=DEFAULT_M, help="batch sizes (default 1,8,64,256,1024,2048,4096)")
    ap.add_argument("--shapes", type=_shapes, default=((896, 16), (384, 8)), help="EXPERTS/TOPK list (default 896/16,384/8)")
    ap.add_argument("--rotate", type=int, default=1, help="logits buffers cycled launch by launch (default 1)")
    args = ap.parse_args(argv)
    if args.rotate < 1:
        ap.error("--rotate must be at least 1; e.g. --rotate 8")
    if not torch.cuda.is_available():
        ap.error("needs a CUDA GPU (run it on the device machine); nothing was timed")
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    probes = Probes(load_library(compile_shared(SOURCE, compiler="nvcc", flags=["-O3", "-shared", "-Xcompiler", "-fPIC", f"-arch={arch}"])))
    r4 = Router(load_library(radix4.build(arch=arch)), "radix4_route")
    report = {"device": torch.cuda.get_device_name(), "arch": arch, "torch": torch.__version__, "rotate": args.rotate,
              "timer": f"kernels.timing.time_cuda: {LAUNCHES} launches a graph, median of {REPLAYS} replays"}  # fmt: skip
    log(json.dumps(report))
    checks = [c for E, K in args.shapes for c in check(probes, E, K, device)]
    rows = [r for E, K in args.shapes for r in time_shape(probes, r4, E, K, args.m, args.rotate, device)]
    report.update(checks=checks, rows=rows)
    text = render(rows, f"{report['device']} ({arch}), torch {report['torch']}, rotate {args.rotate}; {report['timer']}")
    log(text)
    (args.out / "speed_of_light.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "speed_of_light.txt").write_text(text + "\n")
    return 0 if all(c["passed"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
