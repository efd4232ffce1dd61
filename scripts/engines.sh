#!/usr/bin/env bash
# The serving engines' wheels for the engine adapters (kernels/engines), never with their dependencies.
#   bash scripts/engines.sh download       # the pinned wheels (requirements/engines.txt) into the wheel cache
#   bash scripts/engines.sh install        # download what the cache lacks, then pip install --no-deps from the
#                                          # cache; fails if torch changed
#   bash scripts/engines.sh extract [DIR]  # only the files the adapters read, into DIR (default .engines)
# Wheel cache: $ROUTER_WHEEL_CACHE or ~/.cache/router-contracts/wheels. Sizes: vllm 336 MB,
# lmdeploy 107 MB, flashinfer-python 65 MB, sglang 39 MB, apache-tvm-ffi 3 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=${ROUTER_WHEEL_CACHE:-$HOME/.cache/router-contracts/wheels}
PINS=requirements/engines.txt
mkdir -p "$WHEELS"
pins() { grep -v '^\s*#' "$PINS" | grep -v '^\s*$'; }

# The pinned wheels the cache lacks, fetched (a wheel already there is not fetched again).
download() {
    for pin in $(pins); do
        name=${pin%%==*}; version=${pin##*==}
        if ls "$WHEELS"/"${name//-/_}"-"$version"-*.whl >/dev/null 2>&1; then
            echo "cached: $pin"
        elif python -m pip download -q --no-deps --only-binary=:all: "$pin" -d "$WHEELS"; then
            echo "downloaded: $pin"
        else
            echo "could not download $pin (above); on a host without the package index, copy the wheels into $WHEELS" \
                 "(or set ROUTER_WHEEL_CACHE) from a machine that ran: bash scripts/engines.sh download" >&2
            exit 1
        fi
    done
}

case "${1:-}" in
download)
    download
    ;;
install)
    download  # a fresh machine has an empty cache: pip --no-index would fail with "No matching distribution"
    before=$(python -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)
    # --no-index: only the cached wheels; --no-deps: never an engine's own torch or CUDA stack.
    python -m pip install -q --no-deps --no-index --find-links "$WHEELS" -r "$PINS"
    after=$(python -c "import torch; print(torch.__version__)" 2>/dev/null || echo none)
    if [[ "$before" != "$after" ]]; then
        echo "torch changed from $before to $after: an engine install must never replace torch" >&2
        exit 1
    fi
    echo "engines installed without dependencies; torch $after unchanged"
    ;;
extract)
    python -m kernels.engines.extract --wheels "$WHEELS" --to "${2:-.engines}"
    ;;
*)
    sed -n '2,8p' "$0"
    exit 2
    ;;
esac
