"""Small pieces the command-line modules share: the usage error, argument
types, the device and output-folder checks, the device a candidate runs on,
and the main() of a command."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Callable

__all__ = ["EXIT_USAGE", "UsageError", "check_device", "device_for", "ensure_writable", "positive_int", "run_command"]

EXIT_USAGE = 2  # every command's exit code for bad input


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


def run_command(
    module: str,
    argv: list[str] | None,
    build_parser: Callable[[], argparse.ArgumentParser],
    run: Callable[[argparse.Namespace, str], int],
) -> int:
    """A command's main(): parse ``argv`` (default ``sys.argv[1:]``), then ``run(args, command_line)``.

    ``--help`` exits 0; a parse error, a UsageError or a candidate that cannot
    be loaded prints one line and exits EXIT_USAGE. ``command_line`` is the
    invocation as ``python -m MODULE ...``, for the report.
    """
    from .registry import CandidateLoadError, DuplicateCandidateError  # not at import: the registry is heavier

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # argparse already printed the message
        return EXIT_USAGE if exc.code else 0
    try:
        return run(args, shlex.join(["python", "-m", module, *argv]))
    except (UsageError, CandidateLoadError, DuplicateCandidateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
