"""GPU check and timing of the serial-contract kernels (kernels/serial). Needs a CUDA device and nvcc.

1. Builds both CUDA kernels (serial scan, block argmax) for the device.
2. Bit identity: on every case family (random bf16/fp32 logits with fp32/bf16
   bias, ties, saturated sigmoids, all-NaN and partly-NaN rows, -inf bias
   masks, rows where fewer than topk beat the -1e30 sentinel, +-inf logits,
   strided rows, Kimi-K2/pruned Kimi-K3 224/DeepSeek/small shapes) the serial scan and the block
   argmax must agree on every id and every weight bit.
3. Against the host build (g++, libm expf) on the same inputs: rows whose ids
   differ and a histogram of weight ULP distances (CUDA's expf and libm's may
   round differently; the contract fixes expf, not its last bit).
4. Timing: bf16 logits, fp32 bias, E=896, top-16, rs=2.5; each kernel captured
   LAUNCHES_PER_GRAPH times in a CUDA graph, the graph replayed REPLAYS times,
   us per launch = replay time / launches, median over replays. Inputs are
   not rotated (they fit in L2, as in a decode step).

Run from the repository root: ``python benchmarks/serial_gpu_check.py [--json out.json]``.
Exit code 0 when the two CUDA kernels are bit-identical on every case, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernels.serial import _native, block_argmax, scan  # noqa: E402

TIMING_ROWS = (1, 8, 64, 256, 1024, 1536, 4096)
LAUNCHES_PER_GRAPH = 20
REPLAYS = 25
CHECK_ROWS = 4096


# ---------------------------------------------------------------- cases


def case_families(device, rows=CHECK_ROWS, seed=0):
    """Yield (name, scores, bias, topk, renormalize, rs). scores may be a strided view."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def on(t):
        return t.to(device)

    M = rows
    yield "random bf16 / fp32 bias", on((randn(M, 896) * 2).bfloat16()), on(randn(896) * 0.05), 16, True, 2.5
    yield "random fp32 / fp32 bias", on(randn(M, 896) * 2), on(randn(896) * 0.05), 16, True, 1.0
    yield "random bf16 / bf16 bias", on((randn(M, 896) * 2).bfloat16()), on((randn(896) * 0.05).bfloat16()), 16, False, 2.5
    yield "random fp32 no renorm", on(randn(M, 896) * 4), on(randn(896) * 0.05), 16, False, 1.0
    yield "Kimi-K2 384/8", on((randn(M, 384) * 2).bfloat16()), on(randn(384) * 0.05), 8, True, 2.827
    yield "Kimi-K3 pruned 224/16", on((randn(M, 224) * 2).bfloat16()), on(randn(224) * 0.05), 16, True, 2.5
    yield "224/16 ties: few bf16 values", on((torch.randint(-3, 4, (M, 224), generator=g).float() * 0.5).bfloat16()), on(torch.zeros(224)), 16, True, 2.5
    yield "DeepSeek 256/8", on((randn(M, 256) * 2).bfloat16()), on(randn(256) * 0.05), 8, True, 2.5
    yield "small 16/16", on(randn(M, 16)), on(randn(16) * 0.05), 16, True, 2.5
    ties = torch.randint(-3, 4, (M, 896), generator=g).float() * 0.5
    yield "ties: few bf16 values", on(ties.bfloat16()), on(torch.zeros(896)), 16, True, 2.5
    sat = torch.randint(-3, 4, (M, 896), generator=g).float() * 40
    yield "ties: saturated sigmoid", on(sat.bfloat16()), on(torch.randint(0, 2, (896,), generator=g) * 0.25), 16, True, 2.5
    yield "ties: all-equal rows", on(torch.full((M, 896), 0.375).bfloat16()), on(torch.zeros(896)), 16, True, 2.5
    yield "all-NaN rows", on(torch.full((256, 896), float("nan")).bfloat16()), on(torch.zeros(896)), 16, True, 2.5
    part = randn(M, 896)
    part[torch.rand(M, 896, generator=g) < 0.3] = float("nan")
    yield "30% NaN logits", on(part), on(randn(896) * 0.05), 16, True, 2.5
    mask = randn(896) * 0.05
    mask[torch.rand(896, generator=g) < 0.9] = float("-inf")
    yield "-inf bias on 90% of experts", on((randn(M, 896) * 2).bfloat16()), on(mask), 16, True, 2.5
    few = randn(896) * 0.05
    few[7:] = -2e30
    yield "7 experts beat the sentinel", on((randn(M, 896) * 2).bfloat16()), on(few), 16, True, 2.5
    infs = randn(M, 896) * 2
    u = torch.rand(M, 896, generator=g)
    infs[u < 0.02] = float("inf")
    infs[u > 0.98] = float("-inf")
    yield "+-inf logits", on(infs), on(randn(896) * 0.05), 16, True, 2.5
    backing = on((randn(M, 4096) * 2).bfloat16())
    yield "strided rows [:, 1536:2432]", backing[:, 1536 : 1536 + 896], on(randn(896) * 0.05), 16, True, 2.5


# ---------------------------------------------------------------- comparison


