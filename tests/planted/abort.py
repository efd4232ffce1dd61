"""Answers correctly once, then calls abort() (SIGABRT), as a failed C assert would."""

import os

from ._common import correct, counter

_next_call = counter()


def route(scores, bias, topk, renormalize, rsf):
    if _next_call() >= 2:
        os.abort()
    return correct(scores, bias, topk, renormalize, rsf)
