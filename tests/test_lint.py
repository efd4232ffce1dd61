"""The lint CI holds (pyproject.toml's [tool.ruff]): pyflakes' findings in oracle/, contracts/ and kernels/.

An undefined name is a crash waiting for its branch (``BaseExceptionGroup`` on Python 3.10, which the package
supports, was one: a search that found a bug raised NameError there); unused imports and variables hide edits that
went half-way. ruff comes with the test tools (``scripts/setup.sh --ci-tools``)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_product_packages():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "No module named ruff" not in done.stderr, "ruff is one of the test tools: bash scripts/setup.sh --ci-tools"
    assert done.returncode == 0, done.stdout + done.stderr
