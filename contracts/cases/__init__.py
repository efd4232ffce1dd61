"""Cases: what a check feeds the candidate and the oracle.

- ``families``: the table of named recipes (ties, NaN, saturation, strides...), plain data;
- ``makers``: the functions that make each family's inputs;
- ``plan``: the replayable specs a row budget becomes, and their shards;
- ``build``: a spec's tensors, identical on every machine;
- ``strategies``: Hypothesis strategies for the search.

Importing this package loads no torch; ``build_case`` and the makers do.
"""

from .families import FAMILIES, FAMILY_NAMES, Family
from .plan import CaseSpec, iter_plan, plan, planned_rows, shard

__all__ = ["FAMILIES", "FAMILY_NAMES", "Case", "CaseSpec", "Family", "build_case", "iter_plan", "plan", "planned_rows", "shard"]


def __getattr__(name):
    if name in ("Case", "build_case"):  # torch loads with them
        from . import build

        return getattr(build, name)
    raise AttributeError(name)
