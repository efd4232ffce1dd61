"""GPU check and timing of the radix-4 router (kernels/radix4). Needs a GPU and its compiler.

1. Builds the library for the device (and, for timing, the builds that
   VARIANTS names).
2. The branch-free reciprocal of the CUDA sigmoid (kernels/radix4/lab/radix4_sigmoid_exhaustive.cu)
   equals IEEE division for every denominator and every fp32 input, and the model contracts' fast
   float64 scores (radix4_model_scores_exhaustive.cu) give libm's bits for every fp32 input.
3. Correctness against a plain torch reference of contract ``aiter`` that
   does the kernel's arithmetic on the same device (exp2 sigmoid, IEEE
   reciprocal, rank keys, composite (key, tie priority) sort): ids must be
   equal, weights within rtol 1e-5 / atol 1e-6 (NaN == NaN). Cases: random
   bf16/fp32 logits with bf16/fp32 bias, all-equal rows, tie pools that
   straddle the cutoff, NaN rows, +-inf logits and -inf bias, saturated
   sigmoids, negative ranking values, strided rows (aligned and not), the
   renormalize guard, M in {1, 7, 64, 1024}, Kimi-K2's 384/8, the pruned
   Kimi-K3's 224/16.
4. Against ``oracle.route(contract="aiter")`` when the package is there: the
   oracle's sigmoid is torch.sigmoid, not the exp2 form, so ids may differ on
   near ties; rows whose id sets differ are counted with the largest ULP
   distance (oracle ranking values) between a differing expert and the
   oracle's k-th value.
   Every case runs in both launch shapes (a block per token, a warp per
   token) and in the default choice by M.
5. CUDA graph replay equals eager, and 10 eager repeats are bit-identical.
6. Timing: bf16 logits (every fifth row all-equal), fp32 bias, E=896,
   top-16, rs=2.5, renormalize; each router captured LAUNCHES_PER_GRAPH times
   in a CUDA graph, replayed REPLAYS times; us per launch = replay time /
   launches, median over replays. Inputs stay the same (they fit in L2, as in
   a decode step). Columns: launch-shape variants (VARIANTS, each checked
   bit-identical to route()), route() with its default choice, all-equal rows,
   torch-native routing (fp32 sigmoid, +bias, torch.topk, gather,
   renormalize); an empty kernel gives the floor.

Run from the repository root: ``python benchmarks/radix4_gpu_check.py [--json out.json]``.
Exit code 0 when every check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

import kernels.radix4 as radix4  # noqa: E402
from kernels._build import compile_shared, load_library  # noqa: E402

TIMING_ROWS = (1, 8, 64, 256, 512, 1024, 1536, 4096)
LAUNCH_SHAPES = (None, "block", "warp", "dense")  # checked for correctness
LAUNCHES_PER_GRAPH = 20
REPLAYS = 25
NEG_LOG2E = -1.44269504088896340736
RTOL, ATOL = 1e-5, 1e-6

# aiter's wave64 lane order (docs/contracts.md#the-tie-table), the script's own copy.
LANE_RANK = [
    56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48,
    40, 41, 42, 43, 47, 46, 45, 44, 36, 37, 38, 39, 35, 34, 33, 32,
    24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16,
    8, 9, 10, 11, 15, 14, 13, 12, 4, 5, 6, 7, 3, 2, 1, 0,
]  # fmt: skip


# ---------------------------------------------------------------- reference


def tie_priority(E: int) -> list[int]:
    """Priority of each expert: its position when sorted by (LANE_RANK[(e >> 2) & 63], e)."""
    order = sorted(range(E), key=lambda e: (LANE_RANK[(e >> 2) & 63], e))
    prio = [0] * E
    for position, e in enumerate(order):
        prio[e] = position
    return prio


def rank_keys(r: torch.Tensor) -> torch.Tensor:
    """Order-preserving fp32 -> key in int64: -0 == +0, NaN -> 0 (below -inf)."""
    r = torch.where(r == 0, torch.zeros_like(r), r)
    bits = r.view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    key = torch.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits | 0x80000000)
    return torch.where(torch.isnan(r), torch.zeros_like(key), key)


def reference(scores, bias, topk, renormalize, rs):
    """Contract aiter in plain torch, with the kernel's exp2 sigmoid, on the scores' device."""
    E = scores.shape[1]
    sig = torch.reciprocal(1.0 + torch.exp2(scores.float() * NEG_LOG2E))
    r = sig + bias.float()
    prio = torch.tensor(tie_priority(E), dtype=torch.int64, device=scores.device)
    composite = rank_keys(r) * 4096 + (E - 1 - prio)  # unique per expert, larger ranks first
    ids = composite.argsort(dim=1, descending=True)[:, :topk]
    w = sig.gather(1, ids)
    if renormalize:
        total = w.sum(dim=1, keepdim=True)
        w = torch.where(total > 0, w / total, w)
    return w * torch.tensor(rs, dtype=torch.float32), ids.to(torch.int32)


# ---------------------------------------------------------------- cases


def case_families(device, seed=0):
    """Yield (name, scores, bias, topk, renormalize, rs); scores may be a strided view."""
    g = torch.Generator(device="cpu").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    def on(t):
        return t.to(device)

    E, K = 896, 16
    for M in (1, 7, 64, 1024):
        yield f"random bf16 / fp32 bias M={M}", on((randn(M, E) * 2).bfloat16()), on(randn(E) * 0.05), K, True, 2.5
    yield "random fp32 / fp32 bias", on(randn(1024, E) * 2), on(randn(E) * 0.05), K, True, 1.0
    yield "random bf16 / bf16 bias", on((randn(1024, E) * 2).bfloat16()), on((randn(E) * 0.05).bfloat16()), K, False, 2.5
    yield "random fp32 / bf16 bias", on(randn(1024, E)), on((randn(E) * 0.1).bfloat16()), K, True, 2.5
    yield "bf16, no bias spread", on((randn(1024, E) * 2).bfloat16()), on(torch.zeros(E)), K, True, 2.5
    yield "all equal (zeros)", on(torch.zeros(64, E, dtype=torch.bfloat16)), on(torch.zeros(E)), K, True, 2.5
    yield "all equal (fp32 0.3, bias 0.1)", on(torch.full((7, E), 0.3)), on(torch.full((E,), 0.1)), K, False, 1.0
    levels = torch.tensor([-1.0, 0.0, 0.5, 1.0])
    few = levels[torch.randint(0, 4, (1024, E), generator=g)]
    yield "four logit levels (tie pools)", on(few.bfloat16()), on(torch.zeros(E)), K, True, 2.5
    straddle = torch.full((1024, E), -2.0)
    for row in range(1024):
        perm = torch.randperm(E, generator=g)
        top = 1 + row % 15  # 1..15 clear winners, then a pool of 40 equal values
        straddle[row, perm[:top]] = 3.0
        straddle[row, perm[top : top + 40]] = 1.0
    yield "tie pool straddling the cutoff", on(straddle.bfloat16()), on(torch.zeros(E)), K, True, 2.5
    yield "tie pool, bf16 bias levels", on(few.bfloat16()), on((torch.randint(0, 3, (E,), generator=g) * 0.25).bfloat16()), K, True, 1.0
    yield "saturated sigmoid (+-30, +-100)", on((torch.randint(0, 4, (256, E), generator=g).float() * 43 - 100).bfloat16()), on(torch.zeros(E)), K, True, 2.5
    nan_rows = randn(256, E) * 2
    nan_rows[0] = float("nan")
    nan_rows[1, 100:] = float("nan")
    nan_rows[2, :890] = float("nan")
    nan_rows[3:, :] = torch.where(torch.rand(253, E, generator=g) < 0.3, float("nan"), nan_rows[3:])
    yield "NaN rows (all, most, sprinkled)", on(nan_rows), on(randn(E) * 0.05), K, True, 2.5
    inf_rows = randn(256, E)
    inf_rows[:, ::7] = float("inf")
    inf_rows[:, 3::11] = float("-inf")
    inf_rows[0] = float("-inf")  # all sig 0: renormalize guard (total 0)
    yield "+-inf logits, all -inf row", on(inf_rows), on(torch.zeros(E)), K, True, 2.5
    bias_mask = randn(E) * 0.05
    bias_mask[::2] = float("-inf")
    yield "-inf bias masks half", on((randn(256, E) * 2).bfloat16()), on(bias_mask), K, True, 1.0
    yield "negative ranking values", on(randn(256, E)), on(torch.full((E,), -2.0)), K, True, 2.5
    yield "signed zeros (sig 0, bias -0/+0)", on(torch.full((7, E), float("-inf"))), on(torch.where(torch.rand(E, generator=g) < 0.5, -0.0, 0.0)), K, True, 2.5
    backing = on((randn(1024, 4096) * 2).bfloat16())
    yield "strided bf16 rows (column slice 1536:)", backing[:, 1536 : 1536 + E], on(randn(E) * 0.05), K, True, 2.5
    yield "strided bf16 rows, unaligned (3:)", backing[:, 3 : 3 + E], on(randn(E) * 0.05), K, True, 2.5
    backing32 = on(randn(64, 1000))
    yield "strided fp32 rows, unaligned (1:)", backing32[:, 1 : 1 + E], on(randn(E) * 0.05), K, False, 1.0
    yield "Kimi-K2 384/8 random", on((randn(1024, 384) * 2).bfloat16()), on(randn(384) * 0.05), 8, True, 2.827
    yield "Kimi-K2 384/8 all equal", on(torch.zeros(64, 384, dtype=torch.bfloat16)), on(torch.zeros(384)), 8, True, 2.827
    yield "Kimi-K3 pruned 224/16 random", on((randn(1024, 224) * 2).bfloat16()), on(randn(224) * 0.05), 16, True, 2.5
    yield "Kimi-K3 pruned 224/16 all equal", on(torch.zeros(64, 224, dtype=torch.bfloat16)), on(torch.zeros(224)), 16, True, 2.5
    nan224 = randn(256, 224)
    nan224[torch.rand(256, 224, generator=g) < 0.5] = float("nan")
    yield "Kimi-K3 pruned 224/16 NaN", on(nan224), on(randn(224) * 0.05), 16, True, 2.5


# ---------------------------------------------------------------- checks


def ulp_gap(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Distance in fp32 ULPs (through the ordered int map); NaN counts as huge."""
    ka, kb = rank_keys(a.float()), rank_keys(b.float())
    return (ka - kb).abs()


