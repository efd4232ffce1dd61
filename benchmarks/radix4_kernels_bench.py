"""Side-by-side GPU check and timing of the radix kernels: radix4 (with and without PDL), radix4-serial, block-argmax.

Needs a CUDA GPU (sm_90 for the PDL columns) and nvcc. One run does:

1. Builds, in parallel: radix4 and radix4-serial (kernels/radix4), the serial
   kernels (kernels/serial), the tuning VARIANTS (compile-time defines), and,
   with ``--prev DIR``, an earlier radix4 kernel's sources (DIR/radix4.cu and
   its headers) to compare against.
2. The exhaustive sigmoid check (kernels/radix4/lab/radix4_sigmoid_exhaustive.cu: both
   contracts' sigmoids against their formulas for all 2^32 inputs), once per
   distinct set of sigmoid defines.
3. Bit identity, ids and every weight bit, on ``--rows`` rows per comparison
   over random and tie-heavy families (ties, saturated sigmoids, all-equal,
   NaN, +-inf, -inf bias masks, the -1e30 floor, fewer than topk winners,
   strided rows), every shape (896/16, 384/8, 224/16), both launch shapes:
   radix4-serial against block-argmax (and the serial scan on a slice),
   radix4 against the ``--prev`` kernel (contract aiter at every shape the
   earlier kernel serves, and each model-contract entry it has at the
   shapes of MODEL_IDENTITY: both scores, the raw sum, the groups, the
   generic path), every variant against the default build, PDL against
   plain launches.
4. PDL and graphs: a graph of a producer kernel and PDL routes (the route must
   see the producer's writes), a chain of PDL routes into one output (the
   last must win), graph replay against eager, ten repeats bit-identical.
5. Against the oracle (``oracle.route``), when importable: rows whose id sets
   differ, per contract and shape (near ties only are expected for aiter;
   the serial contract's expf may differ from the oracle's correctly rounded
   sigmoid by an ULP).
6. Timing, CUDA graph replay as contracts.bench takes it (each route captured
   20 times in a graph after 3 eager warm-ups on a side stream, one untimed
   replay, then 25 timed replays; us per launch = replay time / 20, median;
   logits randn*2 and bias randn*0.05, both bf16 as contracts.bench's default,
   seed 0, not rotated, renormalize, rs 2.5): radix4, radix4 PDL,
   radix4-serial, radix4-serial PDL, block-argmax (no PDL: it has none) and
   the ``--prev`` kernel, at M = 1, 64, 256, 1024, 4096 for every shape; an
   empty kernel (plain and PDL) is the floor. Then the VARIANTS at the same M
   for 896/16, with and without PDL.

Writes ``kernels_bench.json`` and ``kernels_bench.txt`` under ``--out`` and
prints the tables. Exit code 0 when every check passes, 1 otherwise.

Run from the repository root: ``python benchmarks/radix4_kernels_bench.py --out DIR [--prev DIR]``.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import kernels.radix4 as radix4  # noqa: E402
import kernels.radix4.serial as radix4_serial  # noqa: E402
from kernels._build import compile_shared, load_library  # noqa: E402
from kernels.serial import block_argmax, scan  # noqa: E402

SHAPES = ((896, 16), (384, 8), (224, 16))
TIMING_M = (1, 64, 256, 1024, 4096)
LAUNCHES, REPLAYS = 20, 25
RS = 2.5
FLAG_RENORM, FLAG_BLOCK, FLAG_WARP, FLAG_PDL = 1, 2, 4, 8

# name -> (contract, defines). Timed side by side at 896/16 and checked bit-identical to the default build.
UNTUNED = ("RADIX4_EX2_FTZ=0", "RADIX4_COPY_ENTRY16=0")  # the split kernel before the tuning of run 1
VARIANTS = {
    "default": ("aiter", ()),
    "untuned": ("aiter", UNTUNED),
    "early_trigger": ("aiter", ("RADIX4_PDL_LATE_TRIGGER=0",)),
    "no_dense": ("aiter", ("RADIX4_DENSE_MIN_ROWS=1000000",)),
    "sorted": ("aiter", ("RADIX4_SORTED_BOUND=1",)),
    "rank_composites": ("aiter", ("RADIX4_RANK_KEY32=0", "RADIX4_RANK_PACKED=0")),
    "rank_unpacked": ("aiter", ("RADIX4_RANK_PACKED=0",)),
    "unflushed_exp2": ("aiter", ("RADIX4_EX2_FTZ=0",)),
    "copy_mask": ("aiter", ("RADIX4_COPY_CURSOR=0",)),
    "copy_sum": ("aiter", ("RADIX4_COPY_CURSOR=0", "RADIX4_COPY_MASK=0")),
    "one_cursor": ("aiter", ("RADIX4_COPY_CURSORS=1",)),
    "dense_5_blocks": ("aiter", ("RADIX4_DENSE_MIN_BLOCKS=5",)),
    "tokens_per_block_2": ("aiter", ("RADIX4_TOKENS_PER_BLOCK=2",)),
    "two_warps_to_1536": ("aiter", ("RADIX4_WARPS_PER_TOKEN=2", "RADIX4_BLOCK_PER_TOKEN_MAX_ROWS=1536")),
    "exact_keys": ("aiter", ("RADIX4_APPROXIMATE_KEYS=0",)),
    "approximate_keys_warp_shapes": ("aiter", ("RADIX4_APPROXIMATE_KEYS=2",)),
    # the margin from the H200's own tanh.approx error (2^-16.93 measured) instead of the manual's 2^-10
    "h200_tanh_bound": ("aiter", ("RADIX4_APPROXIMATE_KEY_BOUND=0x1p-16f",)),
    "serial_h200_tanh_bound": ("serial", ("RADIX4_APPROXIMATE_KEY_BOUND=0x1p-16f",)),
    "serial": ("serial", ()),
    "serial_exact_keys": ("serial", ("RADIX4_APPROXIMATE_KEYS=0",)),
    "serial_no_dense": ("serial", ("RADIX4_DENSE_MIN_ROWS=1000000",)),
}
VARIANT_SHAPES = ((896, 16), (384, 8))  # where the variants are timed (the goals' shapes)
SIGMOID_DEFINES = ((), ("RADIX4_EX2_FTZ=0",))  # the exhaustive check's builds


def log(msg: str) -> None:
    print(msg, flush=True)


# ---------------------------------------------------------------- libraries


class Router:
    """One built library's C entry point, launched on the current stream into given outputs."""

    def __init__(self, lib: ctypes.CDLL, entry: str):
        self.fn = getattr(lib, entry)
        p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
        self.fn.argtypes, self.fn.restype = [p, i, i64, p, i, i64, i, i, i, f, p, p, p], i

    def __call__(self, scores, bias, topk, weights, ids, flags=FLAG_RENORM, rs=RS):
        M, E = scores.shape
        stride = scores.stride(0) if M > 1 else E
        rc = self.fn(scores.data_ptr(), 0 if scores.dtype == torch.float32 else 1, stride, bias.data_ptr(),
                     0 if bias.dtype == torch.float32 else 1, M, E, topk, flags, rs, weights.data_ptr(),
                     ids.data_ptr(), torch.cuda.current_stream().cuda_stream)  # fmt: skip
        if rc:
            raise RuntimeError(f"route returned {rc}")

    def route(self, scores, bias, topk, flags=FLAG_RENORM, rs=RS):
        w = torch.empty(scores.shape[0], topk, device=scores.device)
        i = torch.empty(scores.shape[0], topk, dtype=torch.int32, device=scores.device)
        self(scores, bias, topk, w, i, flags, rs)
        return w, i


