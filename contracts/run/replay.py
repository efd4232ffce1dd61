"""Replay lines: the command that reruns one case (and shows one row) exactly."""

from __future__ import annotations

import shlex

from ..cases import CaseSpec

__all__ = ["replay_command"]


def replay_command(
    candidate: str, contract: str, device: str, spec: CaseSpec, row: int | None, against: str | None, exact: bool, repeat: int = 1
) -> str:
    parts = ["python", "-m", "contracts.check", "--candidate", candidate, "--contract", contract, "--device", device]
    if against:
        parts += ["--against", against]
    if exact:
        parts.append("--exact")
    if (spec.experts, spec.topk) != (896, 16):
        parts += ["--experts", str(spec.experts), "--topk", str(spec.topk)]
    if repeat > 1:
        parts += ["--repeat", str(repeat)]
    parts += ["--replay", spec.replay_id]
    if row is not None:
        parts += ["--row", str(row)]
    return shlex.join(parts)