def compare_to_oracle(scores, bias, topk, renormalize, rs, ids):
    """(rows whose id sets differ from the oracle's, worst ULP gap of a differing expert to the cutoff)."""
    import oracle

    _, o_ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rs, contract="aiter")
    _, r = oracle.ranking_values(scores, bias, "aiter")
    mine = torch.sort(ids.long(), dim=1).values
    theirs = torch.sort(o_ids.long().to(ids.device), dim=1).values
    differ = (mine != theirs).any(dim=1).nonzero().flatten().tolist()
    worst = 0
    r = r.to(ids.device).float()
    for row in differ[:64]:
        cutoff = r[row].gather(0, o_ids[row].long().to(ids.device)).min()
        odd = set(ids[row].tolist()) ^ set(o_ids[row].tolist())
        gaps = ulp_gap(r[row, sorted(odd)], cutoff.expand(len(odd)))
        worst = max(worst, int(gaps.max()))
    return len(differ), worst


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16) if t.element_size() == 2 else t.view(torch.int32)


def run_checks(device) -> tuple[bool, list[dict]]:
    try:
        import oracle  # noqa: F401

        have_oracle = True
    except ImportError:
        have_oracle = False
    results, ok = [], True
    for (name, scores, bias, topk, renorm, rs), shape in (
        (case, shape) for case in case_families(device) for shape in LAUNCH_SHAPES
    ):
        name = f"{name} [{shape or 'auto'}]"
        before = (bits(scores).clone(), bits(bias).clone())
        w, ids = radix4.route(scores, bias, topk, renorm, rs, launch_shape=shape)
        rw, rids = reference(scores, bias, topk, renorm, rs)
        M = scores.shape[0]
        id_rows = int((ids != rids).any(dim=1).sum())
        close = torch.isclose(w, rw, rtol=RTOL, atol=ATOL, equal_nan=True)
        w_bad = int((~close).sum())
        worst_w = float(((w - rw).abs() / rw.abs().clamp_min(1e-30)).nan_to_num(0.0).max())
        untouched = torch.equal(before[0], bits(scores)) and torch.equal(before[1], bits(bias))
        entry = {"case": name, "rows": M, "id_rows_mismatch": id_rows, "weights_mismatch": w_bad,
                 "weights_worst_rel": worst_w, "inputs_untouched": untouched}  # fmt: skip
        if have_oracle and shape is None:
            try:
                entry["oracle_set_rows_differ"], entry["oracle_worst_ulp"] = compare_to_oracle(
                    scores, bias, topk, renorm, rs, ids
                )
            except Exception as exc:  # noqa: BLE001 -- the oracle is a parallel work item
                entry["oracle_error"] = f"{type(exc).__name__}: {exc}"[:200]
        case_ok = id_rows == 0 and w_bad == 0 and untouched
        if not case_ok and id_rows:
            row = int((ids != rids).any(dim=1).nonzero()[0])
            entry["first_bad_row"] = {"row": row, "ids": ids[row].tolist(), "ref_ids": rids[row].tolist()}
        ok &= case_ok
        results.append(entry)
        flag = "ok  " if case_ok else "FAIL"
        extra = ""
        if "oracle_set_rows_differ" in entry:
            extra = f"  oracle: {entry['oracle_set_rows_differ']} rows differ (worst {entry['oracle_worst_ulp']} ulp)"
        elif "oracle_error" in entry:
            extra = f"  oracle: {entry['oracle_error']}"
        print(f"{flag} {name:50s} M={M:5d} id rows {id_rows}/{M}, weights {w_bad}/{w.numel()} "
              f"(worst rel {worst_w:.1e}){extra}")  # fmt: skip
        if "first_bad_row" in entry:
            print("     ", entry["first_bad_row"])
    # all-equal rows: the contract's first ids
    _, ids = radix4.route(torch.zeros(1, 896, device=device), torch.zeros(896, device=device), 16, True, 1.0)
    first = ids[0, :8].tolist()
    want = [252, 253, 254, 255, 508, 509, 510, 511]
    print(f"{'ok  ' if first == want else 'FAIL'} all-equal first ids {first} (want {want})")
    ok &= first == want
    results.append({"case": "all-equal first ids", "ids": first, "ok": first == want})
    return ok, results


