"""Dense answers: ``(probs [M, E], routing_map [M, E] bool)``, read as ``(weights [M, k], ids [M, k])``.

Megatron-core's ``topk_routing_with_score_function`` and Transformer Engine's
fused router answer with a dense probability map and a boolean routing map
instead of k columns: the map says which experts a token goes to, ``probs``
their weights, and there is no column order. The harness takes that answer
too, read here and only here:

- ``read_answer`` (called by ``contracts.candidates.calling`` on every
  call's copied answer, in process and in the worker, before repeats are
  compared or anything crosses the worker's pipe) checks the two tensors as
  a whole (shapes, ``torch.float32`` probs, a ``torch.bool`` map, the
  inputs' device: a one-line message, a ``validity`` finding on the case)
  and returns a ``DenseAnswer``: the pair ``(weights, ids)`` of the map's
  experts, highest prob first, with a per-row ``faults`` code for the rows
  the map gets wrong (more or fewer than k experts, a nonzero, NaN or
  infinite prob outside the map);
- ``for_comparison`` (called by the comparison, ``agrees`` and the tally's
  sample) puts a dense answer's experts in the expected answer's columns,
  so a dense answer is compared as a set: never blamed ``output_order``;
- ``add_faults`` files a faulted row under ``validity`` with its reason.

So check, matrix, search, bench, the pytest plugin and ``--logits`` (all of
which call candidates through ``calling``) take a dense answer, and every
command after the call sees the ``[M, k]`` pair it has always seen.

A nonzero prob outside the map is ``validity``, not a clause of its own:
the two tensors then disagree about where the token goes (Megatron's
dispatcher reads the map and drops that weight; a reader of ``probs``
routes to an expert not chosen), which is a malformed answer like an id out
of range, and no router may declare it. A NaN prob at a mapped expert is
compared as a NaN weight of an ``[M, k]`` answer is (the contract's weight
there may be NaN).
"""

from __future__ import annotations

import dataclasses

import torch

from .attribution import clauses as A

__all__ = ["FAULT_MORE", "FAULT_FEWER", "FAULT_OUTSIDE", "DenseAnswer", "add_faults", "dense_faults", "for_comparison", "is_dense",
           "order_free", "read_answer", "take_rows"]

# per-row faults of a dense answer (``DenseAnswer.faults``); each is the validity reason code of its row
FAULT_MORE, FAULT_FEWER, FAULT_OUTSIDE = A.R_DENSE_MORE, A.R_DENSE_FEWER, A.R_DENSE_OUTSIDE


class DenseAnswer(tuple):
    """``(weights fp32 [M, k], ids int32 [M, k])`` read from a dense answer: a pair like any other answer, with ``faults``
    (int64 [M], 0 for a clean row, else the row's ``FAULT_*`` code). A faulted row holds the map's experts, highest
    prob first, and id -1 (weight 0) in its last slot and in every slot a row with fewer than k experts leaves empty."""

    faults: torch.Tensor

    def __new__(cls, weights: torch.Tensor, ids: torch.Tensor, faults: torch.Tensor):
        self = super().__new__(cls, (weights, ids))
        self.faults = faults
        return self

    def __getnewargs__(self):  # pickles (the worker's pipe, a test's copy) with its faults
        return (self[0], self[1], self.faults)


def is_dense(value) -> bool:
    return isinstance(value, DenseAnswer)


def dense_faults(value) -> torch.Tensor | None:
    """A dense answer's per-row faults (0: clean), or None for any other answer."""
    return value.faults if isinstance(value, DenseAnswer) else None


def order_free(contract):
    """``contract`` compared with its output order open (``any``): how a dense answer, which has none, is compared."""
    return contract if contract.output_order == "any" else dataclasses.replace(contract, output_order="any")


def _looks_dense(value, experts: int, topk: int) -> bool:
    """A pair of tensors meant as a dense answer: a bool second tensor (no [M, k] answer has bool ids), or two 2-D
    tensors E wide where E is not k (a map that is not bool is then named as such, not as a wrong ids shape)."""
    p, m = value
    if m.dtype == torch.bool:
        return True
    return experts != topk and p.dim() == 2 and m.dim() == 2 and p.shape[1] == experts and m.shape[1] == experts


def _whole_problem(p: torch.Tensor, m: torch.Tensor, rows: int, experts: int, device: torch.device) -> str | None:
    """Why the two tensors are not a dense answer of ``rows`` rows (a validity finding on the case), or None."""
    shape = (rows, experts)
    if tuple(p.shape) != shape or tuple(m.shape) != shape:
        return f"dense answer of shapes probs {tuple(p.shape)}, routing_map {tuple(m.shape)}; expected {shape}"
    if m.dtype != torch.bool:
        return f"dense answer's routing_map is {m.dtype}; expected torch.bool: return routing_map.bool()"
    if p.dtype != torch.float32:
        return f"dense answer's probs are {p.dtype}; expected torch.float32: return probs.float()"
    if p.device != device or m.device != device:
        return f"dense answer on {p.device}/{m.device}; the inputs were on {device}"
    if p.layout != torch.strided or m.layout != torch.strided:
        return f"dense answer of layout {p.layout}/{m.layout}; expected dense tensors"
    return None


