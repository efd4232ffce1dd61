#!/usr/bin/env bash
# One-step set-up for a fresh machine, from the committed lock.
#   bash scripts/setup.sh              # the harness and its runtime dependencies only (keeps an existing torch,
#                                      # e.g. a CUDA or ROCm build)
#   bash scripts/setup.sh --ci-tools   # plus the test extras (test,parquet,upload,models: pytest, moto, selenium,
#                                      # pyarrow, s3fs, transformers, ...), the trainers extra (megatron-core, without
#                                      # its dependencies) and the compilers and browser the tests use
# Installs into the active Python (a virtualenv if one is active). Prints one
# line per step. requirements/lock.txt pins every package but torch; README's
# "Updating dependencies" says how to regenerate it. A second run installs
# nothing when everything is already at its locked version (scripts/installed.py
# checks, in about a second, before pip is called).
set -euo pipefail
cd "$(dirname "$0")/.."

LOCK=requirements/lock.txt
UV_VERSION=0.13.10  # installs the lock (the version that wrote it: requirements/lock.txt's first line)
CI_TOOLS=
case "${1:-}" in
    "") ;;
    --ci-tools) CI_TOOLS=1 ;;
    *) echo "setup.sh: unknown option '$1'; use no option (the harness) or --ci-tools (plus the test tools)" >&2; exit 2 ;;
esac
# The main job needs the runtime dependencies only; the tests need the extras too. (pip only warns about an
# extra pyproject.toml does not define yet.)
EXTRAS=
[[ -n "$CI_TOOLS" ]] && EXTRAS=test,parquet,upload,models
# -qq: errors only (pip's notes about a machine's extra indexes are noise here).
PIP=(python -m pip install -qq --no-input -c "$LOCK")
step() { printf 'setup: %s\n' "$*"; }
since() { echo "$(( SECONDS - $1 )) s"; }

if [[ -n "$CI_TOOLS" ]]; then
    # hipcc (HIP 5.2) and clang-19 compile the HIP back end without an AMD GPU;
    # chromium and chromium-driver render report.html in the browser test. Debian packages.
    t=$SECONDS
    if ! command -v apt-get >/dev/null; then
        step "ci tools: no apt-get on this machine, skipped"
    elif command -v hipcc >/dev/null && command -v clang++-19 >/dev/null && command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
        step "ci tools: hipcc, clang-19, chromium, chromium-driver already installed"
    else
        export DEBIAN_FRONTEND=noninteractive
        # apt's chatter goes to a log that is shown only if a step fails.
        log=$(mktemp)
        if ! { apt-get update -qq && apt-get install -y -qq hipcc clang-19 chromium chromium-driver; } >"$log" 2>&1; then
            cat "$log" >&2
            step "ci tools: apt-get failed (above)"
            exit 1
        fi
        rm -f "$log"
        step "ci tools: installed hipcc, clang-19, chromium, chromium-driver with apt-get ($(since $t))"
    fi
fi

# Keep a torch that is already there (a GPU host's CUDA/ROCm build); otherwise
# take the CPU build, which is small. The lock never names torch, so the next
# step cannot replace it.
t=$SECONDS
if version=$(python -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null); then  # metadata: no torch import (seconds)
    step "torch: $version already installed, kept"
else
    "${PIP[@]}" torch==2.13.0
    step "torch: installed $(python -W ignore -c "import torch; print(torch.__version__)") ($(since $t))"
fi

t=$SECONDS
what=router-contracts${EXTRAS:+[$EXTRAS]}
if reason=$(python scripts/installed.py "$EXTRAS"); then
    step "$what: already installed here at the locked versions, nothing to do ($(since $t))"
else
    step "$what: installing ($reason)"
    # uv (the tool that writes the lock) installs it in seconds where pip takes about a minute (CI's set-up: 60 s
    # of pip); the torch installed above is pinned for it, so that nothing can replace it with another build. pip
    # where uv cannot be had.
    if "${PIP[@]}" "uv==$UV_VERSION" 2>/dev/null; then
        pin=$(mktemp)
        python -c "import importlib.metadata as m; print('torch==' + m.version('torch'))" > "$pin"
        python -m uv pip install -q --python "$(python -c 'import sys; print(sys.executable)')" -c "$LOCK" -c "$pin" -e ".${EXTRAS:+[$EXTRAS]}"
        rm -f "$pin"
        tool="uv $UV_VERSION"
    else
        "${PIP[@]}" -e ".${EXTRAS:+[$EXTRAS]}"
        tool=$(python -m pip --version | cut -d' ' -f1-2)
    fi
    step "$what: installed (editable) from $LOCK with $tool into $(python -c 'import sys; print(sys.prefix)') ($(since $t))"
fi

# The trainers extra (the mcore-* candidates, kernels/trainers): megatron-core at the release the mcore contracts cite,
# WITHOUT its dependencies, as the engines are installed (requirements/trainers.txt says why).
if [[ -n "$CI_TOOLS" ]]; then
    t=$SECONDS
    want=$(grep -E '^megatron-core==' requirements/trainers.txt | cut -d= -f3)
    if [[ "$(python -c "import importlib.metadata as m; print(m.version('megatron-core'))" 2>/dev/null || true)" == "$want" ]]; then
        step "megatron-core: $want already installed, nothing to do ($(since $t))"
    else
        python -m pip install -qq --no-input --no-deps "megatron-core==$want"
        step "megatron-core: installed $want without its dependencies ($(since $t))"
    fi
fi
