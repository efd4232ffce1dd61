#!/bin/bash
# One-off GPU call: build, then in parallel: our CUDA kernels' 1M-row checks (the 27 call contexts are pinned cases),
# and the GPU engines under their declared bounds with the largest departures recorded (bounds_spy.py).
set -u
export PYTHONPATH=$PWD ROUTER_KERNEL_CACHE=/tmp/rkc PYTHONUNBUFFERED=1 ROUTER_ENGINE_PATH=$PWD/.engines OMP_NUM_THREADS=2
R=$OUT/v; W=/tmp/w; mkdir -p $R $W
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt
python3 -c "import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__)" >> $R/gpu.txt 2>&1
python3 - > $R/build.txt 2>&1 <<'PY'
import concurrent.futures as cf
import kernels.radix4 as r, kernels.radix4.serial as rs, kernels.serial.block_argmax as b
import kernels.engines.sglang_radix as sr, kernels.engines.flashinfer_noaux as fi
jobs = {"radix4": r.build, "radix4-serial": rs.build, "block-argmax": lambda: b.build("cuda"), "sglang-radix": sr.build, "flashinfer-noaux": fi.build}
with cf.ThreadPoolExecutor(len(jobs)) as pool:
    for name, fut in {n: pool.submit(f) for n, f in jobs.items()}.items():
        try:
            print(name, fut.result())
        except Exception as exc:
            print(name, "build failed:", type(exc).__name__, str(exc)[:300])
PY
echo "build +$(( $(date +%s) - t0 )) s" >> $R/build.txt
chk() { local name=$1 lim=$2; shift 2; timeout $lim python3 -m contracts check "$@" --device cuda --out $W/$name --force --quiet > $R/$name.txt 2>&1; echo "rc=$? +$(( $(date +%s) - t0 )) s" >> $R/$name.txt; }
spy() { local name=$1 lim=$2; shift 2; timeout $lim python3 .gpu-48/bounds_spy.py $R/$name.json -- check "$@" --device cuda --out $W/$name --force --quiet --no-isolate > $R/$name.txt 2>&1; echo "rc=$? +$(( $(date +%s) - t0 )) s" >> $R/$name.txt; }
lim=$(( 540 - ($(date +%s) - t0) ))
( chk radix4 $lim --candidate radix4 --rows 1000000; chk radix4-serial $lim --candidate radix4-serial --rows 1000000 ) &
( chk radix4-pdl $lim --candidate radix4-pdl --rows 1000000; chk radix4-serial-pdl $lim --candidate radix4-serial-pdl --rows 200000 ) &
spy sglang-radix $lim --candidate sglang-radix --rows 20000 &
spy sglang-radix-unsorted $lim --candidate sglang-radix-unsorted --rows 20000 &
spy sglang-triton-k3 $lim --candidate sglang-triton --contract aiter --rows 20000 &
spy sglang-triton-k2 $lim --candidate sglang-triton --contract aiter --experts 384 --topk 8 --rows 20000 &
spy sglang-triton-dsv3 $lim --candidate sglang-triton --contract deepseek-v3 --rows 20000 &
spy flashinfer-k2 $lim --candidate flashinfer-noaux --contract aiter --experts 384 --topk 8 --rows 20000 &
spy flashinfer-dsv3 $lim --candidate flashinfer-noaux --contract deepseek-v3 --rows 20000 &
wait
for d in $W/*/; do n=$(basename $d); mkdir -p $R/b/$n; cp $d/summary.json $d/report.md $R/b/$n/ 2>/dev/null; done
cd $OUT && tar czf all.tgz v && rm -rf v
echo "done +$(( $(date +%s) - t0 )) s"
