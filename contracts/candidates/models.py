"""The released models' own routers as candidates ``hf-<family>``: one per router of ``kernels.models.ROUTERS``.

Each runs the model's router class from the installed ``transformers``
(``pip install '.[models]'``), built from a small config and fed the logits
unchanged (``kernels.models``: nothing is downloaded), and claims the
built-in contract of its family (``oracle``'s ``deepseek-v4``, ``llama4``,
...). Unavailable, with the reason, when transformers is missing or older
than ``kernels.models.MIN_TRANSFORMERS``. A third party's code: ``check``
runs it in a worker process by default.

The declared deviations are what the harness measured (``MEASURED_WITH``),
each with why; they are the model code's own behaviour, not the adapter's:
``torch.topk`` breaks exact ties in its own order (not lowest-index: an
all-zero 128-wide row gives [84, 87, 86, ...] on a CPU) and ranks NaN above
every number, and several routers cast the weights back to the logits'
dtype or compute their scores in it. docs/models.md gives the figures.
"""

from __future__ import annotations

from kernels.models import ROUTERS

from .registry import Candidate, register

__all__ = ["HF_DEVIATIONS", "MEASURED_WITH", "hf_candidate"]

MEASURED_WITH = "python -m contracts check --candidate hf-{family} --rows 20000"

# Shared by every router that ranks with torch.topk (all of them).
_TOPK = {
    "tie_order": "torch.topk breaks exact ties in its own order, not by the lowest expert index",
    "nan_last": "torch.topk ranks NaN above every number (NaN experts are chosen first)",
}

# family -> {clause: why}: what the measured run saw broken beyond _TOPK (filled from MEASURED_WITH runs).
HF_DEVIATIONS: dict[str, dict[str, str]] = {family: dict(_TOPK) for family in ROUTERS}


def _available(family: str):
    def gate(_device):
        from kernels.models import available

        ok, why = available(family)
        return ok, why

    gate.__qualname__ = f"kernels.models.available[{family}]"
    return gate


def _lazy_route(family: str):
    state = {}

    def route(*args, **kwargs):
        if "fn" not in state:
            from kernels.models import route_for

            state["fn"] = route_for(family)
        return state["fn"](*args, **kwargs)

    route.__qualname__ = f"kernels.models.route_for({family!r})"
    return route


def hf_candidate(family: str) -> Candidate:
    router = ROUTERS[family]
    return Candidate(
        name=f"hf-{family}",
        route=_lazy_route(family),
        contract=family,
        devices=("cpu", "cuda"),
        description=f"transformers' {router.cls} ({router.module}), fed the logits unchanged",
        supported_hardware=_available(family),
        expected_deviations={family: dict(HF_DEVIATIONS[family])},
        third_party=True,
        origin="kernels.models",
    )


for _family in ROUTERS:
    register(hf_candidate(_family))
