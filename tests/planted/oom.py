"""Allocates memory until an allocation fails.

Bounded so that it can never take a shared machine down: in a worker process
(``CONTRACTS_WORKER`` is set) it first caps its own address space at what it
already maps plus 512 MiB (``RLIMIT_AS``), then fills 64 MiB blocks until the
allocator refuses. Anywhere else it asks for one impossible tensor (2**60
bytes), which fails at once without touching memory.
"""

import os
import resource

import torch

HEADROOM = 512 << 20
BLOCK = 64 << 20


def _mapped_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def route(scores, bias, topk, renormalize, rsf):
    if not os.environ.get("CONTRACTS_WORKER"):
        torch.empty(1 << 60, dtype=torch.uint8)  # RuntimeError: can't allocate memory
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (_mapped_bytes() + HEADROOM, hard))
    hoard = []
    while True:
        hoard.append(torch.ones(BLOCK, dtype=torch.uint8))  # touched, so really resident
