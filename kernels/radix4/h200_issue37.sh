#!/usr/bin/env bash
# Issue 37 on one H200: builds, the launch-shape sweep, the bench of record, the 1M-row checks.
#   OUT=/tmp/out STEPS="build sweep bench check" bash kernels/radix4/h200_issue37.sh
# Engines come from .engines/ (scripts/engines.sh extract). Everything lands in $OUT/issue37.tgz.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ROUTER_ENGINE_PATH=$PWD/.engines
: "${OUT:?set OUT}"
B=${WORK:-/tmp/issue37}
mkdir -p "$B"
STEPS=${STEPS:-build sweep bench bench384 check}
BENCH=radix4,radix4-pdl,sglang-radix-unsorted,sglang-triton,block-argmax
step() { echo; echo "== $1 ($(date +%T))"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
if has build; then
    step build
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
    python3 -c "import kernels.radix4 as r; r.build(); print('radix4 aiter built')" &
    python3 -c "import kernels.radix4 as r; r.build(contract='serial'); print('radix4 serial built')" &
    python3 -c "import kernels.serial.block_argmax as b; b.build('cuda'); print('block-argmax built')" &
    python3 -c "from kernels.engines import sglang_radix as m; m.build(); print('sglang-radix built')" &
    python3 -c "from kernels.engines import flashinfer_noaux as m; m.build(); print('flashinfer built')" &
    wait
fi
if has sweep; then
    step sweep
    timeout ${SWEEP_LIMIT:-300} python3 -m kernels.radix4.shape_sweep --out "$B/sweep" ${SWEEP_ARGS:-} 2>&1 | tail -12
fi
if has bench; then
    step bench
    timeout 200 python3 -m contracts bench --candidate $BENCH --device cuda --out "$B/bench${BENCH_TAG:-}" 2>&1 | tail -30
fi
if has bench384; then
    step "bench 384/8"
    timeout 150 python3 -m contracts bench --candidate radix4,flashinfer-noaux,sglang-triton --experts 384 --topk 8 --device cuda --out "$B/bench-384-8" 2>&1 | tail -16
fi
if has check; then
    step check
    for c in radix4 radix4-pdl radix4-serial; do
        timeout 150 python3 -m contracts check --candidate $c --device cuda --rows 1000000 --out "$B/check-$c" --quiet 2>&1 | tail -3
    done
    timeout 100 python3 -m contracts check --candidate radix4-serial --against block-argmax --exact --device cuda --rows 1000000 --out "$B/check-serial-vs-block" --quiet 2>&1 | tail -3
fi
step pack
tar -czf "$OUT/issue37.tgz" -C "$B" --exclude='*.parquet' --exclude='mismatches.csv' .
ls -la "$OUT"
