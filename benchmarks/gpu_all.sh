#!/usr/bin/env bash
# Every measurement of this repository on a CUDA GPU, one phase per call (each phase fits a
# 10-minute call on an H200). Run from the repository root:
#
#   OUT=/tmp/out bash benchmarks/gpu_all.sh [PHASE ...]      (no PHASE: all of them, in this order)
#
#   main      the README's main job (python -m contracts check --candidate all, the default rows; MAIN_CANDIDATES
#             splits it over calls when one call's limit is too short) and the fast test tier (pytest -m "not slow"),
#             both under the host's own torch and CUDA (MAIN_ROWS=N: --rows N, where the device time is short): run before resolving any issue that touches compare/,
#             cases/, candidates/, run/ or kernels/, its summary committed under reports/baselines/. The host needs
#             pytest: a GPU host without internet gets it from the ignored folder .gpu-wheels/ (pure-Python wheels:
#             pip download --no-deps -d .gpu-wheels pytest pytest-xdist execnet iniconfig pluggy safetensors tqdm, and ruff, the
#             lint test's tool, as a manylinux wheel for the host's Python: --only-binary=:all: --platform manylinux_2_17_x86_64).
#             TESTS=0 leaves the tests out, MAIN=0 the check; MAIN_GROUPS runs the check as groups side by side
#             (see main_in_groups: the whole job in one device call).
#   build     every CUDA library once (radix4, radix4-serial, serial scan, block argmax), so the
#             parallel steps below do not race on the kernel cache
#   kernels   benchmarks/radix4_kernels_bench.py (exhaustive sigmoid, bit identity on >= 1,000,000
#             rows, PDL in graphs, the side-by-side table; PREV=DIR adds an earlier kernel's sources,
#             VARIANTS=all|none|a,b the tuning variants), benchmarks/radix4_gpu_check.py and
#             benchmarks/serial_gpu_check.py
#   checks    python -m contracts check: radix4, radix4-pdl, radix4-serial over $ROWS rows each,
#             radix4-serial --against block-argmax --exact, the edge families, --repeat 10 (graph replay)
#   tools     probe of each GPU candidate, a hypothesis search of radix4, a short nightly
#   bench     python -m contracts bench of the GPU candidates (with the launch floor)
#   harness   benchmarks/harness_speed.py over $SPEED_ROWS rows (in-process and isolated) and
#             benchmarks/oracle_speed.py
#   engines   benchmarks/engines_gpu_check.py and the adapters' tests (needs .engines/, see below)
#   matrix    python -m contracts matrix at 896/16, 384/8 and under deepseek-v3, and each CUDA engine
#             candidate checked under aiter (needs .engines/; MATRIX_ROWS rows, default 20,000)
#   lab       the radix4 step clocks (kernels/radix4/lab/radix4_lab.py) and every token's clocks
#             (radix4_token_lab.py); with PROFILE=1 also ncu's stall sites (radix4_profile.py and
#             radix4_stall_sites.py)
#
# The engine phases need the engines' files, which a GPU host without internet gets as the ignored
# folder .engines/ (about 1 MB), written beforehand on a machine with the wheels and nvcc:
#   bash scripts/engines.sh download && python -m kernels.engines.extract --to .engines
# The device tool copies the working tree, and its .git may be an older copy (seen 2026-12-07): to run HEAD exactly,
# not `git stash` there but an archive of it, carried in an ignored folder and extracted on the host:
#   git archive HEAD | gzip > .gpu-wheels/head.tgz        (here; then, there:)
#   mkdir -p /tmp/src && tar xzf .gpu-wheels/head.tgz -C /tmp/src && cd /tmp/src && ROUTER_ENGINE_PATH=$OLDPWD/.engines OUT=... bash benchmarks/gpu_all.sh main
# Each step has its own time limit and its own log, so one slow or failing step does not take the
# others down; the exit status is 1 when any step failed. Bundles (without their parquet files) are
# tarred into $OUT/PHASE.tgz; the logs and tables land in $OUT/PHASE/.
set -u -o pipefail
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
: "${OUT:?set OUT to a directory for the results}"
ROWS=${ROWS:-1000000}
SPEED_ROWS=${SPEED_ROWS:-20M}
MATRIX_ROWS=${MATRIX_ROWS:-20000}
WORK=${WORK:-/tmp/gpu-all}
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-kernel-cache}
if [ -z "${ROUTER_ENGINE_PATH:-}" ] && [ -d .engines ]; then
    export ROUTER_ENGINE_PATH=$PWD/.engines
