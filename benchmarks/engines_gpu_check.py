"""Engine adapters on a GPU: availability, a check against plain references, latency under CUDA graph replay.

    python benchmarks/engines_gpu_check.py [--out engines_gpu_check.json] [--rows 1,1024,4096] [--quick]

Run by ``benchmarks/gpu_all.sh engines`` on a host whose engine files are in
``.engines/`` (``ROUTER_ENGINE_PATH``). For every adapter variant it prints
one line: available or why not, then the check (a few rows per shape:
random fp32 and bf16 rows, an all-equal row, a row with NaN, a zero-sum
row, each against a plain torch reference of what that engine documents),
then microseconds per call under CUDA graph replay at 896/16 and 384/8,
with and without PDL where the adapter takes a ``pdl`` flag. A wrong shim
shows up here as a failed check, before any harness run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import time
import traceback

import torch

# name -> (module, route function, extra keyword arguments, takes pdl, lowest-id ties, output order)
VARIANTS = {
    "sglang-torch": ("sglang_torch", "route", {}, False, None, "any"),
    "sglang-torch-as-served": ("sglang_torch", "route_as_served", {}, False, None, "any"),
    "vllm-torch": ("vllm_torch", "route", {}, False, None, "any"),
    "lmdeploy-torch": ("lmdeploy_torch", "route", {}, False, None, "any"),
    "sglang-radix": ("sglang_radix", "route", {}, True, True, "value"),
    "sglang-radix-unsorted": ("sglang_radix", "route_unsorted", {}, True, True, "id"),
    "sglang-triton": ("sglang_triton", "route", {}, True, True, "value"),
    "flashinfer-noaux": ("flashinfer_noaux", "route", {}, True, True, "any"),
    "flashinfer-noaux-native-dtype": ("flashinfer_noaux", "route_native_dtype", {}, True, True, "any"),
}
SHAPES = ((896, 16), (384, 8))
EPSILON = {"sglang_torch": 1e-20, "lmdeploy_torch": 1e-20, "flashinfer_noaux": 1e-20}
# Absolute error of each kernel's sigmoid against the fp32 one: rows whose k-th and (k+1)-th ranking
# values are closer than a few of these are near ties and not checked; weights get the same allowance.
# FlashInfer's 0.5 * tanh(0.5 x) + 0.5 compiles to tanh.approx.f32 under -use_fast_math (about 2^-11 relative).
NAN_NEVER_CHOSEN = ("sglang_radix", "sglang_triton")  # both floor a NaN ranking value to -1e30
SIGMOID_ERROR = {"sglang_radix": 1e-6, "sglang_triton": 1e-6, "flashinfer_noaux": 5e-4}
TORCH_MODULES = ("sglang_torch", "vllm_torch", "lmdeploy_torch")


def _module(name):
    return importlib.import_module(f"kernels.engines.{name}")


def _covered(module, E, k, dtype, bias_dtype, rows=8):
    return module.covered(rows=rows, experts=E, topk=k, dtype=dtype, bias_dtype=bias_dtype)


def _check_rows(E, k, dtype, device):
    """Logits rows: random, all-equal, one NaN, all very negative (zero sum)."""
    gen = torch.Generator(device="cpu").manual_seed(E * 7 + k)
    x = torch.randn(8, E, generator=gen)
    x[4] = 0.25  # all equal: every engine kernel breaks this tie to the lowest ids
    x[5, 3] = float("nan")
    x[6] = -200.0  # sigmoid 0 everywhere: sum 0
    bias = torch.randn(E, generator=gen) * 0.01
    return x.to(dtype).to(device), bias.to(device)


def check(variant: str, E: int, k: int, dtype, device="cuda", notes=None) -> list[str]:
    """Problems found (empty: the adapter agrees with its reference); what was seen goes to ``notes``."""
    notes = [] if notes is None else notes
    mod_name, fn_name, extra, _, lowest_ties, order = VARIANTS[variant]
    module = _module(mod_name)
    fn = getattr(module, fn_name)
    x, bias = _check_rows(E, k, dtype, device)
    problems = []
    # The all-equal row only ties exactly without a bias: route it with a zero bias.
    zero_bias = torch.zeros_like(bias)
    w, ids = fn(x, bias, k, True, 2.5, **extra)
    wz, idz = fn(x, zero_bias, k, True, 2.5, **extra)
    if w.dtype != torch.float32 or ids.dtype != torch.int32 or tuple(ids.shape) != (8, k):
        problems.append(f"outputs {w.dtype}/{ids.dtype} {tuple(ids.shape)}")
    torch_path = mod_name in TORCH_MODULES and fn_name != "route_as_served"
    # The torch paths take the sigmoid in the logits dtype; the kernels (and as-served) in fp32.
    sig = torch.sigmoid(x).float() if torch_path else torch.sigmoid(x.float())
    choice = sig + bias
    low_precision_weights = dtype != torch.float32 and (torch_path or fn_name == "route_native_dtype")
    for row in (0, 1, 2, 3):  # random rows: the set of ids, away from near ties
        ranked = torch.sort(choice[row], descending=True).values
        err = SIGMOID_ERROR.get(mod_name, 1e-7)
        if (ranked[k - 1] - ranked[k]).abs() < 4 * err + 1e-6:
            continue
        ref = set(torch.topk(choice[row], k).indices.tolist())
        if set(ids[row].tolist()) != ref:
            problems.append(f"row {row}: ids {sorted(ids[row].tolist())} != reference {sorted(ref)}")
            continue
        ref_w = sig[row, ids[row].long()]
        ref_w = ref_w / (ref_w.sum() + EPSILON.get(mod_name, 0.0)) * 2.5
        tol = 2e-2 if low_precision_weights else max(1e-4, 8 * err)
        if not torch.allclose(w[row], ref_w, rtol=tol, atol=1e-6):
            problems.append(f"row {row}: weights off by {(w[row] - ref_w).abs().max().item():.3g}")
        vals = choice[row, ids[row].long()]
        if order == "value" and not bool((vals[:-1] >= vals[1:]).all()):
            problems.append(f"row {row}: output not in value order")
        if order == "id" and not bool((ids[row][:-1] < ids[row][1:]).all()):
            problems.append(f"row {row}: output not in id order")
    if lowest_ties and sorted(idz[4].tolist()) != list(range(k)):
        problems.append(f"all-equal row: ids {sorted(idz[4].tolist())}, expected the lowest {k}")
    if 3 in ids[5].tolist() and mod_name in NAN_NEVER_CHOSEN:
        problems.append("NaN row: the NaN expert was chosen")
    notes.append(f"NaN expert {'chosen' if 3 in ids[5].tolist() else 'not chosen'}")
    if mod_name == "vllm_torch":
        if not torch.isnan(w[6]).all():
            problems.append("zero-sum row: expected vLLM's NaN weights")
    elif not torch.isfinite(w[6]).all():
        problems.append(f"zero-sum row: non-finite weights {w[6].tolist()[:4]}")
    return problems


def time_graph(fn, x, bias, k, extra, *, calls=20, replays=50) -> float:
    """Microseconds per call: a CUDA graph of ``calls`` routes, replayed ``replays`` times."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn(x, bias, k, True, 2.5, **extra)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn(x, bias, k, True, 2.5, **extra)
    graph.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1000.0 / (calls * replays)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--rows", default="1,1024,4096")
    parser.add_argument("--quick", action="store_true", help="fewer replays")
    parser.add_argument("--device", default="cuda", help="cpu: only the torch adapters' checks (a dry run of this script)")
    args = parser.parse_args(argv)
    rows = [int(r) for r in args.rows.split(",")]
    from kernels import engines

    print(f"engine paths: {engines.engine_paths() or 'installed distributions'}")
    cpu = args.device == "cpu"
    where = "cpu" if cpu else torch.cuda.get_device_name()
    print(f"torch {torch.__version__} cuda {torch.version.cuda} on {where}")
    for name in () if cpu else ("sglang_radix", "flashinfer_noaux"):
        module = _module(name)
        try:
            t0 = time.time()
            path = module.build()
            note = f"; {module.build_note()}" if hasattr(module, "build_note") else ""
            print(f"build {name}: {path.name} in {time.time() - t0:.1f} s{note}")
        except Exception as exc:  # noqa: BLE001 -- report and go on
            print(f"build {name}: FAILED {type(exc).__name__}: {str(exc)[-2000:]}")
    results = {}
    for variant, (mod_name, fn_name, extra, takes_pdl, _, _) in VARIANTS.items():
        module = _module(mod_name)
        if cpu and mod_name not in TORCH_MODULES:
            continue
        ok, why = module.available()
        entry = {"available": ok, "why": why, "check": {}, "us": {}}
        results[variant] = entry
        if not ok:
            print(f"{variant:30s} unavailable: {why}")
            continue
        fn = getattr(module, fn_name)
        problems, seen = [], set()
        for E, k in SHAPES:
            for dtype in (torch.float32, torch.bfloat16):
                if not _covered(module, E, k, dtype, torch.float32):
                    continue
                notes = []
                try:
                    found = check(variant, E, k, dtype, args.device, notes)
                except Exception as exc:  # noqa: BLE001
                    found = [f"raised {type(exc).__name__}: {exc}".splitlines()[0]]
                    traceback.print_exc()
                entry["check"][f"{E}/{k}/{str(dtype)[6:]}"] = {"problems": found, "seen": notes}
                problems += [f"{E}/{k} {str(dtype)[6:]}: {p}" for p in found]
                seen |= set(notes)
        timings = []
        for E, k in () if cpu else SHAPES:
            for M in rows:
                if not _covered(module, E, k, torch.bfloat16, torch.float32, rows=M):
                    continue
                x = torch.randn(M, E, device="cuda").bfloat16()
                bias = (torch.randn(E, device="cuda") * 0.01).float()
                for pdl in (True, False) if takes_pdl else (None,):
                    kw = dict(extra, **({"pdl": pdl} if pdl is not None else {}))
                    label = f"{E}/{k} M={M}" + ("" if pdl is None else (" pdl" if pdl else " no-pdl"))
                    try:
                        us = time_graph(fn, x, bias, k, kw, replays=10 if args.quick else 50)
                        entry["us"][label] = round(us, 2)
                        timings.append(f"{label} {us:.2f}")
                    except Exception as exc:  # noqa: BLE001
                        entry["us"][label] = f"{type(exc).__name__}: {exc}".splitlines()[0]
                        timings.append(f"{label} error {type(exc).__name__}")
        status = "check ok" if not problems else f"CHECK FAILED ({len(problems)}): " + "; ".join(problems[:4])
        seen_text = f" (seen: {', '.join(sorted(seen))})" if seen else ""
        print(f"{variant:30s} available ({why}); {status}{seen_text}; us/call (graph): " + ", ".join(timings))
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(results, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
