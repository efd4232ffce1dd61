"""The released models' own routers, from the installed ``transformers`` package, as routing functions.

Each family's router class (``ROUTERS``: the modeling module and class it
runs) is constructed from a small config of the model's own config class
(hidden size = E, the family's E and top-k; random-free: nothing is
downloaded and no weight is read), and is fed the logits unchanged: the
gate's projection is replaced by the identity (``_fed``: the modeling
module's ``F.linear`` and the router's ``nn.Linear`` submodules return
their input as is, keeping the dtype the model's code casts to), the
correction bias is written into the router's own buffer, and the options
of a call (``norm_topk_prob``, ``routed_scaling_factor``, the group shape)
into the attributes the router reads. Everything after the projection is
the model's code, unchanged: its ``torch.topk`` (ties and NaN its own way),
its dtype casts, its renormalization.

Every route is ``fn(scores, bias, topk, renormalize, routed_scaling_factor,
*, num_expert_group=None, topk_group=None, expert_scale=None) -> (weights fp32 [M, k],
ids int32 [M, k])`` (``expert_scale``: Gemma 4's per-expert weight scale, ``[E]``; its
``per_expert_scale`` parameter holds it for the call); ``available(family)`` says why not (transformers missing or too
old) in one line. Like the rest of ``kernels/``, nothing here imports
``oracle`` or ``contracts``.
"""

from __future__ import annotations

from ._table import MIN_TRANSFORMERS, ROUTERS, Router

__all__ = ["MIN_TRANSFORMERS", "ROUTERS", "Router", "available", "route_for"]


def available(family: str) -> tuple[bool, str]:
    """``(True, what runs)`` or ``(False, why not, with the fix)``; never raises."""
    from ._hf import check_available

    return check_available(ROUTERS[family])


def route_for(family: str):
    """The routing function of ``family``'s router (transformers is imported on its first call)."""
    from ._hf import make_route

    return make_route(ROUTERS[family])
