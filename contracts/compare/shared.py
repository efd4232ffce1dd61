"""The shared expert slot (``shared_expert_slot = "last"``): its column checked apart from the routed ones.

Such a contract's answer has ``topk + 1`` columns; the last holds the shared
expert, id ``E``, weighted by the routed weights' fp32 sum divided by
``routed_scaling_factor`` (``oracle``'s ``_with_shared_slot``). The routed
columns go through the comparison as any contract's ``[M, topk]`` answer;
this module checks the last column and adds what it finds to the row's
blame, so a router passes only with the right id and weight there:

- an id other than ``E`` in the last column is ``validity`` (the slot is
  part of the output's shape, as the ids' range is);
- a weight that is neither the contract's nor the candidate's own routed
  weights' sum over the factor (that one is consistent: the routed weights'
  own clause explains the row) is ``scaling`` when it is off by a known
  factor (the routed scaling factor not divided out, or divided twice),
  else ``weight_accuracy``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .attribution import clauses as A
from .attribution.weights import known_factors
from .tolerance import weights_close

__all__ = ["SharedSlot", "add_to_blame", "split_shared"]


@dataclass
class SharedSlot:
    """Per row of a case: what is wrong with the last column (all False for a clean row)."""

    exact: torch.Tensor  # [M] bool: id and weight bit-equal to the oracle's
    id_bad: torch.Tensor  # [M] bool: the last id is not E
    weight_bad: torch.Tensor  # [M] bool: the weight is neither the contract's nor consistent with the routed weights
    weight_clause: torch.Tensor  # [M] long: INDEX of scaling or weight_accuracy where weight_bad

    @property
    def bad(self) -> torch.Tensor:
        return self.id_bad | self.weight_bad


def _sequential_sum(w: torch.Tensor) -> torch.Tensor:
    total = torch.zeros(w.shape[0], dtype=torch.float32, device=w.device)
    for j in range(w.shape[1]):  # output order, one slot at a time: the oracle's order
        total = total + w[:, j]
    return total


def split_shared(exp, actual, contract, case):
    """``(routed expected, routed actual, SharedSlot)``, or a one-line problem when the answer lacks the slot."""
    w, ids = actual
    rows, k = case.spec.rows, case.topk
    shape = (rows, k + 1)
    if not (isinstance(w, torch.Tensor) and isinstance(ids, torch.Tensor)):
        return None  # not two tensors: the validity check says so
    # plain tensors, as the comparison reads them (a subclass cannot lie through == or isclose)
    w, ids = (t.detach().as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t.detach() for t in (w, ids))
    if tuple(w.shape) != shape or tuple(ids.shape) != shape:
        return (f"shapes weights {tuple(w.shape)}, ids {tuple(ids.shape)}; expected {shape} (topk routed experts, then the "
                f"shared expert: contract {contract.name} has shared_expert_slot = last)")  # fmt: skip
    experts = case.scores.shape[1]
    w_s, id_s = w[:, k].to(exp.weights.device), ids[:, k].to(exp.ids.device)
    we_s = exp.weights[:, k]
    rsf = float(case.routed_scaling_factor)
    own = _sequential_sum(w[:, :k].to(exp.weights.device).float()) / rsf  # what the candidate's own routed weights give
    one = lambda t: t.unsqueeze(1)  # noqa: E731 -- weights_close compares [M, n]
    close_contract = weights_close(one(w_s), one(we_s), contract)[:, 0]
    close_own = weights_close(one(w_s), one(own), contract)[:, 0]
    weight_bad = ~close_contract & ~close_own
    by_factor = torch.zeros_like(weight_bad)
    for f in known_factors(k, rsf):
        by_factor |= weights_close(one(w_s), one(we_s * f), contract)[:, 0] | weights_close(one(w_s), one(own * f), contract)[:, 0]
    clause = torch.where(by_factor, A.INDEX["scaling"], A.INDEX["weight_accuracy"])
    bits = (w_s == we_s) | (torch.isnan(w_s) & torch.isnan(we_s))
    slot = SharedSlot(exact=(id_s == exp.ids[:, k]) & bits, id_bad=id_s.long() != experts, weight_bad=weight_bad, weight_clause=clause)
    routed = exp.replaced(exp.weights[:, :k], exp.ids[:, :k])
    return routed, (w[:, :k], ids[:, :k]), slot


def add_to_blame(blame, slot: SharedSlot, rows: torch.Tensor) -> None:
    """Add the last column's faults of ``rows`` (the blamed rows, in order) to ``blame``, in place."""
    id_bad, weight_bad, clause = slot.id_bad[rows], slot.weight_bad[rows], slot.weight_clause[rows]
    free = blame.validity == A.NONE
    blame.validity = torch.where(id_bad & free, A.INDEX["validity"], blame.validity)
    blame.validity_code = torch.where(id_bad & free, A.R_SHARED_ID, blame.validity_code)
    first = weight_bad & (blame.weights == A.NONE)
    second = weight_bad & ~first & (blame.weights2 == A.NONE) & (blame.weights != clause)
    blame.weights = torch.where(first, clause, blame.weights)
    blame.weights_code = torch.where(first, A.R_SHARED_WEIGHT, blame.weights_code)
    blame.weights2 = torch.where(second, clause, blame.weights2)
    blame.weights2_code = torch.where(second, A.R_SHARED_WEIGHT, blame.weights2_code)
