"""The plan: which cases a check runs, as replayable specs.

A case is fully determined by ``(family, case_seed, rows, experts, topk)``:
that tuple is its replay id, and ``contracts.cases.build.build_case``
rebuilds it bit for bit on any machine. ``iter_plan`` spreads a row budget
over the families by share, deterministically in the seed; ``shard`` takes
every N-th spec of it (``--shard I/N``, and the ranks of a torchrun).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator

from .families import FAMILIES

__all__ = ["CaseSpec", "iter_plan", "plan", "planned_rows", "shard"]


@dataclass(frozen=True)
class CaseSpec:
    family: str
    case_seed: int
    rows: int
    experts: int
    topk: int
    n_group: int = 1  # expert groups of a grouped contract (DeepSeek: 8 groups, 4 kept); 1 = none
    topk_group: int = 1

    @property
    def replay_id(self) -> str:
        return f"{self.family}:{self.case_seed}:{self.rows}"


def _seed(*parts) -> int:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _budgets(families: list[str], total_rows: int) -> dict[str, int]:
    """Rows per family, by share, summing to exactly ``total_rows`` (largest remainders
    get the rounding rows); every family gets at least one row."""
    whole = sum(FAMILIES[name].share for name in families)
    exact = {name: total_rows * FAMILIES[name].share / whole for name in families}
    budgets = {name: int(v) for name, v in exact.items()}
    by_remainder = sorted(families, key=lambda name: exact[name] - budgets[name], reverse=True)
    for name in by_remainder[: total_rows - sum(budgets.values())]:
        budgets[name] += 1
    return {name: max(1, rows) for name, rows in budgets.items()}


def planned_rows(families: list[str], total_rows: int) -> int:
    """Rows ``iter_plan`` yields in all (each family's budget, at least 1)."""
    return sum(_budgets(families, total_rows).values())


def iter_plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int) -> Iterator[CaseSpec]:
    """Spread ``total_rows`` over ``families`` by share, one spec at a time; deterministic in ``seed``.

    Each family cycles through its case sizes; ``batch_sizes`` first runs its
    edge sizes, then fills its budget with other sizes drawn from 1..1025.
    An iterator, so 100 million rows (about 400,000 specs) run in constant memory.
    """
    import torch  # here, not at import: the plan's names and specs load no torch

    for name, budget in _budgets(families, total_rows).items():
        family = FAMILIES[name]
        sizes = family.sizes
        gen = None
        index, used = 0, 0
        while used < budget:
            if index < len(sizes):
                rows = sizes[index]
            elif family.drawn_sizes is not None:
                if gen is None:
                    gen = torch.Generator().manual_seed(_seed(seed, name, "sizes"))
                low, high = family.drawn_sizes
                rows = int(torch.randint(low, high + 1, (1,), generator=gen))
            else:
                rows = sizes[index % len(sizes)]
            rows = min(rows, budget - used) if used else rows
            yield CaseSpec(name, _seed(seed, name, index), rows, experts, topk)
            used += rows
            index += 1


def plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int) -> list[CaseSpec]:
    """``iter_plan`` as a list."""
    return list(iter_plan(families, total_rows, seed, experts, topk))


def shard(specs: Iterable[CaseSpec], index: int, count: int) -> Iterator[CaseSpec]:
    """The ``index``-th (1-based) of ``count`` interleaved slices of ``specs``."""
    return (s for position, s in enumerate(specs) if position % count == index - 1)
