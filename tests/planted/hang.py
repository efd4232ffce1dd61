"""Answers correctly twice, then never returns (a kernel that spins forever).

If ``PLANTED_MARKER`` names a file, it writes "hanging" there first, so a
test knows when the hang has begun.
"""

import os
import time
from pathlib import Path

from ._common import correct, counter

_next_call = counter()


def route(scores, bias, topk, renormalize, rsf):
    if _next_call() >= 3:
        if os.environ.get("PLANTED_MARKER"):
            Path(os.environ["PLANTED_MARKER"]).write_text("hanging")
        while True:
            time.sleep(3600)
    return correct(scores, bias, topk, renormalize, rsf)
