"""Answers correctly twice, then dereferences NULL (SIGSEGV) on its third call."""

import ctypes

from ._common import correct, counter

CRASH_ON_CALL = 3
_next_call = counter()


def route(scores, bias, topk, renormalize, rsf):
    if _next_call() >= CRASH_ON_CALL:
        ctypes.string_at(0)  # reads address 0: a real segfault, not a Python exception
    return correct(scores, bias, topk, renormalize, rsf)
