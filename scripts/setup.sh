#!/usr/bin/env bash
# One-step set-up for a fresh machine.
#   bash scripts/setup.sh              # the harness (keeps an existing torch, e.g. a CUDA or ROCm build)
#   bash scripts/setup.sh --ci-tools   # plus the compilers and browser the CPU-only test suite uses
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ "${1:-}" == "--ci-tools" ]]; then
    # hipcc (HIP 5.2) and clang-19 compile the HIP back end without an AMD GPU;
    # chromium and chromium-driver render report.html in the browser test. Debian packages.
    if command -v apt-get >/dev/null && { ! command -v hipcc >/dev/null || ! command -v clang++-19 >/dev/null || ! command -v chromium >/dev/null || ! command -v chromedriver >/dev/null; }; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq hipcc clang-19 chromium chromium-driver >/dev/null
    fi
fi

# Keep a torch that is already there (a GPU host's CUDA/ROCm build); otherwise
# take the CPU build, which is small.
if ! python -c "import torch" 2>/dev/null; then
    python -m pip install -q torch==2.13.0
fi
python -m pip install -q -e '.[test,parquet,upload]'
