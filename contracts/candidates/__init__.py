"""Candidates: the routers under test, and how they are called.

- ``registry``: ``Candidate`` (name, contract, devices, gates, declared
  deviations) and the registry of names;
- ``builtin``: our kernels, the adapters and the oracle, registered here,
  after the registry and before any user code can claim their names;
- ``calling``: one call of a candidate on a case (repeats, graph replay,
  input-change check), the same in every process;
- ``worker``: the candidate in a worker process, where a crash or hang is a
  report, not the end of the run.
"""

from .registry import (
    Candidate,
    CandidateLoadError,
    DuplicateCandidateError,
    UnknownCandidateError,
    all_candidates,
    get_candidate,
    load_spec,
    register,
)
from . import builtin  # noqa: E402,F401  (registers the built-ins, after the registry exists)

__all__ = [
    "Candidate",
    "CandidateLoadError",
    "DuplicateCandidateError",
    "UnknownCandidateError",
    "all_candidates",
    "get_candidate",
    "load_spec",
    "register",
]
