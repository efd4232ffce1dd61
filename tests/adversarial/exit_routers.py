"""Routers that attack the exit codes of ``bench``, ``diff`` and ``nightly`` (``tests/adversarial/test_exit_codes.py``).

Each is a ``module:attr`` router (``--candidate tests.adversarial.exit_routers:NAME``). Each answers correctly where
it does not attack, so that only the attack can make a command fail.
"""

import ctypes
import os
import sys

import torch

from tests.planted._common import correct


def right(scores, bias, topk, renormalize, rsf, **groups):
    """The oracle's answer: the healthy baseline next to the attackers."""
    return correct(scores, bias, topk, renormalize, rsf)


def calls_sys_exit(scores, bias, topk, renormalize, rsf, **groups):
    """Ends the run the polite way, with status 0."""
    sys.exit(0)


def calls_os_exit(scores, bias, topk, renormalize, rsf, **groups):
    """Ends the process at once, with status 0: no bench.json, no exit code of the harness's choosing."""
    os._exit(0)


def calls_libc_exit(scores, bias, topk, renormalize, rsf, **groups):
    """Ends the process through libc's ``_exit(0)``, past any patch of ``os._exit``."""
    ctypes.CDLL(None)._exit(0)


def exits_at_64_rows(scores, bias, topk, renormalize, rsf, **groups):
    """Right below 64 rows; at 64 and above ``os._exit(0)``."""
    if scores.shape[0] >= 64:
        os._exit(0)
    return correct(scores, bias, topk, renormalize, rsf)


def raises_at_8_rows(scores, bias, topk, renormalize, rsf, **groups):
    """Right except at exactly 8 rows, where it raises."""
    if scores.shape[0] == 8:
        raise RuntimeError("planted failure at M=8")
    return correct(scores, bias, topk, renormalize, rsf)


def returns_none(scores, bias, topk, renormalize, rsf, **groups):
    """Returns nothing, fast: a bench must not time it as a router."""
    return None


def returns_wrong_dtypes(scores, bias, topk, renormalize, rsf, **groups):
    """The right ids and weights, as fp16 weights and int64 ids."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.half(), ids.long()


def returns_one_column_short(scores, bias, topk, renormalize, rsf, **groups):
    """The right answer without its last column: [M, k-1]."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w[:, :-1].contiguous(), ids[:, :-1].contiguous()


_calls = [0]


def none_after_warmup(scores, bias, topk, renormalize, rsf, **groups):
    """Right on its first two calls, then returns None: a check of one call before timing would not see it."""
    _calls[0] += 1
    if _calls[0] > 2:
        return None
    return correct(scores, bias, topk, renormalize, rsf)


def wrong_experts(scores, bias, topk, renormalize, rsf, **groups):
    """Every id moved to the next expert (mod E): breaks every row of a check."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w, ((ids + 1) % scores.shape[-1]).to(ids.dtype)


_alternating = [0]


def none_every_other_call(scores, bias, topk, renormalize, rsf, **groups):
    """Right on every odd call, None on every even one: one checked call in two would pass it."""
    _alternating[0] += 1
    if _alternating[0] % 2 == 0:
        return None
    return correct(scores, bias, topk, renormalize, rsf)


def returns_column_major(scores, bias, topk, renormalize, rsf, **groups):
    """The right values as transposed views of [k, M] tensors: an engine reading the data pointer gets other rows."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.t().contiguous().t(), ids.t().contiguous().t()


def wrong_under_any_contract(scores, bias, topk, renormalize, rsf, **groups):
    """Plain torch, no contract assumed: the softmax top-k's weights with every id moved to the next expert (mod E).
    Wrong on every row under any contract, so a check of it FAILs (it never raises)."""
    weights, ids = torch.softmax(scores.float(), dim=-1).topk(topk, dim=-1)
    return weights.contiguous(), ((ids + 1) % scores.shape[-1]).to(torch.int32)
