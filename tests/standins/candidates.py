"""CPU candidates for rehearsing the ``aiter`` checks without AMD hardware.

``aiter_on_cpu`` is the registered ``aiter`` candidate (same route through
``kernels.adapters.aiter``, same declared deviations, same ``covered`` gate)
with its ROCm gates replaced by "runs on the CPU". The module it calls is
whatever ``$ROUTER_AITER_MODULE`` names, e.g.::

    ROUTER_AITER_MODULE=tests.standins.aiter_standin \\
        python -m contracts.check --candidate tests.standins.candidates:aiter_on_cpu --against aiter-model
"""

from __future__ import annotations

import dataclasses

from contracts.candidates import get_candidate


def _cpu(device: str) -> tuple[bool, str]:
    return True, "runs the stand-in named by $ROUTER_AITER_MODULE on the CPU"


def _nothing(device: str) -> None:
    return None


aiter_on_cpu = dataclasses.replace(
    get_candidate("aiter"),
    name="aiter-on-cpu",
    devices=("cpu",),
    description="kernels.adapters.aiter over the stand-in named by $ROUTER_AITER_MODULE (NOT aiter)",
    supported_hardware=_cpu,
    build=_nothing,
    origin="tests.standins.candidates",
)
