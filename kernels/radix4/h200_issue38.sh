#!/usr/bin/env bash
# Issue 38 on one H200: builds, the Kimi shapes' bits against main's kernel, 1M-row checks under every contract
# radix4 implements, the bench races. Run from a copy of the branch inside a main checkout (main's kernels/radix4
# is the "before" of the bit-identity check):
#   OUT=/tmp/out STEPS="build bits check" bash kernels/radix4/h200_issue38.sh
#   OUT=/tmp/out STEPS="bench grouped serial" bash kernels/radix4/h200_issue38.sh
# Engines from .engines/ (scripts/engines.sh extract). Kernel cache: $ROUTER_KERNEL_CACHE (default ./kcache).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 ROUTER_ENGINE_PATH=$PWD/.engines ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-$PWD/kcache}
: "${OUT:?set OUT}"
B=$OUT/issue38
mkdir -p "$B" "$ROUTER_KERNEL_CACHE"
STEPS=${STEPS:-build bits check}
step() { echo; echo "== $1 ($(date +%T))"; }
has() { [[ " $STEPS " == *" $1 "* ]]; }
if has build; then
    step build
    nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
    (time python3 -c "import kernels.radix4 as r; r.build(); print('radix4 built')") 2>&1 | grep -v "^$" &
    python3 -c "import kernels.radix4 as r; r.build(contract='serial'); print('radix4 serial built')" &
    python3 -c "from kernels.engines import flashinfer_noaux as m; m.build(); print('flashinfer built')" &
    python3 -c "import kernels.serial.block_argmax as b; b.build('cuda'); print('block-argmax built')" &
    wait
fi
if has ctests; then  # the compile checks of tests/test_radix4_build.py, on this host's cores, in the background
    step "compile checks (background)"
    par="-n 6"; python3 -c "import xdist" 2>/dev/null || par="-o addopts="
    (timeout 500 python3 -m pytest $par -q -p no:cacheprovider tests/test_radix4_build.py -k "sm90 or spills or hooks" \
        > "$B/compile_checks.log" 2>&1; echo "compile checks: exit $?" >> "$B/compile_checks.log") &
fi
if has bits; then
    step "bits: the Kimi shapes against main's kernel"
    timeout 240 python3 reports/baselines/h200-issue38/lab/bitident.py ../kernels/radix4 "$B/bit_identity.json" 2>&1 | tail -5
fi
if has check; then
    step check
    chk() {  # name contract extra...
        local tag=$1 cand=$2 contract=$3; shift 3
        timeout 200 python3 -m contracts check --candidate "$cand" --contract "$contract" "$@" --device cuda --rows 1000000 \
            --out "$B/check-$tag" --quiet > "$B/check-$tag.log" 2>&1
        echo "$tag: exit $? $(tail -1 "$B/check-$tag.log")"
    }
    if [[ "${MODELS_ONLY:-0}" != 1 ]]; then
        chk aiter-896-16 radix4 aiter &
        chk aiter-384-8 radix4 aiter --experts 384 --topk 8 &
        chk aiter-224-16 radix4 aiter --experts 224 --topk 16 &
        wait
    fi
    chk kimi-k2 radix4 kimi-k2 &
    chk glm4-moe radix4 glm4-moe &
    chk minimax-m2 radix4 minimax-m2 &
    wait
    chk dots1 radix4 dots1 &
    chk deepseek-v3 radix4 deepseek-v3 &
    chk deepseek-v3-pdl radix4-pdl deepseek-v3 &
    wait
    chk deepseek-v4 radix4 deepseek-v4 &
    chk deepseek-v4-384 radix4 deepseek-v4 --experts 384 --topk 6 &
    chk aiter-256-8 radix4 aiter --experts 256 --topk 8 &
    wait
    [[ "${MODELS_ONLY:-0}" != 1 ]] && chk serial radix4-serial serial
    for f in "$B"/check-*.log; do head -2 "$f" | tail -1; done
fi
if has v3; then  # deepseek-v3 again, its report kept whole (the replay lines of what it finds)
    step "check deepseek-v3 (report)"
    timeout 200 python3 -m contracts check --candidate radix4 --contract deepseek-v3 --device cuda --rows 1000000 \
        --out "$B/v3" --quiet 2>&1 | tail -3
    grep -B2 -A25 -i "group_selection" "$B/v3/report.md" | head -80
fi
if has matrix; then
    step "matrix deepseek-v3"
    timeout 240 python3 -m contracts matrix --candidate radix4,flashinfer-noaux,sglang-triton,sglang-torch,torch-native,oracle \
        --contract deepseek-v3 --device cuda --out "$B/matrix-deepseek-v3" --quiet > "$B/matrix.log" 2>&1
    echo "matrix: exit $?"; tail -25 "$B/matrix.log"
fi
if has bench; then
    step bench
    # flashinfer-noaux is left out at k = 6: at 256/6 and 384/6, M = 1024, it hit an illegal memory access on the
    # H200 (2026-12-03), which ends the process's CUDA context and every later point.
    for shape in ${BENCH_SHAPES:-"256 8" "384 8" "160 8" "128 6" "256 6" "384 6" "896 16"}; do
        set -- ${shape/_/ }
        P=flashinfer-noaux,sglang-triton,sglang-torch,torch-native
        [[ $2 == 6 && $1 != 128 ]] && P=sglang-triton,sglang-torch,torch-native
        timeout 150 python3 -m contracts bench --candidate radix4,$P --experts $1 --topk $2 --m 1,64,1024,4096 --device cuda \
            --out "$B/bench-$1-$2" > "$B/bench-$1-$2.log" 2>&1
        echo "bench $1/$2: exit $?"; tail -12 "$B/bench-$1-$2.log"
    done
fi
if has grouped; then
    step "grouped 256/8 (8 groups keep 4)"
    timeout 200 python3 reports/baselines/h200-issue38/lab/grouped_bench.py "$B/grouped_bench.json" 2>&1 | tail -8
fi
if has serial; then
    step "radix4-serial vs radix4 (issue 37)"
    timeout 150 python3 -m contracts bench --candidate radix4,radix4-serial --m 1,2,4,8,16,32,64,128,256,512,1024,2048,4096 \
        --device cuda --out "$B/bench-serial" > "$B/bench-serial.log" 2>&1
    echo "exit $?"; tail -20 "$B/bench-serial.log"
fi
wait
step pack
tail -3 "$B/compile_checks.log" 2>/dev/null
find "$B" -name '*.parquet' -delete; find "$B" -name 'mismatches.csv' -delete; find "$B" -name 'report.html' -delete
tar -czf "$OUT/issue38.tgz" -C "$OUT" issue38 && rm -rf "$B"  # one file back: the tool returns a few files only
ls -la "$OUT"
