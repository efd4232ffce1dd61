#!/bin/bash
# One-off GPU call 2: what behind flashinfer-noaux's and sglang-triton's departures; sglang-radix's bounds without the
# strided family (its kernel faults there: a CUDA error ends an in-process run).
set -u
export PYTHONPATH=$PWD ROUTER_KERNEL_CACHE=/tmp/rkc PYTHONUNBUFFERED=1 ROUTER_ENGINE_PATH=$PWD/.engines OMP_NUM_THREADS=2
R=$OUT/v2; W=/tmp/w; mkdir -p $R $W
t0=$(date +%s)
python3 - > $R/build.txt 2>&1 <<'PY'
import concurrent.futures as cf
import kernels.engines.sglang_radix as sr, kernels.engines.flashinfer_noaux as fi
with cf.ThreadPoolExecutor(2) as pool:
    for n, f in {"sglang-radix": pool.submit(sr.build), "flashinfer-noaux": pool.submit(fi.build)}.items():
        print(n, f.result())
PY
echo "build +$(( $(date +%s) - t0 )) s" >> $R/build.txt
spy() { local name=$1 lim=$2; shift 2; timeout $lim python3 .gpu-48/bounds_spy.py $R/$name.json -- check "$@" --device cuda --out $W/$name --force --quiet --no-isolate > $R/$name.txt 2>&1; echo "rc=$? +$(( $(date +%s) - t0 )) s" >> $R/$name.txt; }
FAMS=random_bf16,random_fp32,bf16_near_ties,all_equal,tie_pool_straddle,tie_pool_above,nan_sparse,nan_dense,nan_neg_inf_bias,few_valid,inf_logits,saturated,all_zero,signed_zero,subnormal,sigmoid_underflow,zero_sum,batch_sizes
lim=$(( 450 - ($(date +%s) - t0) ))
spy flashinfer-k2-underflow $lim --candidate flashinfer-noaux --contract aiter --experts 384 --topk 8 --rows 4000 --families sigmoid_underflow,subnormal &
spy flashinfer-dsv3-underflow $lim --candidate flashinfer-noaux --contract deepseek-v3 --rows 4000 --families sigmoid_underflow,subnormal,few_valid &
spy sglang-triton-dsv3 $lim --candidate sglang-triton --contract deepseek-v3 --rows 20000 &
spy sglang-radix $lim --candidate sglang-radix --rows 20000 --families $FAMS &
spy sglang-radix-unsorted $lim --candidate sglang-radix-unsorted --rows 20000 --families $FAMS &
wait
for d in $W/*/; do n=$(basename $d); mkdir -p $R/b/$n; cp $d/summary.json $d/report.md $d/details.json $R/b/$n/ 2>/dev/null; done
python3 - > $R/rows.txt 2>&1 <<'PY'
# the selection rows of flashinfer's underflow runs, with the experts' sigmoids and biases (why the departure)
import json, glob
for p in sorted(glob.glob("/tmp/w/flashinfer-*/details.json")) + sorted(glob.glob("/tmp/w/sglang-triton-dsv3/details.json")):
    rows = json.load(open(p))
    sel = [r for r in rows if r.get("clause") in ("selection", "group_mask") and r.get("verdict") == "mismatch"][:4]
    print("==", p, len(rows), "details,", len(sel), "selection/group_mask mismatches shown")
    for r in sel:
        print(json.dumps(r)[:2500])
PY
for p in /tmp/w/flashinfer-*/details.json /tmp/w/sglang-triton-dsv3/details.json; do timeout 100 python3 .gpu-48/row_values.py $p 3 >> $R/row_values.txt 2>&1; done
cd $OUT && tar czf all.tgz v2 && rm -rf v2
echo "done +$(( $(date +%s) - t0 )) s"