fi
mkdir -p "$OUT" "$WORK"
t0=$(date +%s)
failed=0
PHASE_DIR=

# run LIMIT LOG CMD...: one step, its output in $PHASE_DIR/LOG, its tail on the terminal
run() {
    local limit=$1 log=$2; shift 2
    timeout "$limit" "$@" > "$PHASE_DIR/$log" 2>&1
    local rc=$?
    echo "exit $rc ($log, +$(( $(date +%s) - t0 )) s)"
    tail -"${TAIL:-6}" "$PHASE_DIR/$log"
    [ "$rc" -eq 0 ] || failed=1
}
check() { local name=$1; shift; run 200 "$name.log" python3 -m contracts check "$@" --out "$WORK/$PHASE/$name" --force --quiet; }
need_engines() { [ -n "${ROUTER_ENGINE_PATH:-}" ] || { echo "skipped: no .engines/ (see the head of this script)"; return 1; }; }

phase_main() {
    {
        nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
        python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
        python3 -c "import transformers; print('transformers', transformers.__version__)" 2>/dev/null || echo "transformers: none"
        echo "engines: ${ROUTER_ENGINE_PATH:-none}"
    } > "$PHASE_DIR/host.txt" 2>&1
    cat "$PHASE_DIR/host.txt"
    if [ "${MAIN:-1}" != 0 ] && [ -n "${MAIN_GROUPS:-}" ]; then
        main_in_groups
    elif [ "${MAIN:-1}" != 0 ]; then
        # The README's command as a user types it: no --quiet, no --out (the bundle under reports/), so the console is
        # the user's; the index is copied beside the logs. 580 s: one device call's 10-minute limit, less the start.
        local before; before=$(ls -d reports/*/ 2>/dev/null | sort)
        TAIL=40 run "${MAIN_LIMIT:-580}" main-job.log python3 -m contracts check --candidate "${MAIN_CANDIDATES:-all}" \
            ${MAIN_ROWS:+--rows "$MAIN_ROWS"}
        local bundle; bundle=$(comm -13 <(echo "$before") <(ls -d reports/*/ 2>/dev/null | sort) | tail -1)
        if [ -n "$bundle" ]; then
            cp "$bundle"index.md "$PHASE_DIR/index.md" 2>/dev/null
            find "$bundle" -name summary.json -exec sh -c 'mkdir -p "$0/summaries"; cp "$1" "$0/summaries/$(basename "$(dirname "$1")").json"' "$WORK/$PHASE" {} \;
            cp -r "$bundle" "$WORK/$PHASE/bundle" 2>/dev/null
        fi
    fi
    if [ "${TESTS:-1}" != 0 ]; then
        python3 -c "import pytest, xdist, ruff" 2>/dev/null || { [ -d .gpu-wheels ] && python3 -m pip install -q --no-index --find-links .gpu-wheels pytest pytest-xdist safetensors tqdm ruff; }
        # The browser test fails (not skips) where chromium is missing, so that CI never skips it: the GPU host has none.
        TAIL=25 run "${TESTS_LIMIT:-420}" fast-tier.log python3 -m pytest -m "not slow" -q -n "$(nproc)" -p no:cacheprovider -rfE \
            --deselect tests/test_html_report.py::test_report_in_headless_chromium
    fi
}

