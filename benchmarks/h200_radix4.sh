#!/usr/bin/env bash
# The H200 batch for the radix4 kernel alone, after a kernel change: the
# 1,000,000-row check over every family, the edge families, --repeat 2 with
# graph replay, the tie-order probe, a hypothesis search, then (on a quiet
# GPU) the bench of every GPU candidate. Bundles are tarred into $OUT.
# The kernel's own script (benchmarks/radix4_gpu_check.py) and the step
# clocks (benchmarks/radix4_lab.py) are run separately.
#   OUT=/tmp/out bash benchmarks/h200_radix4.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
B=/tmp/radix4-batch
mkdir -p "$B" "$OUT"
python3 -c "import kernels.radix4 as r, kernels.serial.scan as s, kernels.serial.block_argmax as b; r.build(); s.build('cuda'); b.build('cuda')"
python3 -m contracts.check --candidate radix4 --rows 1000000 --out "$B/h200-radix4" --quiet > "$B/radix4.log" 2>&1 &
python3 -m contracts.check --candidate radix4 --device cuda --families sigmoid_underflow,saturated,subnormal,zero_sum,signed_zero \
    --rows 60000 --out "$B/h200-edge-families-radix4" --quiet > "$B/edge.log" 2>&1 &
python3 -m contracts.check --candidate radix4 --repeat 2 --rows 100000 --out "$B/h200-radix4-repeat" --quiet > "$B/repeat.log" 2>&1 &
python3 -m contracts.probe --candidate radix4 --device cuda --out "$B/h200-probe-radix4" > "$B/probe.log" 2>&1
python3 -m contracts.search --candidate radix4 --examples 300 --no-database --device cuda --out "$B/h200-search-radix4" > "$B/search.log" 2>&1
wait
python3 -m contracts.bench --candidate radix4,torch-native,block-argmax,serial,aiter-model --device cuda --out "$B/bench" > "$B/bench.log" 2>&1
for f in "$B"/*.log; do echo "== $f"; tail -12 "$f"; done
tar -czf "$OUT/radix4-batch.tgz" -C "$B" --exclude='*.parquet' --exclude='mismatches.csv' .
