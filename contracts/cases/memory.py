"""Keep freed CPU memory for reuse during a run.

Every case allocates the same large tensors again (a 16,384 x 896 fp32
tensor is 58 MB). glibc's malloc serves blocks that large with a fresh
``mmap`` and returns them on ``free``, so each case pays the page faults of
touching new memory: on a 2-core CPU that is about half of a bulk case's
generation time. Disabling ``mmap`` for large blocks and never trimming the
heap lets the next case reuse the pages the last one freed (measured: a
bulk case's generation 87 -> 41 ms). The peak RSS is unchanged, since it is
the peak either way; what changes is that the RSS no longer falls back
between cases, which a run that allocates the same sizes over and over
never needs.

It is process-wide, so only the harness's runs call it (a candidate's check,
a matrix, a worker process at start), never an import. Without glibc (macOS,
musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

__all__ = ["reuse_freed_memory"]

_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_NEVER_TRIM = 2**31 - 1  # mallopt takes an int: the largest, 2 GiB of free heap top kept


@functools.cache
def reuse_freed_memory() -> bool:
    """Whether glibc's malloc now keeps freed memory for reuse (False where there is no glibc)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER_TRIM))