def run_determinism(device) -> tuple[bool, dict]:
    g = torch.Generator(device="cpu").manual_seed(1)
    scores = (torch.randn(1024, 896, generator=g) * 2).bfloat16().to(device)
    scores[::3] = torch.tensor(0.5, dtype=torch.bfloat16)  # tie-heavy rows too
    bias = (torch.randn(896, generator=g) * 0.05).to(device)
    eager = radix4.route(scores, bias, 16, True, 2.5)
    repeats_equal = all(
        torch.equal(eager[0], w) and torch.equal(eager[1], i)
        for shape in LAUNCH_SHAPES
        for w, i in (radix4.route(scores, bias, 16, True, 2.5, launch_shape=shape) for _ in range(10))
    )
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        radix4.route(scores, bias, 16, True, 2.5)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        gw, gi = radix4.route(scores, bias, 16, True, 2.5)
    gw.zero_(), gi.zero_()
    graph.replay()
    torch.cuda.synchronize()
    graph_equal = torch.equal(eager[0], gw) and torch.equal(eager[1], gi)
    # new inputs copied into the captured buffer must be picked up by a replay
    scores.copy_((torch.randn(1024, 896, generator=g) * 2).bfloat16().to(device))
    graph.replay()
    torch.cuda.synchronize()
    fresh = radix4.route(scores, bias, 16, True, 2.5)
    graph_fresh_equal = torch.equal(fresh[0], gw) and torch.equal(fresh[1], gi)
    out = {"repeats_bit_identical": repeats_equal, "graph_equals_eager": graph_equal,
           "graph_replay_new_inputs": graph_fresh_equal}  # fmt: skip
    print(f"determinism: {out}")
    return repeats_equal and graph_equal and graph_fresh_equal, out


