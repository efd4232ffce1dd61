"""Two steps of the route on their own, for explaining a mismatch with counterfactuals.

- ``select_ids(values, topk, contract=)``: the experts the contract chooses
  from given selection values (a ranking the caller changed: subnormals
  flushed, a group mask restricted), in contract order;
- ``weights_from(chosen, contract=, renormalize=, routed_scaling_factor=)``:
  the contract's weights of the given experts' scores (the candidate's own
  choice, or sig + bias to test whether a router put the bias in).

Both are exactly the route's own code (``_route._select``, ``_route._weights``).
"""

from __future__ import annotations

import torch

from ._lookup import get_contract
from ._contracts import Contract
from ._route import _Plan, _priority_on, _select, _weights, weight_dtype

__all__ = ["select_ids", "weights_from"]


def select_ids(values: torch.Tensor, topk: int, *, contract: str | Contract) -> torch.Tensor:
    """int32 ``[M, topk]``: the contract's choice from fp32 selection ``values`` ``[M, E]`` (no grouping applied)."""
    c = get_contract(contract)
    ids = _select(values.float(), topk, _priority_on(values.shape[1], c.tie_rule, values.device), c)
    if c.has_fallback:
        ids = ids.clamp(min=0)
    return ids.to(torch.int32)


def weights_from(chosen: torch.Tensor, *, contract: str | Contract, renormalize: bool, routed_scaling_factor: float,
                 logits_dtype: torch.dtype = torch.float32, slot_scale: torch.Tensor | None = None) -> torch.Tensor:  # fmt: skip
    """fp32 ``[M, k]``: the contract's weights of ``chosen`` (fp32 per-slot scores, in output order).

    ``slot_scale``: for a ``weight_scale="per_expert"`` contract, the scale of each slot's expert (``scale[ids]``,
    ``[M, k]``), multiplied in last as the route does (omitted: all ones, the route's default)."""
    c = get_contract(contract)
    values = chosen.float()
    rows, k = values.shape
    unused = torch.arange(k, device=values.device)  # _weights reads no priority
    plan = _Plan(c, k, 1, 1, bool(renormalize), float(routed_scaling_factor), unused, unused[:1], None,
                 weight_dtype=weight_dtype(c, logits_dtype))
    slots = torch.arange(k, device=values.device).expand(rows, k)
    w = _weights(values, values, slots, plan, logits_dtype)
    if slot_scale is None or c.weight_scale != "per_expert":
        return w
    return w * slot_scale.to(w.device).float()  # the route's last step, w * scale[id]: the same fp32 product
