"""Small pieces the command-line modules share: the usage error, argument
types, the device and output-folder checks, and the device a candidate runs on."""

from __future__ import annotations

import argparse
from pathlib import Path

__all__ = ["UsageError", "check_device", "device_for", "ensure_writable", "positive_int"]


class UsageError(Exception):
    """Bad command-line input; the message names the argument and the fix."""


def positive_int(example: str):
    """An argparse ``type`` for an int >= 1; argparse names the option, ``example`` shows the fix."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}; e.g. {example}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}; e.g. {example}")
        return value

    return parse


def check_device(requested: str) -> str:
    """``requested`` if this host can run it (cpu, or cuda with a GPU torch sees); else a UsageError."""
    import torch

    kind = requested.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"--device {requested!r} is not supported; use cpu or cuda")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no GPU on this host; use --device cpu")
    return requested


def device_for(candidate, requested: str | None) -> str:
    """The device to run ``candidate`` on: the one asked for, else cuda when it runs there and a GPU is present."""
    import torch

    if requested:
        return check_device(requested)
    if "cuda" in candidate.devices and torch.cuda.is_available():
        return "cuda"
    return "cpu" if "cpu" in candidate.devices else candidate.devices[0]


def ensure_writable(out: Path) -> Path:
    """Create ``out`` and prove a file can be written there; else a UsageError naming --out."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {out} is not writable ({exc.strerror or exc}); choose another directory") from None
    return out