# ---------------------------------------------------------------- timing


def time_graph(fn, launches=LAUNCHES_PER_GRAPH, replays=REPLAYS) -> float:
    """Median us per launch of ``fn`` captured ``launches`` times in one CUDA graph (contracts.bench's timer)."""
    from kernels.timing import time_cuda

    return statistics.median(time_cuda(fn, launches, replays, warmup=1).samples_us)


EMPTY_KERNEL = r"""
#include <cuda_runtime.h>
__global__ void empty_kernel() {}
extern "C" int launch_empty(void* stream) {
    empty_kernel<<<1, 32, 0, (cudaStream_t)stream>>>();
    return (int)cudaGetLastError();
}
"""


def empty_launcher():
    tmp = Path(tempfile.mkdtemp())
    src = tmp / "empty_kernel.cu"
    src.write_text(EMPTY_KERNEL)
    lib = load_library(compile_shared(src, compiler="nvcc", flags=["-O3", "-shared", "-Xcompiler", "-fPIC"]))
    return lambda: lib.launch_empty(torch.cuda.current_stream().cuda_stream)


def torch_native(scores, bias, topk, rs):
    sig = scores.float().sigmoid()
    _, ids = torch.topk(sig + bias, topk, dim=-1)
    w = sig.gather(1, ids)
    return w / w.sum(dim=-1, keepdim=True) * rs, ids


