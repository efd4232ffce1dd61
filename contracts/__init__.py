"""The harness: case families, the candidate registry, the comparison, reports, commands.

Public surface for users who plug in their own router::

    from contracts import Candidate, register
"""

from .registry import Candidate, all_candidates, get_candidate, register

__all__ = ["Candidate", "all_candidates", "get_candidate", "register"]
