#!/usr/bin/env bash
# The H200 batch for the harness's own tools: the torch candidates on CUDA,
# radix4 with --repeat (graph replay), the tie-order probes, the bench of every
# GPU candidate, and a short nightly. Results are tarred into $OUT.
#   OUT=/tmp/out bash benchmarks/h200_tools.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
B=/tmp/tools
mkdir -p "$B" "$OUT"
python3 -c "import kernels.radix4 as r, kernels.serial.scan as s, kernels.serial.block_argmax as b; r.build(); s.build('cuda'); b.build('cuda')"
python3 -m contracts.check --candidate oracle,torch-native,aiter-model --device cuda --rows 200000 --out "$B/torch-candidates" --quiet > "$B/torch-candidates.log" 2>&1 &
python3 -m contracts.check --candidate radix4 --repeat 2 --rows 100000 --out "$B/radix4-repeat" --quiet > "$B/radix4-repeat.log" 2>&1 &
for c in torch-native radix4 block-argmax aiter-model; do
    python3 -m contracts.probe --candidate "$c" --device cuda --out "$B/probe-$c" > "$B/probe-$c.log" 2>&1
done
python3 -m contracts.bench --candidate radix4,torch-native,block-argmax,serial,aiter-model --device cuda --out "$B/bench" > "$B/bench.log" 2>&1
wait
for f in "$B"/*.log; do echo "== $f"; tail -45 "$f"; done
timeout 200 python3 -m contracts.nightly --out "$B/nightly" --rows 20000 > "$B/nightly.log" 2>&1; echo "nightly exit $?"; tail -30 "$B/nightly.log"
tar -czf "$OUT/tools.tgz" -C "$B" --exclude='*.parquet' --exclude='mismatches.csv' .
