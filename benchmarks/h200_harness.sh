#!/usr/bin/env bash
# The H200 batch for the harness itself (issues 16, 17, 19): the checks run where the GPU
# candidates run, isolated by default, with bulk cases drawn on the device.
#   1. radix4 over 1,000,000 rows (isolated), serial --against block-argmax --exact, the oracle
#      under deepseek-v3 on the GPU;
#   2. benchmarks/harness_speed.py: the raw oracle, radix4 in-process and isolated (bytes, then
#      CUDA IPC), rows/s per stage and peak RSS;
#   3. the engines' own routers (benchmarks/h200_engines.sh), when .engines/ travelled along.
# Every step has its own time limit, so one slow step cannot take the call down; the bundles
# are tarred into $OUT.
#   OUT=/tmp/out ROWS=20M bash benchmarks/h200_harness.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
B=${WORK:-/tmp/harness-batch}
ROWS=${ROWS:-20M}
rm -rf "$B" && mkdir -p "$B" "$OUT"
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-kernel-cache}
step() { echo; echo "== $1 ($(date +%T))"; }
run() { local limit=$1 log=$2; shift 2; timeout "$limit" "$@" > "$B/$log" 2>&1; echo "exit $? ($log)"; tail -${TAIL:-6} "$B/$log"; }

step "build"
python3 -c "import kernels.radix4 as r, kernels.serial.scan as s, kernels.serial.block_argmax as b; r.build(); s.build('cuda'); b.build('cuda'); print('built')" 2>&1 | tail -2

step "checks"
run 120 radix4.log python3 -m contracts check --candidate radix4 --rows 1000000 --out "$B/h200-radix4" --quiet
run 120 serial-vs-block.log python3 -m contracts check --candidate serial --against block-argmax --exact --rows 200000 --out "$B/h200-serial-vs-block-argmax" --quiet
run 90 oracle-ds.log python3 -m contracts check --candidate oracle --contract deepseek-v3 --device cuda --rows 200000 --out "$B/h200-oracle-deepseek-v3" --quiet
run 90 radix4-repeat.log python3 -m contracts check --candidate radix4 --repeat 3 --rows 100000 --out "$B/h200-radix4-repeat3" --quiet

step "harness speed"
TAIL=12 run 200 speed.log python3 benchmarks/harness_speed.py --device cuda --candidate radix4 --rows "$ROWS" --json "$B/harness_speed_gpu.json"
TAIL=6 CONTRACTS_CUDA_IPC=0 run 120 speed-bytes.log python3 benchmarks/harness_speed.py --device cuda --candidate radix4 --rows "$ROWS" --modes isolated --json "$B/harness_speed_gpu_bytes.json"  # outputs as bytes, not IPC

if [ -d .engines ]; then
    step "engines"
    TAIL=40 run 240 engines.log env OUT="$B/engines" bash benchmarks/h200_engines.sh
fi

step "pack"
for f in "$B"/h200-*/summary.json; do python3 -c "
import json,sys; s=json.load(open(sys.argv[1])); st=s.get('stages') or {}
print(sys.argv[1].split('/')[-2], s['status'], s['rows_checked'], 'mismatched', s['mismatched_rows'], 'near', s['near_tie_rows'], 'rows/s', s['rows_per_s'], 'rss', st.get('peak_rss_mb'))" "$f"; done
cp "$B"/harness_speed_gpu*.json "$OUT"/ 2>/dev/null
tar -czf "$OUT/harness-batch.tgz" -C "$B" --exclude='*.parquet' --exclude='mismatches.csv' .
ls -la "$OUT"