def route_with(lib, scores, bias, weights, ids, shape_flag):
    """Launch a library build (radix4.library) in a launch shape (flag 2: block per token, 4: warp per token, | 8: PDL)."""
    M, E = scores.shape
    K = weights.shape[1]
    rc = lib.route(scores.data_ptr(), 1 if scores.dtype == torch.bfloat16 else 0, E, bias.data_ptr(),
                   1 if bias.dtype == torch.bfloat16 else 0, M, E, K, 1 | shape_flag, 2.5, weights.data_ptr(),
                   ids.data_ptr(), torch.cuda.current_stream().cuda_stream)  # fmt: skip
    if rc:
        raise RuntimeError(f"radix4 route returned {rc}")


VARIANTS = {  # column -> (build defines, shape flag: 2 block per token, 4 warp per token)
    "block_4w": ((), 2),
    "block_4w_radix": (("RADIX4_RANK_MAX=0",), 2),  # no rank step: radix rounds only
    "block_2w": (("RADIX4_WARPS_PER_TOKEN=2",), 2),
    "warp_x4": ((), 4),
    "warp_x4_radix": (("RADIX4_RANK_MAX=0",), 4),
}


def run_timing(device) -> tuple[list[dict], float, bool]:
    libs = {name: radix4.library(defines=defines) for name, (defines, _) in VARIANTS.items()}
    empty = empty_launcher()
    floor = time_graph(empty)
    print(f"\nempty kernel: {floor:.2f} us per launch")
    g = torch.Generator(device="cpu").manual_seed(2)
    bias = (torch.randn(896, generator=g) * 0.05).to(device)
    rows, variants_agree = [], True
    for M in TIMING_ROWS:
        scores = (torch.randn(M, 896, generator=g) * 2).bfloat16().to(device)
        scores[::5] = torch.tensor(0.25, dtype=torch.bfloat16)  # a few tie-heavy rows
        ties = torch.zeros(M, 896, dtype=torch.bfloat16, device=device)
        weights = torch.empty(M, 16, device=device)
        ids = torch.empty(M, 16, dtype=torch.int32, device=device)
        want = radix4.route(scores, bias, 16, True, 2.5)
        entry = {"M": M}
        for name, (_, flag) in VARIANTS.items():
            route_with(libs[name], scores, bias, weights, ids, flag)
            same = torch.equal(weights, want[0]) and torch.equal(ids, want[1])
            if not same:
                print(f"FAIL variant {name} differs from route() at M={M}")
            variants_agree &= same
            entry[name] = time_graph(lambda lib=libs[name], flag=flag: route_with(lib, scores, bias, weights, ids, flag))
        entry["route_auto"] = time_graph(lambda: radix4.route(scores, bias, 16, True, 2.5))
        entry["route_all_equal"] = time_graph(lambda: radix4.route(ties, bias, 16, True, 2.5))
        entry["torch_native"] = time_graph(lambda: torch_native(scores, bias, 16, 2.5))
        rows.append(entry)
    print(f"variants bit-identical to route(): {variants_agree}")
    return rows, floor, variants_agree


