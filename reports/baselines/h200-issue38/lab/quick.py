import statistics, json, sys, torch
from contracts.run.bench import time_cuda, make_inputs, launch_floor, BenchOptions
import kernels.radix4 as r4
print("floor", round(launch_floor(BenchOptions(), "cuda"), 3))
for contract, E, K, groups in (("deepseek-v3", 256, 8, dict(num_expert_group=8, topk_group=4)), ("deepseek-v4", 256, 6, {}),
                               ("deepseek-v4", 384, 6, {}), ("glm4-moe", 160, 8, {}), ("kimi-k2", 384, 8, {})):
    for M in (1, 64, 1024, 4096):
        scores, bias = make_inputs(M, experts=E, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cuda", seed=0, rotate=1)
        s = scores[0]
        row = {}
        for name, pdl in (("radix4", False), ("radix4-pdl", True)):
            try:
                route = r4.router(contract, pdl=pdl)
                t = time_cuda(lambda: route(s, bias, K, True, 2.5, **groups), 20, 25, 3)
                row[name] = round(statistics.median(t.samples_us), 3)
            except Exception as exc:
                row[name] = str(exc)[:100]
        print(contract, f"{E}/{K}", M, row, flush=True)