def _columns(p: torch.Tensor, m: torch.Tensor, topk: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The map's experts of each row, highest prob first (NaN last among them, then the lower id: stable sorts), and
    their probs; a row's slots past its experts hold id -1, weight 0."""
    key = torch.where(torch.isnan(p), torch.inf, -p)
    by_prob = torch.sort(key, dim=1, stable=True).indices
    mapped_first = torch.sort((~m).gather(1, by_prob).to(torch.int8), dim=1, stable=True).indices
    order = by_prob.gather(1, mapped_first)[:, :topk]
    filled = m.gather(1, order)
    ids = torch.where(filled, order, -1).to(torch.int32)
    weights = torch.where(filled, p.gather(1, order), 0.0)
    return weights.contiguous(), ids.contiguous()


def read_answer(value, *, rows: int, experts: int, topk: int, device: torch.device):
    """``value`` (a copied answer) as the comparison reads it: a dense answer as a ``DenseAnswer``, or a one-line message
    when it is malformed as a whole; anything else unchanged (``compare.verdicts.validity_failure`` judges it)."""
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, torch.Tensor) for t in value)):
        return value
    if isinstance(value, DenseAnswer) or not _looks_dense(value, experts, topk):
        return value
    p, m = value
    problem = _whole_problem(p, m, rows, experts, device)
    if problem:
        return problem
    try:
        count = m.sum(1)
        outside = ((p != 0) & ~m).any(1)  # NaN != 0: a NaN outside the map is a nonzero prob there
        faults = torch.where(count > topk, FAULT_MORE, torch.where(count < topk, FAULT_FEWER, 0))
        faults = torch.where(outside & (faults == 0), FAULT_OUTSIDE, faults).to(torch.int64)
        weights, ids = _columns(p, m, topk)
        if topk:  # a faulted row holds an id out of range wherever it goes (a replay's slice, the diagnosis's sample,
            # a matrix pair), so no reader that drops ``faults`` can take it for a routing
            ids[:, -1] = torch.where(faults != 0, -1, ids[:, -1])
            weights[:, -1] = torch.where(faults != 0, 0.0, weights[:, -1])
    except Exception as exc:  # noqa: BLE001 -- a meta tensor, a subclass: a finding, never a traceback
        return f"a dense answer the harness cannot read: raised {type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    return DenseAnswer(weights, ids, faults)


def for_comparison(actual, exp):
    """``actual`` with a dense answer's experts in the columns ``exp`` has them in (experts ``exp`` lacks in its free
    columns, in the answer's own order): a dense answer has no column order, so a row with the right set compares
    equal slot by slot and one with another set is blamed for the set. Anything else unchanged."""
    if not isinstance(actual, DenseAnswer):
        return actual
    w, ids = actual
    e = exp.ids.to(ids.device).to(ids.dtype)
    k = e.shape[1]
    if ids.shape != e.shape or k == 0:
        return actual
    slots = torch.arange(k, device=e.device)
    earlier = (e.unsqueeze(2) == e.unsqueeze(1)) & (slots.view(1, 1, k) < slots.view(1, k, 1))
    first = ~earlier.any(2)  # an expected id's first column (the expert-0 fallback repeats one)
    same = ids.unsqueeze(1) == e.unsqueeze(2)  # [M, expected col, actual col]
    taken = same.any(2) & first & (e >= 0)  # expected columns the answer has the expert of
    source = same.to(torch.int8).argmax(2)  # the answer's column holding it
    in_exp = (same & first.unsqueeze(2)).any(1)  # answer columns whose expert the expected answer has
    extras = torch.sort(in_exp.to(torch.int8), dim=1, stable=True).indices  # the answer's other columns first, in its order
    rank = ((~taken).cumsum(1) - 1).clamp(min=0)  # a free expected column's place among the free ones
    source = torch.where(taken, source, extras.gather(1, rank))
    return DenseAnswer(w.gather(1, source), ids.gather(1, source), actual.faults)


def take_rows(actual, rows: torch.Tensor):
    """``actual``'s rows ``rows`` (a replay's one row), a dense answer's faults with them."""
    w, ids = actual
    if isinstance(actual, DenseAnswer):
        return DenseAnswer(w.index_select(0, rows), ids.index_select(0, rows), actual.faults.index_select(0, rows))
    return w.index_select(0, rows), ids.index_select(0, rows)


def add_faults(blame, faults: torch.Tensor, rows: torch.Tensor) -> None:
    """File the dense faults of ``rows`` (the blamed rows, in order) under ``validity`` with their reason, in place: the
    map's fault is the row's first problem (its -1 fill would otherwise read as an id out of range)."""
    code = faults.to(rows.device)[rows].to(blame.validity_code.device)
    bad = code != 0
    blame.validity = torch.where(bad, A.INDEX["validity"], blame.validity)
    blame.validity_code = torch.where(bad, code.to(blame.validity_code.dtype), blame.validity_code)
