"""Issue 38 lab (not shipped): the Kimi shapes' bits, this branch's radix4_route against main's (1M rows a shape)."""
import ctypes, json, sys
from pathlib import Path
import torch
import kernels.radix4 as r4
from kernels._build import compile_shared, load_library

old_dir = Path(sys.argv[1]).resolve()  # main's kernels/radix4
out = sys.argv[2]
new = load_library(r4.build())
old = load_library(compile_shared(old_dir / "radix4.cu", compiler="nvcc", flags=[*r4.CUDA_FLAGS, "-arch=sm_90"],
                                  depends=[old_dir / n for n in ("radix4_router.h", "tie_order.h", "radix4_entry.h", "lanes_cuda.cuh")]))
p, i, i64, f = ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_float
for lib in (new, old):
    lib.radix4_route.argtypes, lib.radix4_route.restype = [p, i, i64, p, i, i64, i, i, i, f, p, p, p], i
codes = {torch.float32: 0, torch.bfloat16: 1}
g = torch.Generator(device="cuda").manual_seed(38)
report = {}
def run(lib, x, b, k, flags):
    M, E = x.shape
    w = torch.empty(M, k, device="cuda"); ids = torch.empty(M, k, dtype=torch.int32, device="cuda")
    rc = lib.radix4_route(x.data_ptr(), codes[x.dtype], x.stride(0), b.data_ptr(), codes[b.dtype], M, E, k, flags, 2.5,
                          w.data_ptr(), ids.data_ptr(), torch.cuda.current_stream().cuda_stream)
    assert rc == 0, rc
    return w, ids
for E, K in ((896, 16), (384, 8), (224, 16)):
    rows = same_ids = same_w = 0
    n = 62500
    for fam in ("random", "levels", "nan", "saturated"):
        for sdt, bdt in ((torch.bfloat16, torch.float32), (torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16), (torch.float32, torch.float32)):
            x = torch.randn(n, E, device="cuda", generator=g) * 2
            if fam == "levels": x = (x * 2).round() / 2
            if fam == "nan": x[torch.rand(n, E, device="cuda", generator=g) < 0.02] = float("nan")
            if fam == "saturated": x = (x * 40).round()
            b = (torch.randn(E, device="cuda", generator=g) * 0.05).to(bdt)
            if fam == "levels": b = torch.zeros(E, device="cuda", dtype=bdt)
            x = x.to(sdt)
            for flags in (1, 1 | 2, 1 | 4, 1 | 16, 0):
                a, c = run(new, x, b, K, flags), run(old, x, b, K, flags)
                rows += n
                same_ids += int((a[1] == c[1]).all(1).sum())
                same_w += int((a[0].view(torch.int32) == c[0].view(torch.int32)).all(1).sum())
    report[f"{E}/{K}"] = {"rows": rows, "ids_identical_rows": same_ids, "weight_bits_identical_rows": same_w}
    print(E, K, report[f"{E}/{K}"], flush=True)
json.dump(report, open(out, "w"), indent=1)
