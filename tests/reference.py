"""A plain per-row reference of both contracts, for tests only.

Deliberately slow and literal: Python loops over one row at a time, numpy
float32 scalars for fp32 arithmetic. It takes the fp32 sigmoid and ranking
values as inputs (their arithmetic is tested on its own), and implements
selection, ties, NaN, the sentinel, output order and weights from the
contract text, independently of the vectorized oracle.
"""

from __future__ import annotations

import math

import numpy as np

LANE_RANK_FROM_SPEC = [
    56, 57, 58, 59, 63, 62, 61, 60, 52, 53, 54, 55, 51, 50, 49, 48,
    40, 41, 42, 43, 47, 46, 45, 44, 36, 37, 38, 39, 35, 34, 33, 32,
    24, 25, 26, 27, 31, 30, 29, 28, 20, 21, 22, 23, 19, 18, 17, 16,
    8, 9, 10, 11, 15, 14, 13, 12, 4, 5, 6, 7, 3, 2, 1, 0,
]  # fmt: skip

F32 = np.float32


def aiter_priority(experts):
    order = sorted(range(experts), key=lambda e: (LANE_RANK_FROM_SPEC[(e >> 2) & 63], e))
    prio = [0] * experts
    for p, e in enumerate(order):
        prio[e] = p
    return prio


def aiter_row(sig, ranking, topk, renormalize, rsf):
    """One row under the aiter contract; sig and ranking are lists of np.float32."""
    prio = aiter_priority(len(ranking))

    def sort_key(e):
        v = float(ranking[e])
        if math.isnan(v):
            return (1, 0.0, prio[e])  # NaN after every number
        return (0, -v, prio[e])  # -0.0 == +0.0 as floats, so zeros tie

    ids = sorted(range(len(ranking)), key=sort_key)[:topk]
    w = [F32(sig[e]) for e in ids]
    if renormalize:
        total = F32(0)
        for x in w:
            total = F32(total + x)
        if total > 0:
            w = [F32(x / total) for x in w]
    return [F32(x * F32(rsf)) for x in w], ids


def serial_row(sig, ranking, topk, renormalize, rsf):
    """One row under the serial contract: the serial scan, literally."""
    biased = [F32(v) for v in ranking]
    sentinel = F32(-1e30)
    ids = []
    for _ in range(topk):
        best, bi = sentinel, 0
        for e, v in enumerate(biased):
            if v > best:
                best, bi = v, e
        biased[bi] = sentinel
        ids.append(bi)
    w = [F32(sig[e]) for e in ids]
    if renormalize:
        den = F32(0)
        for x in w:
            den = F32(den + x)
        w = [F32(F32(x / F32(den + F32(1e-20))) * F32(rsf)) for x in w]
    else:
        w = [F32(x * F32(rsf)) for x in w]
    return w, ids