EMPTY_KERNEL = r"""
#include <cuda_runtime.h>
__global__ void empty_kernel() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
extern "C" int launch_empty(void* stream, int pdl) {
    cudaLaunchConfig_t c = {};
    cudaLaunchAttribute a[1];
    a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a[0].val.programmaticStreamSerializationAllowed = 1;
    c.gridDim = dim3(1); c.blockDim = dim3(32); c.stream = (cudaStream_t)stream;
    c.attrs = a; c.numAttrs = pdl ? 1 : 0;
    return (int)cudaLaunchKernelEx(&c, empty_kernel);
}
"""


def build_everything(arch: str, prev: Path | None, variants: dict) -> dict:
    """Every library and program this run needs, built concurrently; name -> path."""
    tmp = Path(tempfile.mkdtemp(prefix="radix4-bench-"))
    jobs = {f"variant:{name}": (lambda c=c, d=d: radix4.build(arch=arch, defines=d, contract=c)) for name, (c, d) in variants.items()}
    jobs["radix4"] = lambda: radix4.build(arch=arch)
    jobs["radix4_serial"] = lambda: radix4_serial.build(arch=arch)
    jobs["serial_cuda"] = lambda: block_argmax.build("cuda", arch=arch)
    empty_src = tmp / "empty_kernel.cu"
    empty_src.write_text(EMPTY_KERNEL)
    jobs["empty"] = lambda: compile_shared(empty_src, compiler="nvcc", flags=["-O3", "-shared", "-Xcompiler", "-fPIC", f"-arch={arch}"])
    if prev is not None:
        headers = [p for p in prev.iterdir() if p.suffix in (".h", ".cuh")]
        jobs["prev"] = lambda: compile_shared(prev / "radix4.cu", compiler="nvcc", flags=[*radix4.CUDA_FLAGS, f"-arch={arch}"],
                                              depends=headers)  # fmt: skip
    exhaustive = Path(__file__).resolve().parents[1] / "kernels" / "radix4" / "lab" / "radix4_sigmoid_exhaustive.cu"
    flags = [f for f in radix4.CUDA_FLAGS if f not in ("-shared", "-Xcompiler", "-fPIC")]
    for k, defines in enumerate(SIGMOID_DEFINES):
        exe = tmp / f"sigmoid_exhaustive_{k}"
        cmd = ["nvcc", *flags, f"-arch={arch}", *(f"-D{d}" for d in defines), f"-I{radix4.HERE}", str(exhaustive), "-o", str(exe)]
        jobs[f"sigmoid:{k}"] = lambda cmd=cmd, exe=exe: (subprocess.run(cmd, check=True, capture_output=True), exe)[1]
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(fn) for name, fn in jobs.items()}
        built = {name: f.result() for name, f in futures.items()}
    log(f"built {len(built)} libraries and programs in {time.time() - t0:.1f} s")
    return built


