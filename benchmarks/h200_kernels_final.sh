#!/usr/bin/env bash
# The H200 batch for the radix kernels (kernels/radix4: radix4, radix4 with
# PDL, radix4-serial) after a kernel change, in one call:
#   1. every library built in parallel (the step-clock builds too);
#   2. benchmarks/radix4_kernels_bench.py: the exhaustive sigmoid checks,
#      bit identity on >= 1,000,000 rows (radix4-serial against block-argmax,
#      radix4 against PREV when given, PDL against plain, the variants against
#      the default), PDL in graphs, the oracle comparison, and the side-by-side
#      table (graph replay, M = 1 .. 4096, 896/16, 384/8, 224/16) with the
#      tuning variants;
#   then benchmarks/serial_gpu_check.py --skip-timing (serial = block-argmax);
#   3. benchmarks/radix4_lab.py step clocks (aiter plain and PDL, the untuned
#      switches, serial);
#   4. ncu instruction counts of one launch per configuration, where ncu runs.
# Prints a compact table at the end; $OUT gets kernels_bench.txt / .json,
# lab.txt and kernels_final.tgz (every log; the work folder is $WORK,
# default /tmp/kernels-final).
#
#   OUT=/tmp/out bash benchmarks/h200_kernels_final.sh [PREV_DIR] [VARIANTS]
#
# PREV_DIR: an earlier radix4 kernel's sources (radix4.cu and its headers),
# e.g. from `git archive <commit> kernels/radix4`; VARIANTS: comma-separated
# names of radix4_kernels_bench.VARIANTS, `all` (default) or `none`.
# SKIP_NCU=1 leaves out step 4.
# (The harness-level checks, python -m contracts.check --candidate radix4-serial
# --against block-argmax --exact and friends, are run separately.)
set -u -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT to a directory for the results}"
FINAL_OUT=$OUT
OUT=${WORK:-/tmp/kernels-final}  # everything is written here; $FINAL_OUT gets the summary and one tarball
rm -rf "$OUT" && mkdir -p "$OUT" "$FINAL_OUT"
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-kernel-cache}
PREV=${1:-}
VARIANTS=${2:-all}
t0=$(date +%s)
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv | tee "$OUT/gpu.txt"

# 1. the step-clock builds in parallel (the bench builds its own libraries in parallel too)
python3 - <<'EOF' 2>&1 | tee "$OUT/lab_build.txt"
import concurrent.futures, os, torch
import kernels.radix4 as r
arch = "sm_%d%d" % torch.cuda.get_device_capability()
lab = [(c, ("RADIX4_LAB", *d, *extra)) for c in ("aiter", "serial") for d in ((), ("RADIX4_RANK_MAX=0",))
       for extra in ((), ("RADIX4_EX2_FTZ=0", "RADIX4_COPY_ENTRY16=0"))]
with concurrent.futures.ThreadPoolExecutor(os.cpu_count()) as pool:
    for f in [pool.submit(r.build, arch=arch, defines=d, contract=c) for c, d in lab]:
        print(f.result())
EOF

# 2. checks and the side-by-side table
args=(--out "$OUT" --variants "$VARIANTS")
[ -n "$PREV" ] && args+=(--prev "$PREV")
python3 benchmarks/radix4_kernels_bench.py "${args[@]}" > "$OUT/bench_log.txt" 2>&1
bench_rc=$?
echo "bench exit $bench_rc after $(( $(date +%s) - t0 )) s"

# the serial kernels' own check (serial scan = block argmax, every case family, 224/16 included)
python3 benchmarks/serial_gpu_check.py --skip-timing > "$OUT/serial_gpu_check.txt" 2>&1 || bench_rc=1
tail -3 "$OUT/serial_gpu_check.txt"

# 3. step clocks
{
    python3 benchmarks/radix4_lab.py --launches 20
    python3 benchmarks/radix4_lab.py --launches 20 --pdl
    python3 benchmarks/radix4_lab.py --launches 20 --defines RADIX4_EX2_FTZ=0,RADIX4_COPY_ENTRY16=0
    python3 benchmarks/radix4_lab.py --launches 20 --contract serial
} > "$OUT/lab.txt" 2>&1
echo "lab done after $(( $(date +%s) - t0 )) s"

# 4. instruction counts (ncu), when it works here
if [ -z "${SKIP_NCU:-}" ] && command -v ncu > /dev/null; then
    for pair in "default:" "untuned:RADIX4_EX2_FTZ=0,RADIX4_COPY_ENTRY16=0"; do
        name=${pair%%:*} d=${pair#*:}
        timeout 120 ncu --profile-from-start off --clock-control none --csv \
            --metrics smsp__inst_executed.sum,gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
            python3 benchmarks/radix4_profile.py --configs 1:block:random,1024:warp:random,4096:warp:random,4096:dense:random --defines "$d" \
            > "$OUT/ncu_$name.csv" 2>&1 || echo "ncu failed (see ncu_$name.csv)"
    done
fi
echo "all done after $(( $(date +%s) - t0 )) s"

# the compact table
grep -v "^  " "$OUT/bench_log.txt" | grep -E "^(ok|FAIL)|oracle|empty kernel|bit-identity" | cut -c1-200
sed -n '/^us per launch/,$p' "$OUT/kernels_bench.txt" 2>/dev/null
grep -E "^(build|block|warp)" "$OUT/lab.txt" | grep -E "graph|build" | cut -c1-120
python3 - "$OUT" <<'EOF'
import csv, glob, sys
for path in sorted(glob.glob(sys.argv[1] + "/ncu_*.csv")):
    rows = [r for r in csv.reader(open(path)) if len(r) > 14 and "route_kernel" in r[4]]
    by = {}
    for r in rows:
        by.setdefault((r[0], r[7], r[8]), {})[r[12]] = r[14]
    print(path.rsplit("/", 1)[-1], "(launch, block, grid: metrics)")
    for (i, block, grid), m in by.items():
        print(f"  {i:>2} block {block:>14} grid {grid:>16}: " + ", ".join(f"{k.split('__')[1]}={v}" for k, v in m.items()))
EOF
tar -czf "$FINAL_OUT/kernels_final.tgz" -C "$OUT" .
cp "$OUT/kernels_bench.txt" "$OUT/kernels_bench.json" "$OUT/lab.txt" "$OUT/serial_gpu_check.txt" "$FINAL_OUT/" 2>/dev/null
exit $bench_rc
