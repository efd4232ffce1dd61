"""Issue 38 lab (not shipped): time grouped 256/8 (8 groups keep 4) routers with contracts.run.bench's timer."""
import json, statistics, sys
import torch
from contracts.run.bench import BenchOptions, launch_floor, time_cuda, make_inputs
import kernels.radix4 as r4

out = sys.argv[1]
opts = BenchOptions()
floor = launch_floor(opts, "cuda")
res = {"launch_floor_us": floor, "shape": "256/8 grouped 8 keep 4, bf16 logits, bf16 bias (bench defaults)", "points": {}}
peers = {}
for name, mod in (("flashinfer-noaux", "kernels.engines.flashinfer_noaux"), ("sglang-triton", "kernels.engines.sglang_triton"),
                  ("sglang-torch", "kernels.engines.sglang_torch"), ("vllm-torch", "kernels.engines.vllm_torch")):
    try:
        import importlib
        m = importlib.import_module(mod)
        ok = m.supported_hardware()
        ok = ok[0] if isinstance(ok, tuple) else ok
        if ok:
            m.build()
            peers[name] = m.bench_launch
        else:
            res.setdefault("unavailable", {})[name] = str(m.supported_hardware())
    except Exception as exc:  # noqa: BLE001
        res.setdefault("unavailable", {})[name] = f"{type(exc).__name__}: {exc}".splitlines()[0]
for M in (1, 64, 1024, 4096):
    scores, bias = make_inputs(M, experts=256, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cuda", seed=0, rotate=1)
    s = scores[0]
    row = {}
    for name, pdl in (("radix4", False), ("radix4-pdl", True)):
        route = r4.router("deepseek-v3", pdl=pdl)
        t = time_cuda(lambda: route(s, bias, 8, True, 2.5, num_expert_group=8, topk_group=4), 20, 25, 3)
        row[name] = round(statistics.median(t.samples_us), 3)
    for name, bench in peers.items():
        try:
            fn = bench(s, bias, 8, True, 2.5, num_expert_group=8, topk_group=4)
            t = time_cuda(fn, 20, 25, 3)
            row[name] = round(statistics.median(t.samples_us), 3)
        except Exception as exc:  # noqa: BLE001
            row[name] = f"error: {type(exc).__name__}: {exc}".splitlines()[0][:160]
    res["points"][M] = row
    print(M, row, flush=True)
# the ungrouped model contracts (correctly rounded sigmoid) at their shapes, beside contract aiter's route
for contract, E, K in (("minimax-m2", 256, 8), ("kimi-k2", 384, 8), ("glm4-moe", 160, 8), ("dots1", 128, 6)):
    for M in (1, 64, 1024, 4096):
        scores, bias = make_inputs(M, experts=E, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cuda", seed=0, rotate=1)
        s = scores[0]
        row = {}
        for c in (contract, "aiter"):
            for name, pdl in (("radix4", False), ("radix4-pdl", True)):
                route = r4.router(c, pdl=pdl)
                t = time_cuda(lambda: route(s, bias, K, True, 1.0), 20, 25, 3)
                row[f"{name}[{c}]"] = round(statistics.median(t.samples_us), 3)
        res["points"][f"{E}/{K} M={M}"] = row
        print(E, K, M, row, flush=True)
# deepseek-v4 (sqrt(softplus(x)) scores): no peer implements it; radix4's own time, beside its 896/16 aiter time.
for E, K in ((256, 6), (384, 6), (896, 16)):
    for M in (1, 64, 1024, 4096):
        scores, bias = make_inputs(M, experts=E, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cuda", seed=0, rotate=1)
        s = scores[0]
        row = {}
        for contract in (("deepseek-v4", "aiter") if E != 896 else ("aiter",)):
            for name, pdl in (("radix4", False), ("radix4-pdl", True)):
                route = r4.router(contract, pdl=pdl)
                t = time_cuda(lambda: route(s, bias, K, True, 1.5), 20, 25, 3)
                row[f"{name}[{contract}]"] = round(statistics.median(t.samples_us), 3)
        res["points"][f"{E}/{K} M={M}"] = row
        print(E, K, M, row, flush=True)
json.dump(res, open(out, "w"), indent=1)
print("floor", floor)