def print_table(rows, floor):
    cols = [k for k in rows[0] if k != "M"]
    print(f"\nus per launch (CUDA graph replay, median of {REPLAYS} replays x {LAUNCHES_PER_GRAPH} launches; "
          f"bf16 logits, fp32 bias, E=896, top-16; empty kernel {floor:.2f} us)")  # fmt: skip
    print(f"{'M':>6} " + " ".join(f"{c:>15}" for c in cols))
    for r in rows:
        print(f"{r['M']:>6} " + " ".join(f"{r[c]:>15.2f}" for c in cols))


def ptxas_report(arch: str) -> str:
    cmd = ["nvcc", *radix4.CUDA_FLAGS, f"-arch={arch}", "-Xptxas", "-v", "-o", "/dev/null", str(radix4.cuda_source())]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    lines = [ln.strip() for ln in (out.stdout + out.stderr).splitlines() if "registers" in ln or "spill" in ln]
    return "\n".join(sorted(set(lines)))


# The exhaustive lab programs (kernels/radix4/lab): contract aiter's and serial's branch-free sigmoid, and the
# model contracts' fast float64 scores (model_scores4 against libm's forms), each over all 2^32 inputs.
EXHAUSTIVE = ("radix4_sigmoid_exhaustive.cu", "radix4_model_scores_exhaustive.cu")


def run_sigmoid_exhaustive(arch: str, program: str = EXHAUSTIVE[0]) -> tuple[bool, str]:
    """Build and run one EXHAUSTIVE program: exit 0 when every input gives the reference's bits."""
    src = Path(__file__).resolve().parents[1] / "kernels" / "radix4" / "lab" / program
    flags = [f for f in radix4.CUDA_FLAGS if f not in ("-shared", "-Xcompiler", "-fPIC")]
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / src.stem
        subprocess.run(["nvcc", *flags, f"-arch={arch}", f"-I{radix4.HERE}", str(src), "-o", str(exe)], check=True)
        run = subprocess.run([str(exe)], capture_output=True, text=True)
    return run.returncode == 0, run.stdout.strip() + run.stderr.strip()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write results here")
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args(argv)
    ok, why = radix4.supported_hardware()
    print(f"supported_hardware: {ok}, {why}")
    if not ok:
        return 1
    device = torch.device("cuda")
    t0 = time.time()
    print(f"build: {radix4.build()} ({time.time() - t0:.1f} s)")
    print(f"available: {radix4.available()}")
    arch = f"sm_{torch.cuda.get_device_capability()[0]}{torch.cuda.get_device_capability()[1]}"
    if torch.version.cuda:
        print("ptxas:\n" + ptxas_report(arch))
    if torch.version.cuda:
        exhaustive_ok = True
        for program in EXHAUSTIVE:
            ok, text = run_sigmoid_exhaustive(arch, program)
            exhaustive_ok &= ok
            print(f"{'ok  ' if ok else 'FAIL'} exhaustive ({program}): {text}")
    else:
        exhaustive_ok = True
    checks_ok, results = run_checks(device)
    checks_ok &= exhaustive_ok
    det_ok, det = run_determinism(device)
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "checks": results,
              "determinism": det}  # fmt: skip
    if not args.skip_timing and torch.version.cuda:
        rows, floor, variants_agree = run_timing(device)
        print_table(rows, floor)
        report["timing_us"], report["empty_kernel_us"] = rows, floor
        det_ok &= variants_agree
    if args.json:
        tmp = args.json.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=1))
        tmp.replace(args.json)
    passed = checks_ok and det_ok
    print(f"\nradix4 GPU check: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
