#!/usr/bin/env bash
# The H200 batch that re-verifies the merged tree in one call (issues 19, 21, 22):
#   1. every CUDA library built;
#   2. benchmarks/h200_kernels_final.sh (radix4, radix4 PDL, radix4-serial: exhaustive sigmoid, bit identity
#      on >= 1,000,000 rows, PDL in graphs, the side-by-side table), when the pre-split kernel is at $PREV;
#   3. the harness's checks: radix4, radix4-pdl and radix4-serial over 1,000,000 rows each, radix4-serial
#      --against block-argmax --exact over 1,000,000 rows, radix4 --repeat 10 (ten calls and a graph replay);
#   4. contracts bench (the PDL columns beside radix4 and radix4-serial);
#   5. benchmarks/harness_speed.py over $ROWS rows with its bundles kept, and the replay of the first
#      mismatched row, if any;
#   6. with MATRIX=k3 (a phase of benchmarks/h200_matrix.sh) and .engines/ carried along, that matrix.
# Every step has its own time limit; bundles are tarred into $OUT (parquet files left out).
#   OUT=/tmp/out PREV=.gpu/radix4_prev ROWS=20M bash benchmarks/h200_final.sh
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT}"
B=${WORK:-/tmp/final-batch}
ROWS=${ROWS:-20M}
PREV=${PREV:-}
rm -rf "$B" && mkdir -p "$B" "$OUT"
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-kernel-cache}
t0=$(date +%s)
step() { echo; echo "== $1 (+$(( $(date +%s) - t0 )) s)"; }
run() { local limit=$1 log=$2; shift 2; timeout "$limit" "$@" > "$B/$log" 2>&1; echo "exit $? ($log)"; tail -"${TAIL:-4}" "$B/$log"; }

step "build"
python3 - <<'EOF' 2>&1 | tail -6
import concurrent.futures as cf
import kernels.radix4 as r, kernels.radix4.serial as rs, kernels.serial.scan as s, kernels.serial.block_argmax as b
jobs = {"radix4": r.build, "radix4-serial": rs.build, "serial": lambda: s.build("cuda"), "block-argmax": lambda: b.build("cuda")}
with cf.ThreadPoolExecutor(len(jobs)) as pool:
    for name, fut in {n: pool.submit(f) for n, f in jobs.items()}.items():
        try:
            print(name, fut.result())
        except Exception as exc:
            print(name, "build failed:", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
EOF

if [ -n "$PREV" ] && [ -d "$PREV" ]; then
    step "kernels (h200_kernels_final.sh)"
    TAIL=40 run 240 kernels.log env SKIP_NCU=1 OUT="$B/kernels" WORK=/tmp/kernels-final bash benchmarks/h200_kernels_final.sh "$PREV" none
fi

step "checks"
check() { local name=$1; shift; run 150 "$name.log" python3 -m contracts check "$@" --out "$B/$name" --quiet; }
check h200-radix4-1M --candidate radix4 --rows 1000000
check h200-radix4-pdl-1M --candidate radix4-pdl --rows 1000000
check h200-radix4-serial-1M --candidate radix4-serial --rows 1000000
check h200-radix4-serial-vs-block-argmax-1M --candidate radix4-serial --against block-argmax --exact --rows 1000000
check h200-radix4-repeat10 --candidate radix4 --repeat 10 --rows 100000
check h200-radix4-serial-repeat10 --candidate radix4-serial --repeat 10 --rows 100000

step "bench"
TAIL=16 run 150 bench.log python3 -m contracts bench --candidate radix4,radix4-serial,block-argmax,torch-native --out "$B/h200-bench"

step "harness speed"
TAIL=16 run 200 speed.log python3 benchmarks/harness_speed.py --device cuda --candidate radix4 --rows "$ROWS" \
    --json "$B/harness_speed_gpu.json" --keep "$B/speed"
for d in "$B"/speed/*/; do
    python3 - "$d" <<'EOF'
import json, shlex, subprocess, sys
from pathlib import Path
bundle = Path(sys.argv[1])
rows = [r for r in json.loads((bundle / "details.json").read_text()) if r.get("verdict") == "mismatch"]
for r in rows[:2]:
    print(f"replaying {bundle.name}: {r['clause']} in {r['case']} row {r['row']}: {r['reason']}")
    print("  expected", r.get("expected_ids"), r.get("expected_weights"))
    print("  actual  ", r.get("actual_ids"), r.get("actual_weights"))
    line = r["replay"].replace("python ", "python3 ", 1) + f" --out {bundle}-replay-{r['row']} --quiet"
    done = subprocess.run(line, shell=True, capture_output=True, text=True, timeout=120)
    print("  replay exit", done.returncode, done.stdout.strip().splitlines()[-3:] if done.stdout.strip() else done.stderr[-400:])
EOF
done

if [ -n "${MATRIX:-}" ] && [ -d .engines ]; then
    step "matrix $MATRIX (benchmarks/h200_matrix.sh, ${MATRIX_ROWS:-20000} rows)"
    TAIL=30 run 200 matrix.log env OUT="$B/matrix" bash benchmarks/h200_matrix.sh "$MATRIX" "${MATRIX_ROWS:-20000}"
fi

step "pack"
for f in "$B"/h200-*/summary.json "$B"/speed/*/summary.json; do [ -f "$f" ] && python3 -c "
import json,sys; s=json.load(open(sys.argv[1])); st=s.get('stages') or {}
print(sys.argv[1].split('/')[-2], s['status'], s['rows_checked'], 'mismatched', s['mismatched_rows'], 'near', s['near_tie_rows'],
      'rows/s', round(s['rows_per_s']), 'rss', st.get('peak_rss_mb'))" "$f"; done
cp "$B"/harness_speed_gpu.json "$OUT"/ 2>/dev/null
cp "$B"/kernels/kernels_bench.txt "$OUT"/ 2>/dev/null
tar -czf "$OUT/final-batch.tgz" -C "$B" --exclude='*.parquet' --exclude='kernels_final.tgz' .
ls -la "$OUT"
echo "done after $(( $(date +%s) - t0 )) s"
