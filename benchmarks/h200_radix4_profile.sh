#!/usr/bin/env bash
# ncu on one launch of each radix4 configuration (benchmarks/radix4_profile.py):
# the details page of every launch, the per-instruction SASS page (executed
# instructions and stall samples per instruction) of each, and the SASS of
# the shipped library. Everything lands in $OUT.
#   OUT=/tmp/out bash benchmarks/h200_radix4_profile.sh [CONFIGS]
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
CONFIGS=${1:-1:block:random,1024:warp:random,1024:warp:all-equal,1024:block:random}
mkdir -p "$OUT"
python3 -c "import kernels.radix4 as r; print(r.build())" > /tmp/lib.txt || exit 1
LIB=$(tail -1 /tmp/lib.txt)
ncu --profile-from-start off --clock-control none --set full --import-source no -f -o /tmp/prof \
    python3 benchmarks/radix4_profile.py --configs "$CONFIGS" > "$OUT/ncu-run.log" 2>&1 || { tail -30 "$OUT/ncu-run.log"; exit 1; }
ncu -i /tmp/prof.ncu-rep --page details > "$OUT/ncu-details.txt" 2>&1
n=$(echo "$CONFIGS" | tr ',' '\n' | wc -l)
for i in $(seq 0 $((n - 1))); do
    ncu -i /tmp/prof.ncu-rep --page source --print-source sass --csv --launch-skip "$i" --launch-count 1 \
        > "/tmp/source-$i.csv" 2>&1
done
tar -czf "$OUT/ncu-source.tgz" -C /tmp $(cd /tmp && ls source-*.csv)
cuobjdump -sass "$LIB" | gzip > "$OUT/sass.txt.gz"
grep -E "route_kernel|Duration|Registers Per|Achieved Occupancy|Issue Slots Busy|Executed Ipc A|Warp Cycles Per Issued|No Eligible|Theoretical Occ|Waves Per SM|Elapsed Cycles|SM Frequency" "$OUT/ncu-details.txt" | cut -c1-160
