"""Correct on every torchrun rank but one: the rank named by ``PLANTED_FAIL_RANK`` fails as ``PLANTED_FAIL_MODE`` says.

- ``kill``: SIGKILLs its own process at its first call (the rank dies, as on
  an out-of-memory kill; an ``os._exit`` in a call is fenced by the harness),
  once rank 0 has begun its first case, so that rank 0 has rows to keep.
- ``import``: this module raises on import there, so that rank's command
  raises before it checks anything.

Each rank's first call writes ``<PLANTED_MARKER>.<RANK>`` holding its pid,
so a test knows the ranks are running and can signal one of them.
"""

import os
import signal
import time
from pathlib import Path

from ._common import correct, counter

_RANK = os.environ.get("RANK", "0")
_FAILS_HERE = os.environ.get("PLANTED_FAIL_RANK") == _RANK
_MODE = os.environ.get("PLANTED_FAIL_MODE", "kill")

if _FAILS_HERE and _MODE == "import":
    raise ImportError(f"planted: this module does not import on rank {_RANK}")

_next_call = counter()


def route(scores, bias, topk, renormalize, rsf):
    marker = os.environ.get("PLANTED_MARKER")
    if _next_call() == 1 and marker:
        Path(f"{marker}.{_RANK}").write_text(str(os.getpid()))
    if _FAILS_HERE and _MODE == "kill":
        deadline = time.monotonic() + 120
        while marker and not Path(f"{marker}.0").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGKILL)
    return correct(scores, bias, topk, renormalize, rsf)
