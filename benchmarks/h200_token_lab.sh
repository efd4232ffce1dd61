#!/usr/bin/env bash
# Where a batch's time goes, on the H200, in one call:
#   1. benchmarks/radix4_token_lab.py (every token's step clocks, the bench's
#      inputs) for the default build, plain and PDL, and for each build of
#      DEFINES (';'-separated sets of comma-separated defines);
#   2. with PROFILE=1, ncu's per-instruction stall samples of one launch per
#      configuration (benchmarks/h200_radix4_profile.sh), summarized by
#      benchmarks/radix4_stall_sites.py.
#   OUT=/tmp/out [PROFILE=1] bash benchmarks/h200_token_lab.sh ["RADIX4_X=1;RADIX4_Y=2"]
set -u -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT to a directory for the results}"
mkdir -p "$OUT"
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-kernel-cache}
DEFINES=${1:-}
{
    python3 benchmarks/radix4_token_lab.py
    python3 benchmarks/radix4_token_lab.py --flags 8 --m 1,1024,4096
    IFS=';' read -ra sets <<< "$DEFINES"
    for d in "${sets[@]}"; do
        [ -n "$d" ] && python3 benchmarks/radix4_token_lab.py --defines "$d" --m 1,64,1024,4096
    done
} > "$OUT/token_lab.txt" 2>&1
cat "$OUT/token_lab.txt"
if [ -n "${PROFILE:-}" ]; then
    OUT=$OUT/profile bash benchmarks/h200_radix4_profile.sh "${PROFILE_CONFIGS:-1:block:random,1024:warp:random,4096:dense:random}" | tail -40
    python3 benchmarks/radix4_stall_sites.py "$OUT/profile/ncu-source.tgz" > "$OUT/stall_sites.txt" 2>&1
    head -150 "$OUT/stall_sites.txt"
fi
