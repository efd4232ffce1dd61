"""Dense answers ``(probs [M, E], routing_map [M, E] bool)``, as Megatron-core and Transformer Engine give them.

``right`` is the oracle's answer scattered into dense form (must PASS); every other router is right but for one
malformation of the dense form (must FAIL ``validity``), or one wrong value (blamed as the ``[M, k]`` answer would
be). Each is a ``module:attr`` router (``--candidate tests.adversarial.dense_answers:NAME``, contract ``aiter``:
sigmoid + bias, rank order, so the probs' order is not the contract's column order); ``make(NAME, contract)`` builds
one for another contract. Row 1 of a call is the one attacked where the malformation is per row (a call of one row
is attacked there).
"""

from __future__ import annotations

import torch

import oracle

CONTRACT = "aiter"


def _dense(scores, w, ids):
    probs = torch.zeros(scores.shape, dtype=torch.float32, device=scores.device).scatter(1, ids.long(), w.float())
    routing_map = torch.zeros(scores.shape, dtype=torch.bool, device=scores.device).scatter(1, ids.long(), True)
    return probs, routing_map, ids.long()


def _row(scores) -> int:
    return min(1, scores.shape[0] - 1)


def _unchosen(routing_map, row) -> int:
    return int((~routing_map[row]).nonzero()[0])


# Each attack takes (scores, probs, routing_map, ids) of the right answer and returns the answer to give.


def _right(scores, p, m, ids):
    return p, m


def _one_more(scores, p, m, ids):  # k + 1 experts in one row
    r = _row(scores)
    m[r, _unchosen(m, r)] = True
    return p, m


def _one_fewer(scores, p, m, ids):  # k - 1 experts in one row (its prob zeroed too: only the map is wrong)
    r = _row(scores)
    m[r, ids[r, -1]] = False
    p[r, ids[r, -1]] = 0.0
    return p, m


def _empty_row(scores, p, m, ids):  # a row routed nowhere
    r = _row(scores)
    m[r] = False
    p[r] = 0.0
    return p, m


def _prob_outside(scores, p, m, ids):  # weight on an expert the map does not route to
    r = _row(scores)
    p[r, _unchosen(m, r)] = 0.25
    return p, m


def _nan_outside(scores, p, m, ids):
    r = _row(scores)
    p[r, _unchosen(m, r)] = float("nan")
    return p, m


def _inf_outside(scores, p, m, ids):
    r = _row(scores)
    p[r, _unchosen(m, r)] = float("inf")
    return p, m


def _probs_bf16(scores, p, m, ids):  # Megatron's probs in the logits' dtype, not converted
    return p.bfloat16(), m


def _probs_narrow(scores, p, m, ids):  # one expert column short
    return p[:, :-1].contiguous(), m


def _probs_rows_short(scores, p, m, ids):
    return p[:-1].contiguous(), m[:-1].contiguous()


def _map_int(scores, p, m, ids):  # a 0/1 map, as Megatron builds it before .bool()
    return p, m.long()


def _map_uint8(scores, p, m, ids):
    return p, m.to(torch.uint8)


def _map_meta(scores, p, m, ids):  # the map on another device
    return p, m.to("meta")


def _probs_meta(scores, p, m, ids):
    return p.to("meta"), m


def _nan_mapped(scores, p, m, ids):  # NaN weight at a chosen expert: a wrong value, compared as an [M, k] NaN weight
    r = _row(scores)
    p[r, ids[r, 0]] = float("nan")
    return p, m


def _selection(scores, p, m, ids):  # the top expert dropped for an unchosen one, its weight moved there: a wrong set
    r = _row(scores)
    other = _unchosen(m, r)
    p[r, other], p[r, ids[r, 0]] = p[r, ids[r, 0]], 0.0
    m[r, other], m[r, ids[r, 0]] = True, False
    return p, m


ATTACKS = {
    "right": _right,
    "one_more": _one_more,
    "one_fewer": _one_fewer,
    "empty_row": _empty_row,
    "prob_outside": _prob_outside,
    "nan_outside": _nan_outside,
    "inf_outside": _inf_outside,
    "probs_bf16": _probs_bf16,
    "probs_narrow": _probs_narrow,
    "probs_rows_short": _probs_rows_short,
    "map_int": _map_int,
    "map_uint8": _map_uint8,
    "map_meta": _map_meta,
    "probs_meta": _probs_meta,
    "nan_mapped": _nan_mapped,
    "selection": _selection,
}


# the attacks on one row: an empty batch has none to attack, and is answered right
ROW_ATTACKS = frozenset({"one_more", "one_fewer", "empty_row", "prob_outside", "nan_outside", "inf_outside", "nan_mapped", "selection"})


def make(name: str, contract=CONTRACT):
    attack = ATTACKS[name] if name not in ROW_ATTACKS else lambda scores, *answer: (ATTACKS[name] if scores.shape[0] else _right)(scores, *answer)

    def route(scores, bias, topk, renormalize, rsf, **kwargs):
        w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract, **kwargs)
        return attack(scores, *_dense(scores, w, ids))

    route.__name__ = name
    return route


globals().update({name: make(name) for name in ATTACKS})