# ---------------------------------------------------------------- cases


def families(E: int, K: int, rows: int, g: torch.Generator, device):
    """(name, scores fp32 [rows, E], bias fp32 [E]) on ``device``, random and tie-heavy rows."""

    def randn(*shape):
        return torch.randn(*shape, generator=g, device=device)

    def rand(*shape):
        return torch.rand(*shape, generator=g, device=device)

    def levels(lo, hi, shape, step):
        return torch.randint(lo, hi, shape, generator=g, device=device).float() * step

    yield "random", randn(rows, E) * 2, randn(E) * 0.05
    yield "random wide bias", randn(rows, E) * 2, randn(E)
    yield "ties: few levels", levels(-3, 4, (rows, E), 0.5), levels(0, 2, (E,), 0.25)
    yield "ties: saturated", levels(-3, 4, (rows, E), 40.0), torch.zeros(E, device=device)
    yield "ties: all equal", torch.full((rows, E), 0.375, device=device), torch.zeros(E, device=device)
    rank = torch.argsort(torch.argsort(rand(rows, E), dim=1), dim=1)
    top = torch.randint(1, K, (rows, 1), generator=g, device=device)
    straddle = torch.full((rows, E), -2.0, device=device)
    straddle[rank < top] = 3.0
    straddle[(rank >= top) & (rank < top + 40)] = 1.0
    yield "ties: pool straddling the cutoff", straddle, torch.zeros(E, device=device)
    nan = randn(rows, E)
    nan[rand(rows, E) < 0.3] = float("nan")
    nan[::7] = float("nan")
    yield "NaN: 30% and whole rows", nan, randn(E) * 0.05
    inf = randn(rows, E) * 2
    u = rand(rows, E)
    inf[u < 0.02] = float("inf")
    inf[u > 0.98] = float("-inf")
    inf[::11] = float("-inf")
    yield "+-inf logits", inf, randn(E) * 0.05
    mask = randn(E) * 0.05
    mask[rand(E) < 0.9] = float("-inf")
    yield "-inf bias on 90%", randn(rows, E) * 2, mask
    floor = randn(E) * 0.05
    floor[E // 4 :] = -1e30
    floor[: E // 4 : 5] = -9.9e29
    yield "the -1e30 floor", randn(rows, E), floor
    few = torch.full((E,), -2e30, device=device)
    few[torch.randperm(E, generator=g, device=device)[: K // 2]] = 0.0
    yield "fewer than topk beat -1e30", randn(rows, E), few


def as_dtype(scores, bias, kind: int):
    """kind 0: bf16 logits, fp32 bias; 1: fp32 / bf16; 2: bf16 / bf16; 3: fp32 / fp32."""
    s = scores.bfloat16() if kind in (0, 2) else scores
    b = bias.bfloat16() if kind in (1, 2) else bias
    return s, b


def bits_equal(a, b) -> torch.Tensor:
    """Per row: ids equal and every weight bit equal."""
    (wa, ia), (wb, ib) = a, b
    return (ia == ib).all(1) & (wa.contiguous().view(torch.int32) == wb.contiguous().view(torch.int32)).all(1)


# ---------------------------------------------------------------- checks


def run_identity(name, route_a, route_b, shapes, rows, device, *, launch_shapes=(None,), note=""):
    """Rows bit-identical between two routes over every family, shape, dtype pairing, launch shape, strided rows.

    Fresh rows every pass; pass p takes dtype pairing p % 4, launch shape p % len(launch_shapes), a strided
    unaligned view when p % 3 == 2 and M = 256 (else 4096) when p % 5 == 4.
    """
    g = torch.Generator(device=device).manual_seed(zlib.crc32(name.encode()))
    total = same = 0
    bad = []
    per_shape = max(1, rows // len(shapes))
    for E, K in shapes:
        done, p = 0, 0
        while done < per_shape:
            for fam, scores, bias in families(E, K, 4096, g, device):
                s, b = as_dtype(scores, bias, p % 4)
                if p % 3 == 2:  # a column slice of a wider buffer, unaligned
                    wide = torch.zeros(s.shape[0], E + 7, dtype=s.dtype, device=device)
                    wide[:, 3 : 3 + E] = s
                    s = wide[:, 3 : 3 + E]
                s = s[: 256 if p % 5 == 4 else 4096]
                shape = launch_shapes[p % len(launch_shapes)]
                ok = bits_equal(route_a(s, b, K, shape), route_b(s, b, K, shape))
                total += s.shape[0]
                done += s.shape[0]
                same += int(ok.sum())
                if not bool(ok.all()) and len(bad) < 5:
                    bad.append(f"{E}/{K} {fam} pass {p} ({int((~ok).sum())} rows)")
            p += 1
    passed = same == total
    log(f"{'ok  ' if passed else 'FAIL'} {name}: {same:,} of {total:,} rows bit-identical{note}" + (f"; first: {bad}" if bad else ""))
    return {"check": name, "rows": total, "identical": same, "passed": passed, "first_bad": bad}


FLAG_DENSE = 16
FLAG_RAW_SUM, FLAG_SQRT_SOFTPLUS = 32, 64  # the model contracts' flags (kernels/radix4: _RAW_SUM, _SQRT_SOFTPLUS)
# The model contracts' entries of the library, checked against the --prev kernel's own where it has them
# (docs/radix4_models.md): (C entry, extra flags, shapes). The generic path's shapes (200/5, 1000/16) have no kernel
# of their own.
MODEL_IDENTITY = (
    ("radix4_lowest_route", 0, ((384, 8), (256, 8), (160, 8), (128, 6), (896, 16), (200, 5))),
    ("radix4_lowest_route", FLAG_RAW_SUM, ((256, 8),)),
    ("radix4_lowest_route", FLAG_SQRT_SOFTPLUS, ((256, 6), (384, 6), (200, 5), (1000, 16))),
    ("radix4_grouped_route", 0, ((256, 8),)),
    ("radix4_grouped_zero_route", 0, ((256, 8),)),
)


def shape_flag(shape):
    return {None: 0, "block": FLAG_BLOCK, "warp": FLAG_WARP, "dense": FLAG_DENSE}[shape]


def served_shapes(router: Router, shapes, device, flags=FLAG_RENORM) -> tuple:
    """The shapes a library entry routes (an earlier kernel may lack some: it returns an error code for them)."""
    out = []
    for E, K in shapes:
        try:
            router.route(torch.zeros(1, E, device=device), torch.zeros(E, device=device), K, flags)
            out.append((E, K))
        except RuntimeError:
            log(f"skip {E}/{K}: the --prev kernel does not serve it")
    return tuple(out)


def run_pdl_checks(r4: Router, r4s: Router, device) -> list[dict]:
    out = []
    g = torch.Generator().manual_seed(7)
    for name, router in (("radix4", r4), ("radix4-serial", r4s)):
        for E, K in SHAPES:
            srcs = [(torch.randn(256, E, generator=g) * 2).bfloat16().to(device) for _ in range(6)]
            bias = (torch.randn(E, generator=g) * 0.05).to(device)
            want = [router.route(s, bias, K) for s in srcs]
            # A producer kernel writes the logits, a PDL route reads them: it must wait for the producer.
            scores = torch.empty_like(srcs[0])
            outs = [(torch.empty(256, K, device=device), torch.empty(256, K, dtype=torch.int32, device=device)) for _ in srcs]
            last = (torch.empty(256, K, device=device), torch.empty(256, K, dtype=torch.int32, device=device))
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                router(srcs[0], bias, K, *last, FLAG_RENORM | FLAG_PDL)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for s, (w, i) in zip(srcs, outs):
                    torch.mul(s, 1, out=scores)
                    router(scores, bias, K, w, i, FLAG_RENORM | FLAG_PDL)
                for s in srcs:  # a chain of PDL routes into one output: the last must win
                    router(s, bias, K, *last, FLAG_RENORM | FLAG_PDL)
            ok = True
            for _ in range(3):
                for w, i in (*outs, last):
                    w.fill_(-1.0), i.fill_(-1)
                graph.replay()
                torch.cuda.synchronize()
                ok &= all(bool(bits_equal(o, w).all()) for o, w in zip(outs, want)) and bool(bits_equal(last, want[-1]).all())
            eager = [router.route(s, bias, K, FLAG_RENORM | FLAG_PDL) for s in srcs]
            ok_eager = all(bool(bits_equal(e, w).all()) for e, w in zip(eager, want))
            repeats = all(bool(bits_equal(router.route(srcs[0], bias, K, FLAG_RENORM | FLAG_PDL | f), want[0]).all())
                          for f in (0, FLAG_BLOCK, FLAG_WARP, FLAG_DENSE) for _ in range(10))  # fmt: skip
            passed = ok and ok_eager and repeats
            log(f"{'ok  ' if passed else 'FAIL'} PDL {name} {E}/{K}: producer->route graph and chained routes {ok}, eager {ok_eager}, 40 repeats {repeats}")
            out.append({"check": f"pdl {name} {E}/{K}", "graph": ok, "eager": ok_eager, "repeats": repeats, "passed": passed})
    return out


def run_oracle_checks(r4: Router, r4s: Router, device) -> list[dict]:
    try:
        import oracle
    except ImportError:
        log("oracle not importable: skipped")
        return []
    out = []
    g = torch.Generator(device=device).manual_seed(11)
    for contract, router in (("aiter", r4), ("serial", r4s)):
        for E, K in SHAPES:
            for fam, scores, bias in families(E, K, 2048, g, device):
                s, b = scores.bfloat16().to(device), bias.to(device)
                _, ids = router.route(s, b, K)
                _, oids = oracle.route(s, b, K, renormalize=True, routed_scaling_factor=RS, contract=contract)
                if contract == "serial":
                    differ = int((ids.cpu() != oids.cpu()).any(1).sum())
                else:
                    differ = int((ids.long().sort(1).values.cpu() != oids.long().sort(1).values.cpu()).any(1).sum())
                out.append({"contract": contract, "shape": f"{E}/{K}", "family": fam, "rows": s.shape[0], "rows_differ": differ})
    for contract in ("aiter", "serial"):
        for E, K in SHAPES:
            sel = [o for o in out if o["contract"] == contract and o["shape"] == f"{E}/{K}"]
            log(f"oracle {contract} {E}/{K}: {sum(o['rows_differ'] for o in sel)} of {sum(o['rows'] for o in sel)} rows differ "
                f"(by family: {[(o['family'], o['rows_differ']) for o in sel if o['rows_differ']]})")  # fmt: skip
    return out


def run_sigmoid(built) -> list[dict]:
    out = []
    for k, defines in enumerate(SIGMOID_DEFINES):
        run = subprocess.run([str(built[f"sigmoid:{k}"])], capture_output=True, text=True)
        passed = run.returncode == 0
        log(f"{'ok  ' if passed else 'FAIL'} exhaustive sigmoid {list(defines) or '(default)'}: {run.stdout.strip()} {run.stderr.strip()}")
        out.append({"check": f"exhaustive sigmoid {defines}", "passed": passed, "output": run.stdout})
    return out


# ---------------------------------------------------------------- timing


def time_graph(fn) -> float:
    """Median us per launch: ``fn`` captured LAUNCHES times in a graph, replayed REPLAYS times (contracts.bench's timer)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(LAUNCHES):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(REPLAYS):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / LAUNCHES)
    del graph
    return statistics.median(samples)


def bench_inputs(M, E, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed * 1_000_003 + M)
    scores = (torch.randn(M, E, generator=g) * 2).bfloat16().to(device)
    bias = (torch.randn(E, generator=g) * 0.05).bfloat16().to(device)
    return scores, bias


def run_timing(routers: dict, device, shapes=SHAPES, ms=TIMING_M) -> list[dict]:
    """routers: column -> (callable(scores, bias, K, w, ids) or None for unsupported shapes)."""
    rows = []
    for E, K in shapes:
        for M in ms:
            scores, bias = bench_inputs(M, E, device)
            w = torch.empty(M, K, device=device)
            ids = torch.empty(M, K, dtype=torch.int32, device=device)
            row = {"shape": f"{E}/{K}", "M": M}
            for col, (fn, shapes_ok) in routers.items():
                if shapes_ok is not None and (E, K) not in shapes_ok:
                    continue
                row[col] = round(time_graph(lambda fn=fn: fn(scores, bias, K, w, ids)), 3)
            rows.append(row)
            log("  " + " ".join(f"{k}={v}" for k, v in row.items()))
    return rows


def table(rows: list[dict], title: str) -> str:
    cols = []
    for r in rows:
        for k in r:
            if k not in ("shape", "M") and k not in cols:
                cols.append(k)
    width = max(12, *(len(c) + 1 for c in cols))
    lines = [title, f"{'shape':>7} {'M':>5} " + "".join(f"{c:>{width}}" for c in cols)]
    for r in rows:
        lines.append(f"{r['shape']:>7} {r['M']:>5} " + "".join(f"{r[c]:>{width}.2f}" if c in r else f"{'-':>{width}}" for c in cols))
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--prev", type=Path, help="directory with an earlier radix4 kernel's radix4.cu and headers")
    ap.add_argument("--rows", type=int, default=1_000_000, help="rows per bit-identity comparison (default 1,000,000)")
    ap.add_argument("--variants", default="all", help="comma-separated VARIANTS names to build and time, 'all' or 'none'")
    ap.add_argument("--skip-timing", action="store_true")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda")
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    variants = {} if args.variants == "none" else VARIANTS if args.variants == "all" else {
        n: VARIANTS[n] for n in args.variants.split(",")}  # fmt: skip
    report = {"device": torch.cuda.get_device_name(), "arch": arch, "torch": torch.__version__,
              "nvcc": subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]}  # fmt: skip
    log(json.dumps(report))
    built = build_everything(arch, args.prev, variants)
    r4 = Router(load_library(built["radix4"]), "radix4_route")
    r4s = Router(load_library(built["radix4_serial"]), "radix4_serial_route")
    libs = {name: Router(load_library(built[f"variant:{name}"]), radix4.CONTRACTS[c][2]) for name, (c, _) in variants.items()}
    prev = Router(load_library(built["prev"]), "radix4_route") if args.prev else None
    empty = load_library(built["empty"])
    empty.launch_empty.argtypes, empty.launch_empty.restype = [ctypes.c_void_p, ctypes.c_int], ctypes.c_int

    def via(router, extra=0):
        return lambda s, b, K, shape: router.route(s, b, K, FLAG_RENORM | shape_flag(shape) | extra)

    def via_module(module, **kw):
        return lambda s, b, K, shape: module.route(s, b, K, True, RS, launch_shape=shape, **kw)

    checks = run_sigmoid(built)
    t0 = time.time()
    shapes_all = (None, "block", "warp", "dense")
    checks.append(run_identity("radix4-serial vs block-argmax", via_module(radix4_serial),
                               lambda s, b, K, shape: block_argmax.route(s, b, K, True, RS), SHAPES, args.rows, device,
                               launch_shapes=shapes_all))  # fmt: skip
    checks.append(run_identity("radix4-serial PDL vs block-argmax", via_module(radix4_serial, pdl=True),
                               lambda s, b, K, shape: block_argmax.route(s, b, K, True, RS), SHAPES, args.rows // 4, device,
                               launch_shapes=shapes_all))  # fmt: skip
    checks.append(run_identity("radix4-serial vs serial scan", via_module(radix4_serial),
                               lambda s, b, K, shape: scan.route(s, b, K, True, RS), SHAPES, 3 * 4096 * 11, device))  # fmt: skip
    checks.append(run_identity("radix4 PDL vs radix4", via_module(radix4, pdl=True), via_module(radix4), SHAPES,
                               args.rows // 4, device, launch_shapes=shapes_all))  # fmt: skip
    if prev is not None:  # (an earlier kernel without a dense shape launches its warp shape for the flag)
        via_prev = lambda s, b, K, shape: prev.route(s, b, K, FLAG_RENORM | shape_flag("warp" if shape == "dense" else shape))  # noqa: E731
        checks.append(run_identity("radix4 vs --prev radix4", via(r4), via_prev, served_shapes(prev, SHAPES, device),
                                   args.rows, device, launch_shapes=shapes_all))  # fmt: skip
        prev_lib, r4_lib = load_library(built["prev"]), load_library(built["radix4"])
        for entry, extra, shapes in MODEL_IDENTITY:
            if not hasattr(prev_lib, entry):
                log(f"skip {entry}: the --prev kernel has no such entry")
                continue
            mine, theirs = Router(r4_lib, entry), Router(prev_lib, entry)
            shapes = served_shapes(theirs, shapes, device, FLAG_RENORM | extra)
            if shapes:
                checks.append(run_identity(f"{entry} (flags {extra}) vs --prev", via(mine, extra), via(theirs, extra),
                                           shapes, args.rows // 4, device, launch_shapes=(None, "block", "warp")))  # fmt: skip
    for name, (contract, _) in variants.items():
        base = r4 if contract == "aiter" else r4s
        checks.append(run_identity(f"variant {name} vs default", via(libs[name]), via(base), SHAPES, args.rows // 8, device,
                                   launch_shapes=shapes_all))  # fmt: skip
    log(f"bit-identity checks: {time.time() - t0:.1f} s")
    checks += run_pdl_checks(r4, r4s, device)
    oracle_rows = run_oracle_checks(r4, r4s, device)
    report.update(checks=checks, oracle=oracle_rows)
    passed = all(c["passed"] for c in checks)

    text = []
    if not args.skip_timing:
        floor = time_graph(lambda: empty.launch_empty(torch.cuda.current_stream().cuda_stream, 0))
        floor_pdl = time_graph(lambda: empty.launch_empty(torch.cuda.current_stream().cuda_stream, 1))
        log(f"empty kernel: {floor:.2f} us, with PDL {floor_pdl:.2f} us")

        def launch(router, flags=FLAG_RENORM):
            return lambda s, b, K, w, i: router(s, b, K, w, i, flags)

        def public(module, **kw):
            return lambda s, b, K, w, i: module.route(s, b, K, True, RS, **kw)

        columns = {
            "radix4": (public(radix4), None),
            "radix4_pdl": (public(radix4, pdl=True), None),
            "r4serial": (public(radix4_serial), None),
            "r4serial_pdl": (public(radix4_serial, pdl=True), None),
            "block_argmax": (public(block_argmax), None),
        }
        if prev is not None:
            columns["prev_radix4"] = (launch(prev), {(896, 16), (384, 8)})
        main_rows = run_timing(columns, device)
        for r in main_rows:
            if "r4serial" in r:
                r["argmax/r4serial"] = round(r["block_argmax"] / r["r4serial"], 2)
        variant_cols = {}
        for name in variants:
            variant_cols[name] = (launch(libs[name]), set(VARIANT_SHAPES))
            variant_cols[f"{name}+pdl"] = (launch(libs[name], FLAG_RENORM | FLAG_PDL), set(VARIANT_SHAPES))
        variant_rows = run_timing(variant_cols, device, shapes=VARIANT_SHAPES) if variants else []
        head = (f"us per launch, CUDA graph replay ({LAUNCHES} launches per graph, median of {REPLAYS} replays), "
                f"bf16 logits and bias, renormalize, rs {RS}; {report['device']}; empty kernel {floor:.2f} us "
                f"({floor_pdl:.2f} with PDL). block_argmax has no PDL launch: it is timed plain.")  # fmt: skip
        text.append(table(main_rows, head))
        if variant_rows:
            text.append(table(variant_rows, "Tuning variants (compile-time defines, see VARIANTS), 896/16 and 384/8, plain and +pdl"))
        report.update(timing=main_rows, variants=variant_rows, empty_us=floor, empty_pdl_us=floor_pdl)

    summary = [f"{'PASS' if c['passed'] else 'FAIL'}  {c['check']}" + (f"  ({c['identical']:,}/{c['rows']:,} rows)" if "rows" in c else "")
               for c in checks]  # fmt: skip
    text.append("Checks:\n" + "\n".join(summary))
    text.append(f"radix4 kernels bench: {'PASS' if passed else 'FAIL'}")
    (args.out / "kernels_bench.json").write_text(json.dumps(report, indent=1))
    (args.out / "kernels_bench.txt").write_text("\n\n".join(text) + "\n")
    print("\n\n" + "\n\n".join(text))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
