"""Answers correctly twice, then never returns (a kernel that spins forever)."""

import time

from ._common import correct, counter

_next_call = counter()


def route(scores, bias, topk, renormalize, rsf):
    if _next_call() >= 3:
        while True:
            time.sleep(3600)
    return correct(scores, bias, topk, renormalize, rsf)
