"""What ran the check: torch, the device, its runtime and driver, the project's commit."""

from __future__ import annotations

import platform
import subprocess
from pathlib import Path

import torch

__all__ = ["environment", "git_commit"]

_ROOT = Path(__file__).resolve().parent.parent


def git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=_ROOT, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def environment(device: str) -> dict:
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "device_name": platform.processor() or platform.machine(),
        "backend": "cpu",
        "runtime": None,
        "driver": None,
        "git_commit": git_commit(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        hip = getattr(torch.version, "hip", None)
        env.update(
            device_name=torch.cuda.get_device_name(),
            backend="rocm" if hip else "cuda",
            runtime=f"hip {hip}" if hip else f"cuda {torch.version.cuda}",
            driver=None if hip else _driver_version(),
        )
    return env