# MAIN_GROUPS="a,b;c;d": the main job as one check per group, the groups side by side (each its own bundle under
# $WORK/main/gN, its console in gN.log, its index in gN-index.md). At the default rows `check --candidate all` takes
# more than one 10-minute device call on an H100 (2026-12-07: about 12 minutes, the engines' torch routers at 6,000
# rows/s); the engines' candidates in four groups side by side took 192 s. Every candidate `all` names and no group does runs in a group of
# its own, so a new candidate is never left out. Keep candidates that build the same library in one group (the kernel
# cache is not safe to fill from two processes at once):
#   MAIN_GROUPS="oracle,torch-native,aiter-model,aiter,radix4,radix4-pdl,radix4-serial,radix4-serial-pdl,serial,block-argmax;sglang-torch;vllm-torch;lmdeploy-torch;sglang-radix,sglang-radix-unsorted,sglang-triton,flashinfer-noaux"
main_in_groups() {
    local all rest i=0 g pids=()
    all=$(python3 -c "from contracts.candidates.registry import all_candidates as a; print(' '.join(n for n, c in a().items() if c.in_all))")
    local groups; IFS=';' read -r -a groups <<< "$MAIN_GROUPS"
    rest=$(for n in $all; do [[ ",${MAIN_GROUPS//;/,}," == *",$n,"* ]] || echo "$n"; done)
    for n in $rest; do groups+=("$n"); echo "not in MAIN_GROUPS, a group of its own: $n"; done
    for g in "${groups[@]}"; do
        i=$((i + 1))
        ( timeout "${MAIN_LIMIT:-580}" python3 -m contracts check --candidate "$g" ${MAIN_ROWS:+--rows "$MAIN_ROWS"} \
              --out "$WORK/$PHASE/g$i" --force > "$PHASE_DIR/g$i.log" 2>&1
          echo "exit $? (g$i: $g, +$(( $(date +%s) - t0 )) s)" >> "$PHASE_DIR/exits.txt" ) &
        pids+=($!)
    done
    wait "${pids[@]}"
    cat "$PHASE_DIR/exits.txt"
    grep -q -v "^exit 0 " "$PHASE_DIR/exits.txt" && failed=1
    for i in $(seq 1 ${#groups[@]}); do
        cp "$WORK/$PHASE/g$i/index.md" "$PHASE_DIR/g$i-index.md" 2>/dev/null || cp "$WORK/$PHASE/g$i/report.md" "$PHASE_DIR/g$i-report.md" 2>/dev/null
        grep -E "^[a-z0-9.:_-]+ +[a-z0-9.-]+ +(cuda|cpu) +[A-Z]" -A3 "$PHASE_DIR/g$i.log"
    done
}

phase_build() {
    python3 - <<'EOF' 2>&1 | tee "$PHASE_DIR/build.txt"
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
}

phase_kernels() {
    nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,utilization.gpu --format=csv > "$PHASE_DIR/gpu.txt"
    local args=(--out "$PHASE_DIR" --variants "${VARIANTS:-none}")
    [ -n "${PREV:-}" ] && args+=(--prev "$PREV")
    TAIL=30 run 400 kernels_bench_log.txt python3 benchmarks/radix4_kernels_bench.py "${args[@]}"
    TAIL=20 run 200 radix4_gpu_check.txt python3 benchmarks/radix4_gpu_check.py --json "$PHASE_DIR/radix4_gpu_check.json"
    TAIL=3 run 200 serial_gpu_check.txt python3 benchmarks/serial_gpu_check.py --skip-timing
}

phase_checks() {
    check radix4 --candidate radix4 --rows "$ROWS" &
    check radix4-pdl --candidate radix4-pdl --rows "$ROWS" &
    wait
    check radix4-serial --candidate radix4-serial --rows "$ROWS"
    check radix4-serial-vs-block-argmax --candidate radix4-serial --against block-argmax --exact --rows "$ROWS"
    check radix4-edge --candidate radix4 --families sigmoid_underflow,saturated,subnormal,zero_sum,signed_zero --rows 60000
    check radix4-repeat10 --candidate radix4 --repeat 10 --rows 100000
}

phase_tools() {
    for c in radix4 radix4-serial block-argmax torch-native aiter-model; do
        run 120 "probe-$c.log" python3 -m contracts probe --candidate "$c" --device cuda --out "$WORK/$PHASE/probe-$c"
    done
    run 200 search-radix4.log python3 -m contracts search --candidate radix4 --examples 300 --no-database --device cuda \
        --out "$WORK/$PHASE/search-radix4"
    TAIL=20 run 300 nightly.log python3 -m contracts nightly --out "$WORK/$PHASE/nightly" --rows 20000
}

phase_bench() {
    TAIL=20 run 300 bench.log python3 -m contracts bench --candidate radix4,radix4-pdl,radix4-serial,block-argmax,torch-native \
        --device cuda --out "$WORK/$PHASE/bench"
}

phase_harness() {
    TAIL=16 run 300 harness_speed.txt python3 benchmarks/harness_speed.py --device cuda --candidate radix4 --rows "$SPEED_ROWS" \
        --json "$PHASE_DIR/harness_speed_gpu.json"
    TAIL=8 run 200 oracle_speed.txt python3 benchmarks/oracle_speed.py --device cuda
}

phase_engines() {
    need_engines || return 0
    TAIL=20 run 300 engines_gpu_check.txt python3 benchmarks/engines_gpu_check.py --out "$PHASE_DIR/engines_gpu_check.json"
    TAIL=10 run 300 engines_tests.txt python3 -m pytest -q -rs -p no:randomly tests/test_engines_loader.py \
        tests/test_engines_torch.py tests/test_engines_cuda.py
}

phase_matrix() {
    need_engines || return 0
    local m="python3 -m contracts matrix --device cuda --rows $MATRIX_ROWS --force --quiet"
    TAIL=20 run 250 matrix-k3.txt $m --out "$WORK/$PHASE/k3" --split radix4:sglang-radix@1024 \
        --candidate radix4,block-argmax,torch-native,sglang-radix,sglang-triton,sglang-torch,vllm-torch
    TAIL=20 run 250 matrix-k2.txt $m --out "$WORK/$PHASE/k2" --experts 384 --topk 8 \
        --candidate radix4,block-argmax,torch-native,sglang-triton,sglang-torch,vllm-torch,flashinfer-noaux
    TAIL=20 run 250 matrix-dsv3.txt $m --out "$WORK/$PHASE/dsv3" --contract deepseek-v3 \
        --candidate sglang-triton,flashinfer-noaux,sglang-torch,vllm-torch,lmdeploy-torch
    # What each CUDA engine candidate breaks under aiter: the clauses its declared deviations
    # (contracts/candidates/engines.py) rest on.
    check engines-k3 --candidate sglang-radix,sglang-radix-unsorted,sglang-triton --contract aiter --device cuda --rows "$MATRIX_ROWS"
    check engines-k2 --candidate flashinfer-noaux,sglang-triton --contract aiter --device cuda --experts 384 --topk 8 --rows "$MATRIX_ROWS"
}

phase_lab() {
    local lab=kernels/radix4/lab
    {
        python3 $lab/radix4_lab.py --launches 20
        python3 $lab/radix4_lab.py --launches 20 --pdl
        python3 $lab/radix4_lab.py --launches 20 --contract serial
    } > "$PHASE_DIR/lab.txt" 2>&1 || failed=1
    tail -20 "$PHASE_DIR/lab.txt"
    TAIL=20 run 300 token_lab.txt python3 $lab/radix4_token_lab.py
    if [ -n "${PROFILE:-}" ] && command -v ncu > /dev/null; then
        local configs=${PROFILE_CONFIGS:-1:block:random,1024:warp:random,4096:dense:random}
        local rep=$WORK/$PHASE/prof
        run 400 ncu-run.log ncu --profile-from-start off --clock-control none --set full --import-source no -f -o "$rep" \
            python3 $lab/radix4_profile.py --configs "$configs"
        local n i
        n=$(echo "$configs" | tr ',' '\n' | wc -l)
        mkdir -p "$WORK/$PHASE/source"
        for i in $(seq 0 $((n - 1))); do
            ncu -i "$rep.ncu-rep" --page source --print-source sass --csv --launch-skip "$i" --launch-count 1 \
                > "$WORK/$PHASE/source/source-$i.csv" 2>&1
        done
        tar -czf "$PHASE_DIR/ncu-source.tgz" -C "$WORK/$PHASE/source" .
        TAIL=40 run 120 stall_sites.txt python3 $lab/radix4_stall_sites.py "$PHASE_DIR/ncu-source.tgz"
    fi
}

PHASES=("$@")
[ ${#PHASES[@]} -eq 0 ] && PHASES=(main build kernels checks tools bench harness engines matrix lab)
for PHASE in "${PHASES[@]}"; do
    if ! declare -F "phase_$PHASE" > /dev/null; then
        echo "gpu_all.sh: unknown phase '$PHASE'; choose from main build kernels checks tools bench harness engines matrix lab" >&2
        exit 2
    fi
done
for PHASE in "${PHASES[@]}"; do
    PHASE_DIR=$OUT/$PHASE
    rm -rf "${WORK:?}/$PHASE" && mkdir -p "$PHASE_DIR" "$WORK/$PHASE"
    echo "== $PHASE (+$(( $(date +%s) - t0 )) s)"
    "phase_$PHASE"
    if [ -n "$(ls -A "$WORK/$PHASE")" ]; then
        tar -czf "$OUT/$PHASE.tgz" -C "$WORK/$PHASE" --exclude='*.parquet' --exclude='*.ncu-rep' .
    fi
done
echo "done after $(( $(date +%s) - t0 )) s; $([ $failed -eq 0 ] && echo 'every step exited 0' || echo 'a step failed (exit lines above)')"
exit $failed
