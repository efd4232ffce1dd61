#!/usr/bin/env bash
# The H200 batch for the engine adapters (kernels/engines): build every CUDA
# shim from the engine files in .engines/, check each engine router against a
# plain reference on a few rows, and time it under CUDA graph replay at
# M = 1/1024/4096 for 896/16 and 384/8, with and without PDL where the
# adapter supports it. One line per adapter; JSON and the log go to $OUT.
#
# The GPU host has no internet and no engine installed: the engine files
# travel as the ignored folder .engines/ (about 1 MB), written beforehand on a
# machine with the cached wheels and nvcc:
#   bash scripts/engines.sh download && python -m kernels.engines.extract --to .engines
#   OUT=/tmp/out bash benchmarks/h200_engines.sh
# Needs torch with CUDA, nvcc, and triton for sglang-triton (any missing piece
# is reported on that adapter's line, the others go on).
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/engines-out}
mkdir -p "$OUT"
if [ -z "${ROUTER_ENGINE_PATH:-}" ] && [ -d .engines ]; then
    export ROUTER_ENGINE_PATH=$PWD/.engines
fi
echo "ROUTER_ENGINE_PATH=${ROUTER_ENGINE_PATH:-<installed distributions>}"
[ -f "${ROUTER_ENGINE_PATH:-/nonexistent}/versions.json" ] && cat "$ROUTER_ENGINE_PATH/versions.json"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
python3 -c "import triton; print('triton', triton.__version__)" 2>&1 | tail -1
nvcc --version | tail -1
# A separate kernel cache, so a stale library from another checkout is never picked up.
export ROUTER_KERNEL_CACHE=${ROUTER_KERNEL_CACHE:-/tmp/router-engines-kernels}
python3 benchmarks/engines_gpu_check.py --out "$OUT/engines_gpu_check.json" 2>&1 | tee "$OUT/engines_gpu_check.txt"
# The CPU-side tests of the adapters, against the same files (the torch routers run on the GPU host's CPU too).
python3 -m pytest -q -rs tests/test_engines_loader.py tests/test_engines_torch.py tests/test_engines_cuda.py \
    2>&1 | tail -15 | tee "$OUT/engines_tests.txt"
