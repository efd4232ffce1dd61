"""The conformance suite on captured logits: ``pytest --pyargs contracts.conformance --candidate X --logits FILE``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent


def _pytest(cwd, *args, timeout=300):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(TESTS)])}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "contracts.pytest_plugin", "--pyargs",
                           "contracts.conformance", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.slow  # two pytest sessions in subprocesses, each importing torch and the harness (~20 s each on a loaded 2-core machine)
def test_the_layers_of_a_captured_file_are_the_families(tmp_path):
    save_file({"logits": torch.randn(2, 200, 16, generator=torch.Generator().manual_seed(5))}, str(tmp_path / "x.safetensors"))
    common = ["--contract", "qwen3-moe", "--logits", str(tmp_path / "x.safetensors"), "-q", "-rs", "--no-isolate"]
    code, out = _pytest(tmp_path, "--candidate", "captured_routers:softmax_topk", *common)
    assert code == 0, out
    assert "captured.L0" not in out or "failed" not in out
    code, out = _pytest(tmp_path, "--candidate", "captured_routers:softmax_topk_unnormalized", *common, "-k", "renormalization")
    assert code == 1, out
    assert "2 failed" in out and "captured.L0" in out and "captured.L1" in out, out
