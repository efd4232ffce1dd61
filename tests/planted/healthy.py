"""A correct third-party candidate: the oracle's answer, with a print that must not disturb the worker protocol."""

import sys

from ._common import correct


def route(scores, bias, topk, renormalize, rsf):
    print("healthy candidate: a print on stdout")
    print("healthy candidate: a line on stderr", file=sys.stderr)
    return correct(scores, bias, topk, renormalize, rsf)