def ulp_distance(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """ULP distance of fp32 tensors (0 where both are NaN, 2**40 where only one is)."""

    def ordered(x):
        i = x.contiguous().view(torch.int32).long()
        return torch.where(i < 0, -(i & 0x7FFFFFFF), i)

    d = (ordered(a) - ordered(b)).abs()
    both, one = a.isnan() & b.isnan(), a.isnan() ^ b.isnan()
    return torch.where(both, 0, torch.where(one, 2**40, d))


def compare(serial, block, host):
    """Counts for one case: serial vs block bits, serial (CUDA) vs host ULP."""
    (ws, is_), (wb, ib), (wh, ih) = serial, block, host
    ws_c, is_c = ws.cpu(), is_.cpu()
    rows = is_c.shape[0]
    same_row = (is_c == ib.cpu()).all(1) & (ws_c.view(torch.int32) == wb.cpu().view(torch.int32)).all(1)
    host_ids_row = (is_c == ih).all(1)
    ulps = ulp_distance(ws_c, wh)[host_ids_row]
    return {
        "rows": rows,
        "serial_vs_block_identical_rows": int(same_row.sum()),
        "host_same_ids_rows": int(host_ids_row.sum()),
        "host_weights_compared": int(ulps.numel()),
        "host_weight_ulp_0": int((ulps == 0).sum()),
        "host_weight_ulp_1": int((ulps == 1).sum()),
        "host_weight_ulp_2": int((ulps == 2).sum()),
        "host_weight_ulp_gt2": int((ulps > 2).sum()),
        "host_weight_ulp_max": int(ulps.max()) if ulps.numel() else 0,
    }


def run_checks(device):
    results = []
    for name, scores, bias, topk, renorm, rs in case_families(device):
        before = scores.clone(), bias.clone()
        serial = scan.route(scores, bias, topk, renorm, rs)
        block = block_argmax.route(scores, bias, topk, renorm, rs)
        torch.cuda.synchronize()
        host = scan.route(scores.cpu(), bias.cpu(), topk, renorm, rs)
        untouched = torch.equal(before[0].view(torch.int16 if scores.dtype == torch.bfloat16 else torch.int32),
                                scores.view(torch.int16 if scores.dtype == torch.bfloat16 else torch.int32)) and \
            torch.equal(before[1].float().nan_to_num(7.0), bias.float().nan_to_num(7.0))  # fmt: skip
        row = {"case": name, "E": scores.shape[1], "topk": topk, "inputs_untouched": bool(untouched)}
        row.update(compare(serial, block, host))
        results.append(row)
    return results


# ---------------------------------------------------------------- timing


def time_graph(fn, launches=LAUNCHES_PER_GRAPH, replays=REPLAYS) -> float:
    """Median us per launch of ``fn`` captured ``launches`` times in one CUDA graph (contracts.bench's timer)."""
    from kernels.timing import time_cuda

    return statistics.median(time_cuda(fn, launches, replays, warmup=1).samples_us)


def run_timing(device):
    g = torch.Generator(device="cpu").manual_seed(1)
    bias = (torch.randn(896, generator=g) * 0.05).to(device)
    table = []
    for M in TIMING_ROWS:
        scores = (torch.randn(M, 896, generator=g) * 2).bfloat16().to(device)
        row = {"M": M}
        for name, kernel in (("serial", scan), ("block_argmax", block_argmax)):
            row[name] = time_graph(lambda k=kernel: k.route(scores, bias, 16, True, 2.5))
        table.append(row)
    return table


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args(argv)

    device = torch.device("cuda")
    for kernel in (scan, block_argmax):
        ok, why = kernel.supported_hardware(device)
        if not ok:
            print(f"error: {kernel.NAME}: {why}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    paths = {k.NAME: str(k.build(device)) for k in (scan, block_argmax)}
    build_s = time.perf_counter() - t0
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    meta = {
        "device": torch.cuda.get_device_name(device), "arch": _native.cuda_arch(device), "torch": torch.__version__,
        "nvcc": nvcc, "build_s": round(build_s, 1), "libraries": paths,
    }  # fmt: skip
    print(json.dumps(meta, indent=1))

    checks = run_checks(device)
    print(f"\n{'case':32} {'E/k':>7} {'rows':>5} {'ser==blk':>8} | {'host ids=':>9} {'ulp0':>6} {'ulp1':>5} {'ulp2':>5} {'>2':>4} {'max':>4} in-ok")
    for c in checks:
        print(f"{c['case']:32} {c['E']:>4}/{c['topk']:<2} {c['rows']:>5} {c['serial_vs_block_identical_rows']:>8} | "
              f"{c['host_same_ids_rows']:>9} {c['host_weight_ulp_0']:>6} {c['host_weight_ulp_1']:>5} "
              f"{c['host_weight_ulp_2']:>5} {c['host_weight_ulp_gt2']:>4} {c['host_weight_ulp_max']:>4} {c['inputs_untouched']}")  # fmt: skip
    total = sum(c["rows"] for c in checks)
    identical = sum(c["serial_vs_block_identical_rows"] for c in checks)
    host_rows = sum(c["host_same_ids_rows"] for c in checks)
    print(f"\nserial vs block_argmax: {identical} of {total} rows bit-identical (ids and weight bits)")
    print(f"serial (CUDA) vs host: {host_rows} of {total} rows with identical ids")

    timing = [] if args.skip_timing else run_timing(device)
    if timing:
        print("\nus per launch (CUDA graph replay, median; bf16, E=896, top-16)")
        print(f"{'M':>6} {'serial':>10} {'block_argmax':>13}")
        for row in timing:
            print(f"{row['M']:>6} {row['serial']:>10.2f} {row['block_argmax']:>13.2f}")

    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": 1, **meta, "checks": checks, "timing_us": timing}, indent=1))
        os.replace(tmp, args.json)
    return 0 if identical == total and all(c["inputs_untouched"] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
