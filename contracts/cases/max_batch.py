"""Where a check meets its largest batch in one call, and what ``--max-batch`` is by default.

**Max batch in one call, in every family that can afford it.** A bulk case
reaches the candidate in calls of its largest batch (``call_sizes``), so its
rows are not a call's: ``check --plan`` lists the calls' sizes, from the run's
own iterator. ``random_bf16`` and ``random_fp32`` run one case of
``max_batch`` rows at every ``--rows`` (``MAX_BATCH_FAMILIES``; out of their
budget where it holds one, ``absorbs_max_batch``), ``batch_sizes``' sweep ends
at it, every other family runs one out of its budget where the budget holds
it (no row more: the CPU main job stays 593,024 rows under aiter), and a run
of none of these gets one in its first family (``max_batch_host``). The
contract's own ``routed_scaling_factor`` is pinned in ``batch_sizes`` with
every admitted ``renormalize`` where it admits any factor and the drawn ones
leave it out (DeepSeek-V4's 1.5, LongCat-Flash's 6): ``contracts.cases.exercised``
names every regime of every field the plan must reach.
"""

from __future__ import annotations

import os

from .batch_sizes import launch_class_sizes
from .families import FAMILIES
from .launch_points import launch_class_points

__all__ = ["COVERAGE_PASSES", "CPU_MAX_BATCH", "GPU_MAX_BATCH", "MAX_BATCH_ENV", "MAX_BATCH_FAMILIES", "absorbs_max_batch", "coverage_rows",
           "default_max_batch", "env_max_batch", "max_batch_host"]  # fmt: skip

GPU_MAX_BATCH = 65_536  # the largest batch the plan makes on a GPU by default (--max-batch)
CPU_MAX_BATCH = 16_385  # on a CPU: one case above 16,384 (what a CPU's bulk cases stop at)

# The default of --max-batch for every run of this environment, where set. The test suite sets it (tests/conftest.py:
# most tests are about something other than batch coverage, and the CPU sweep to 16,385 is ~48,000 rows per check);
# the tests of the sweep itself unset it. A run under it says so (``check --plan``, the summary's ``max_batch``).
MAX_BATCH_ENV = "ROUTER_CONTRACTS_MAX_BATCH"


def env_max_batch() -> int | None:
    """``$ROUTER_CONTRACTS_MAX_BATCH`` as a batch size (None where unset or empty); ValueError, one line, otherwise."""
    text = os.environ.get(MAX_BATCH_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{MAX_BATCH_ENV}={text!r} is not a batch size; set a whole number >= 1 (or unset it for the default)")
    return value


def default_max_batch(device: str, points: tuple[int, ...] = ()) -> int:
    """``--max-batch`` when none is given: ``$ROUTER_CONTRACTS_MAX_BATCH`` where set; else 65,536 on a GPU, and on
    a CPU 16,385 (one case above 16,384), or past the largest switch point of a known kernel when that is larger."""
    from_env = env_max_batch()
    if from_env is not None:
        return from_env
    top = GPU_MAX_BATCH if device.startswith("cuda") else CPU_MAX_BATCH
    return max([top, *(p + 1 for p in points)])


# The families whose pinned cases reach --max-batch at every --rows (batch_sizes: its sweep): a case of max_batch rows in
# one call, with their dtypes' data. Every other family reaches it inside its budget where the budget holds it
# (``absorbs_max_batch``: its first max_batch bulk rows come as one case of max_batch rows, no row more), and a run
# with none of these families and no such budget gives its first family one (``max_batch_host``). A case of
# max_batch rows for every family at every --rows would add ~146,000 rows (25 %) to the CPU main job.
MAX_BATCH_FAMILIES = frozenset({"random_bf16", "random_fp32"})

COVERAGE_PASSES = 2


def coverage_rows(name: str) -> int:
    # Two passes over the sizes; for a family with drawn sizes, its sizes once and as many rows again drawn.
    return COVERAGE_PASSES * sum(FAMILIES[name].sizes)


def _max_batch_missing(name: str, max_batch: int | None, class_points: tuple[int, ...]) -> bool:
    """Whether family ``name``'s pinned cases leave ``max_batch`` out (batch_sizes' sweep ends at it; a max_batch of a
    launch class's size is one of every family's classes)."""
    return max_batch is not None and name != "batch_sizes" and max_batch not in launch_class_sizes(max_batch, class_points)


def absorbs_max_batch(name: str, budget: int, max_batch: int | None, points=None, experts=None, topk=None, contract=None,
                      extra_points: tuple[int, ...] = ()) -> bool:  # fmt: skip
    """Whether family ``name``'s budget holds its coverage cases and a case of ``max_batch`` rows: then that case is
    run in place of ``max_batch`` of its bulk rows (no row more)."""
    return _max_batch_missing(name, max_batch, launch_class_points(points, experts, topk, contract, extra_points)) and (
        budget - coverage_rows(name) >= max_batch)


def max_batch_host(families: list[str], budgets: dict[str, int], max_batch: int | None, points=None, experts=None, topk=None,
                   contract=None, extra_points: tuple[int, ...] = ()) -> str | None:  # fmt: skip
    """The family that carries one pinned case of ``max_batch`` rows because no family of the run reaches it otherwise
    (none of ``batch_sizes`` and ``MAX_BATCH_FAMILIES``, no budget that holds one); None when one does."""
    if max_batch is None or not families or any(f == "batch_sizes" or f in MAX_BATCH_FAMILIES for f in families):
        return None
    class_points = launch_class_points(points, experts, topk, contract, extra_points)
    if not _max_batch_missing(families[0], max_batch, class_points):
        return None
    if any(absorbs_max_batch(f, budgets[f], max_batch, class_points) for f in families):
        return None
    return families[0]
