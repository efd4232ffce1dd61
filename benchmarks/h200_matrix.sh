#!/usr/bin/env bash
# The H200 batch for the agreement matrix (python -m contracts matrix, docs/engines.md "Checking your engine"):
#   k3      the matrix at 896/16 (Kimi-K3): radix4, block-argmax, torch-native, sglang-radix, sglang-triton,
#           sglang-torch, vllm-torch, and the prefill/decode view radix4 below 1024 rows vs sglang-radix above;
#   k2      the matrix at 384/8 (Kimi-K2) with flashinfer-noaux: radix4, block-argmax, torch-native,
#           sglang-triton, sglang-torch, vllm-torch, flashinfer-noaux;
#   dsv3    the matrix under deepseek-v3 (256/8, 8 groups, 4 kept): sglang-triton, flashinfer-noaux,
#           sglang-torch, vllm-torch, lmdeploy-torch;
#   checks  each CUDA engine candidate against the aiter contract (what it breaks: the measurement its
#           declared deviations in contracts/candidates/engines.py are still waiting for).
# Bundles go to /tmp/matrix-bundles and are tarred into $OUT/matrix-bundles.tgz; the tables and the
# clause summary are copied to $OUT (at most 8 files come back from the device).
#
# The GPU host has no internet and no engine installed: the engine files travel as the ignored folder
# .engines/ (about 1 MB), written beforehand on a machine with the cached wheels and nvcc:
#   bash scripts/engines.sh download && python -m kernels.engines.extract --to .engines
#   OUT=/tmp/out bash benchmarks/h200_matrix.sh [k3|k2|dsv3|checks|all] [ROWS]
# (the device tool: carry [".engines"]). Run one phase per 10-minute command: at the default 50,000 rows a
# phase should fit (an estimate: not yet run on the H200; every candidate starts a worker, ~10 s each, and
# the comparisons of the 28 pairs dominate). flashinfer-noaux always renormalizes: it raises on the cases
# with renormalize=False (the harness's covered() gate is not told renormalize), reported as raised rows.
set -u
PHASE=${1:-all}
ROWS=${2:-${ROWS:-50000}}
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/matrix-out}
B=/tmp/matrix-bundles
mkdir -p "$OUT" "$B"
if [ -z "${ROUTER_ENGINE_PATH:-}" ] && [ -d .engines ]; then
    export ROUTER_ENGINE_PATH=$PWD/.engines
fi
echo "ROUTER_ENGINE_PATH=${ROUTER_ENGINE_PATH:-<installed distributions>}"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
python3 -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-engines-kernels}
# Build every library once, before the workers start (a worker's build counts against its start timeout).
python3 - <<'EOF'
import importlib
for module in ("kernels.radix4", "kernels.serial.block_argmax", "kernels.engines.sglang_radix", "kernels.engines.flashinfer_noaux"):
    m = importlib.import_module(module)
    try:
        print(module, m.build() if module.startswith("kernels.engines") else m.build("cuda") if "serial" in module else m.build())
    except Exception as exc:  # the matrix reports it as that candidate's unavailable reason
        print(module, "build failed:", type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
EOF

matrix() {  # NAME ARGS...: one matrix bundle, its table kept for $OUT
    local name=$1; shift
    echo "== matrix $name: $*"
    python3 -m contracts matrix --device cuda --rows "$ROWS" --out "$B/$name" --force --quiet "$@" 2>&1 | tee "$B/$name.log"
    echo "exit: ${PIPESTATUS[0]}" | tee -a "$B/$name.log"
    cp "$B/$name.log" "$OUT/$name.txt"
}

case "$PHASE" in k3|all)
    matrix k3 --candidate radix4,block-argmax,torch-native,sglang-radix,sglang-triton,sglang-torch,vllm-torch \
        --split radix4:sglang-radix@1024
esac
case "$PHASE" in k2|all)
    matrix k2 --experts 384 --topk 8 \
        --candidate radix4,block-argmax,torch-native,sglang-triton,sglang-torch,vllm-torch,flashinfer-noaux
esac
case "$PHASE" in dsv3|all)
    matrix dsv3 --contract deepseek-v3 --candidate sglang-triton,flashinfer-noaux,sglang-torch,vllm-torch,lmdeploy-torch
esac
case "$PHASE" in checks|all)
    echo "== checks of the CUDA engine candidates under aiter"
    python3 -m contracts check --candidate sglang-radix,sglang-radix-unsorted,sglang-triton --contract aiter --device cuda \
        --rows "$ROWS" --out "$B/checks-k3" --force --quiet 2>&1 | tail -12
    python3 -m contracts check --candidate flashinfer-noaux,sglang-triton --contract aiter --device cuda --experts 384 --topk 8 \
        --rows "$ROWS" --out "$B/checks-k2" --force --quiet 2>&1 | tail -12
    # What each broke, every clause a row breaks (the clauses to declare, with the family that shows each).
    python3 - "$B" <<'EOF' | tee "$OUT/clauses.txt"
import json, sys
from pathlib import Path
for summary in sorted(Path(sys.argv[1]).glob("checks-*/*/summary.json")):
    s = json.loads(summary.read_text())
    where = {}
    for family, f in s["families"].items():
        for clause in f["clauses_broken"]:
            where.setdefault(clause, []).append(family)
    print(f"{summary.parent.parent.name} {s['candidate']}: {s['status']}, {s['rows_checked']:,} rows, "
          f"{s['mismatched_rows']:,} mismatched, {s['near_tie_rows']:,} near ties; {s.get('reason') or ''}")
    for clause, n in sorted(s["clauses_broken"].items(), key=lambda kv: -kv[1]):
        print(f"    {clause}: {n:,} rows ({', '.join(where.get(clause, []))})")
EOF
esac
tar -czf "$OUT/matrix-bundles.tgz" -C "$B" .
ls -la "$OUT"
