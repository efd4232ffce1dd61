#!/usr/bin/env bash
# The H200 verification batch: every GPU candidate through contracts.check on
# 1,000,000 rows (all families, bf16 and fp32 logits), the serial/block-argmax
# bit-identity run, and the kernels' own graph/repeat/timing scripts.
# Bundles are tarred into $OUT (the device tool returns few files).
#   OUT=/tmp/out [CHECKS_ONLY=1] bash benchmarks/h200_verify.sh [ROWS]
set -u
ROWS=${1:-1000000}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
B=/tmp/bundles
mkdir -p "$B" "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.cuda.get_device_name())"
# Build once up front so the parallel checks below do not race on the cache.
python3 -c "import kernels.radix4 as r, kernels.serial.scan as s, kernels.serial.block_argmax as b; print(r.build()); print(s.build('cuda')); print(b.build('cuda'))"
python3 -m contracts.check --candidate radix4 --rows "$ROWS" --out "$B/radix4" --quiet > "$B/radix4.log" 2>&1 &
python3 -m contracts.check --candidate serial --device cuda --rows "$ROWS" --out "$B/serial" --quiet > "$B/serial.log" 2>&1 &
python3 -m contracts.check --candidate block-argmax --rows "$ROWS" --out "$B/block-argmax" --quiet > "$B/block-argmax.log" 2>&1 &
python3 -m contracts.check --candidate serial --against block-argmax --exact --device cuda --rows "$ROWS" --out "$B/serial-vs-block-argmax" --quiet > "$B/against.log" 2>&1 &
python3 -m contracts.check --candidate oracle,torch-native,aiter-model --device cuda --rows 200000 --out "$B/torch-candidates" --quiet > "$B/torch-candidates.log" 2>&1 &
wait
for f in "$B"/*.log; do echo "== $f"; cat "$f"; done
if [ -z "${CHECKS_ONLY:-}" ]; then
    python3 benchmarks/oracle_speed.py --device cuda
    python3 benchmarks/radix4_gpu_check.py --json "$B/radix4_gpu_check.json" 2>&1 | tail -40
    python3 benchmarks/serial_gpu_check.py --json "$B/serial_gpu_check.json" 2>&1 | tail -25
fi
tar -czf "$OUT/bundles.tgz" -C "$B" .
