"""Calls sys.exit() from inside the route (a library that gives up on the process)."""

import sys


def route(scores, bias, topk, renormalize, rsf):
    sys.exit(3)
