"""Cases: what a check feeds the candidate and the oracle.

- ``families``: the table of named recipes (ties, NaN, saturation, strides...), plain data;
- ``makers``: the functions that make each family's inputs;
- ``spec``: ``CaseSpec``, a case as a replayable spec;
- ``plan``: the specs a row budget becomes (coverage and bulk cases), and their shards;
- ``pins``: the pinned cases every family runs on top of its budget, at the batch sizes of
  ``batch_sizes``, in the launch classes of ``launch_points``; ``max_batch``: where the case of
  ``--max-batch`` rows goes; ``quick_look``: the thin sample of ``--quick``;
- ``captured``: a captured logits file's rows as cases (``logits_file``, ``logits_formats``: reading it);
- ``build``: a spec's tensors, identical on every machine;
- ``strategies``: Hypothesis strategies for the search.

Importing this package loads no torch; ``build_case`` and the makers do.
"""

from .families import FAMILIES, FAMILY_NAMES, Family
from .plan import iter_plan, plan, planned_rows, shard
from .spec import CaseSpec

__all__ = ["FAMILIES", "FAMILY_NAMES", "Case", "CaseSpec", "Family", "build_case", "iter_plan", "plan", "planned_rows", "shard"]


def __getattr__(name):
    if name in ("Case", "build_case"):  # torch loads with them
        from . import build

        return getattr(build, name)
    raise AttributeError(name)
