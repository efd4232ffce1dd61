"""The plan: which cases a check runs, as replayable specs.

A case is fully determined by ``(family, case_seed, rows, experts, topk)``
and whether it is a bulk case: that is its replay id
(``family:seed:rows``, or ``family:seed:rows:bulk``), and
``contracts.cases.build.build_case`` rebuilds it bit for bit.

``iter_plan`` spreads a row budget over the families by share,
deterministically in the seed. Each family first runs its **coverage
cases**: two passes over its case sizes (batch sizes matter to kernels:
they pick launch shapes; ``batch_sizes`` runs its edge sizes, then sizes
drawn from 1..1025). The rest of its budget, if any, runs as **bulk cases**
of ``bulk_rows`` rows (65,536 on a GPU, 16,384 on a CPU), generated on the
device the candidate runs on: volume at the speed of the oracle. A
candidate that serves smaller batches answers a bulk case in calls of its
largest batch (``bulk_rows_for``; ``contracts.candidates.calling.in_slices``),
so generation, the oracle and the comparison still run 65,536 rows at a time. ``shard`` takes every N-th spec of the plan (``--shard I/N``,
and the ranks of a torchrun).

What else every family runs, on top of its budget, is its **pinned cases** (``contracts.cases.pins``), and
where the case of ``max_batch`` rows goes is ``contracts.cases.max_batch``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Iterable, Iterator

from .families import FAMILIES
from .launch_points import launch_class_points
from .max_batch import MAX_BATCH_ENV  # noqa: F401 -- tests/conftest.py imports it from here (a file this split leaves alone)
from .max_batch import MAX_BATCH_FAMILIES, absorbs_max_batch, coverage_rows, max_batch_host
from .pins import pinned_specs
from .quick_look import quick_positions
from .spec import CaseSpec, admitted_fields

__all__ = ["CPU_BULK_ROWS", "DEFAULT_BULK_ROWS", "BulkTail", "PlanCount", "bulk_rows_for", "call_size", "call_sizes", "count_plan", "iter_plan",
           "iter_plan_parts", "pinned_rows", "plan", "plan_bulk_rows", "planned_rows", "shard", "shard_rows"]  # fmt: skip


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


def planned_rows(families: list[str], total_rows: int, *, max_batch: int | None = None, bias: bool = True,
                 experts: int | None = None, topk: int | None = None, contract: str | None = None, admitted: dict | None = None,
                 extra_points: tuple[int, ...] = (), quick: bool = False) -> int:  # fmt: skip
    """Rows ``iter_plan`` yields in all (each family's budget, at least 1, and its pinned cases)."""
    shape = dict(bias=bias, experts=experts, topk=topk, contract=contract, admitted=admitted, extra_points=extra_points, quick=quick)
    budgets = _budgets(families, total_rows)
    host = None if quick else max_batch_host(families, budgets, max_batch, None, experts, topk, contract, extra_points)
    pinned = sum(pinned_rows(name, max_batch, budget=budgets[name], host=name == host, **shape) for name in families)
    return sum(budgets.values()) + pinned


def pinned_rows(name: str, max_batch: int | None, *, bias: bool = True, experts: int | None = None, topk: int | None = None,
                contract: str | None = None, admitted: dict | None = None, extra_points: tuple[int, ...] = (),
                budget: int | None = None, host: bool = False, quick: bool = False) -> int:  # fmt: skip
    """Rows of family ``name``'s pinned cases (``pinned_specs``), on top of its budget. ``budget``: the family's rows
    (None: too few to hold its max-batch case, as at a small ``--rows``); ``host``: the run's max-batch case is its;
    ``quick``: the quick look's thin sample of them (``quick_positions``)."""
    absorbed = not quick and budget is not None and absorbs_max_batch(name, budget, max_batch, None, experts, topk, contract, extra_points)
    pins = pinned_specs(name, max_batch, bias=bias, experts=experts, topk=topk, contract=contract, admitted=admitted,
                        extra_points=extra_points, max_batch_case=not quick and (host or (name in MAX_BATCH_FAMILIES and not absorbed)))  # fmt: skip
    kept = quick_positions(name, pins, max_batch, launch_class_points(None, experts, topk, contract, extra_points)) if quick else range(len(pins))
    return sum(pins[position][0] for position in kept)


DEFAULT_BULK_ROWS = 65_536  # on a GPU; a bulk case's [M, E] work tensors are about 0.25 GB each there
CPU_BULK_ROWS = 16_384  # on a CPU: keeps a check's memory well under 2 GiB


def bulk_rows_for(covered, *, experts: int, topk: int, device: str, max_rows: int | None = None) -> int:
    """The rows of one candidate call in a bulk case: the largest of 65,536 / 16,384 / 4,096 / 1,024 (CPU: from
    16,384) that ``covered`` accepts for bf16 or fp32 logits, capped by a declared ``max_rows``; else 1,024.
    A bulk case of more rows (``plan_bulk_rows``) reaches the candidate in calls of this size."""
    import torch

    top = DEFAULT_BULK_ROWS if device.startswith("cuda") else CPU_BULK_ROWS
    if max_rows:
        top = min(top, max_rows)
    sizes = [top] + [n for n in (16_384, 4_096, 1_024) if n < top]
    for rows in sizes:
        for dtype in (torch.bfloat16, torch.float32):
            try:
                if covered(rows=rows, experts=experts, topk=topk, dtype=dtype, bias_dtype=dtype):
                    return rows
            except Exception:  # noqa: BLE001 -- a gate that raises shows when the cases run
                return rows
    return min(sizes[-1], top)


def plan_bulk_rows(device: str) -> int:
    """The rows of one bulk case on ``device``: what the harness generates, routes and compares at a time."""
    return DEFAULT_BULK_ROWS if device.startswith("cuda") else CPU_BULK_ROWS


def call_size(spec: CaseSpec, call_rows: int | None) -> int:
    """The rows of the candidate's largest call on ``spec``: a bulk case comes in calls of at most ``call_rows``."""
    return min(spec.rows, call_rows) if spec.bulk and call_rows else spec.rows


def call_sizes(spec: CaseSpec, call_rows: int | None) -> list[int]:
    """The rows of each call the candidate gets on ``spec``, in order: a bulk case of more than ``call_rows`` rows comes
    in calls of ``call_rows`` and a last one of the rest (``contracts.candidates.calling.CaseRunner``), any other case
    in one call. ``check --plan`` lists these, not the cases' rows."""
    if spec.bulk and call_rows and spec.rows > call_rows:
        return [min(call_rows, spec.rows - start) for start in range(0, spec.rows, call_rows)]
    return [spec.rows]


@dataclass(frozen=True)
class BulkTail:
    """A family's bulk cases as a count, not one by one: ``count`` cases like ``first`` (its family, shape and fields),
    case indices ``first_index`` on, each of ``first.rows`` rows but the last, of ``last_rows``. At ``--rows 1e12`` a
    family has ~10^7 of them: ``check --plan`` and a shard's row sum count them arithmetically."""

    first: CaseSpec
    first_index: int
    count: int
    last_rows: int
    seed: int  # the run's seed: the cases' seeds derive from it and their index

    @property
    def rows(self) -> int:
        return (self.count - 1) * self.first.rows + self.last_rows

    def spec(self, k: int) -> CaseSpec:
        """The ``k``-th (0-based) of the cases, as ``iter_plan`` yields it."""
        import dataclasses

        rows = self.last_rows if k == self.count - 1 else self.first.rows
        return dataclasses.replace(self.first, case_seed=_seed(self.seed, self.first.family, self.first_index + k), rows=rows)

    def specs(self) -> Iterator[CaseSpec]:
        return (self.spec(k) for k in range(self.count))

    def representatives(self) -> list[CaseSpec]:
        """The first case and the last (of another size where the rows do not divide evenly): every call size, dtype
        pair and layout of the tail (its cases differ in seed only)."""
        return [self.first] + ([self.spec(self.count - 1)] if self.count > 1 else [])

    def calls(self, call_rows: int | None) -> int:
        """The candidate's calls on the tail's cases (``call_sizes`` of each, summed)."""
        return (self.count - 1) * len(call_sizes(self.first, call_rows)) + len(call_sizes(self.spec(self.count - 1), call_rows))


@dataclass(frozen=True)
class PlanCount:
    """What a plan holds, counted without enumerating its bulk cases: for ``check --plan`` and the line a check
    prints before it runs. ``representatives``: every pinned and coverage case, and each bulk tail's first and last
    (what ``contracts.cases.coverage.coverage_of`` needs: a tail's other cases differ in seed only)."""

    cases: int
    rows: int
    calls: int
    bulk_rows: int  # the rows of the bulk cases (the rest: coverage and pinned cases)
    representatives: tuple[CaseSpec, ...]


def count_plan(parts: Iterable["CaseSpec | BulkTail"], call_rows: int | None = None) -> PlanCount:
    """Count ``iter_plan_parts``' output: cases, rows and calls (``call_rows``: the candidate's largest call)."""
    cases = rows = calls = bulk = 0
    kept: list[CaseSpec] = []
    for part in parts:
        if isinstance(part, BulkTail):
            cases, rows, calls, bulk = cases + part.count, rows + part.rows, calls + part.calls(call_rows), bulk + part.rows
            kept += part.representatives()
        else:
            cases, rows, calls = cases + 1, rows + part.rows, calls + len(call_sizes(part, call_rows))
            bulk += part.rows if part.bulk else 0
            kept.append(part)
    return PlanCount(cases, rows, calls, bulk, tuple(kept))


def shard_rows(parts: Iterable["CaseSpec | BulkTail"], index: int, count: int) -> int:
    """The rows of ``shard(iter_plan(...), index, count)``, the tails counted arithmetically: the shard takes the
    cases at positions ``index - 1`` mod ``count``."""
    total, position = 0, 0
    for part in parts:
        if not isinstance(part, BulkTail):
            total += part.rows if position % count == index - 1 else 0
            position += 1
            continue
        first = (index - 1 - position) % count  # the tail's first case in the shard
        taken = len(range(first, part.count, count))
        if taken:  # each of first.rows, but the tail's last case where the shard takes it
            last_taken = (part.count - 1 - first) % count == 0
            total += taken * part.first.rows - (part.first.rows - part.last_rows if last_taken else 0)
        position += part.count
    return total


def iter_plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int, **options) -> Iterator[CaseSpec]:
    """Spread ``total_rows`` over ``families`` by share, one spec at a time; deterministic in ``seed``.

    Coverage cases first (see the module docstring), then bulk cases of
    ``bulk_rows`` (``None``: no bulk cases, the sizes cycle as in earlier
    releases). An iterator, so a billion rows run in constant memory.
    ``admitted``: the contract's ``admitted_options()``; cases draw only those call options.
    ``max_batch``: also run each family's pinned cases (``pinned_specs``),
    at every ``total_rows``; ``points``: the switch points (default: read
    from the kernel packages); ``contract``: the contract checked, whose
    kernels' launch classes the pinned dtype and layout cases run in;
    ``extra_points``: the candidate's own switch points (``candidate_points``).
    """
    for part in iter_plan_parts(families, total_rows, seed, experts, topk, **options):
        if isinstance(part, BulkTail):
            yield from part.specs()
        else:
            yield part


def iter_plan_parts(families: list[str], total_rows: int, seed: int, experts: int, topk: int, *, bulk_rows: int | None = DEFAULT_BULK_ROWS,
                    n_group: int = 1, topk_group: int = 1, bias: bool = True, admitted: dict | None = None, max_batch: int | None = None,
                    points: tuple[int, ...] | None = None, contract: str | None = None,
                    extra_points: tuple[int, ...] = (), quick: bool = False) -> Iterator["CaseSpec | BulkTail"]:  # fmt: skip
    """``iter_plan``'s cases, but each family's bulk cases as one ``BulkTail`` (a count): the plan of ``--rows 1e12``
    in the time of ``--rows 1``. ``quick``: a quick look's thin pinned sample (``quick_positions``; pass
    ``total_rows=QUICK_ROWS``), no max-batch case."""
    import torch  # here, not at import: the plan's names and specs load no torch

    shape = dict(experts=experts, topk=topk, n_group=n_group, topk_group=topk_group)
    extra = {} if bias else {"bias": False}
    extra.update(admitted_fields(admitted))
    budgets = _budgets(families, total_rows)
    host = None if quick else max_batch_host(families, budgets, max_batch, points, experts, topk, contract, extra_points)
    class_points = launch_class_points(points, experts, topk, contract, extra_points)
    for name, budget in budgets.items():
        family = FAMILIES[name]
        sizes = family.sizes
        absorbed = not quick and absorbs_max_batch(name, budget, max_batch, points, experts, topk, contract, extra_points)
        limit = budget - max_batch if absorbed else budget  # the rows of its coverage and bulk cases
        coverage = limit if bulk_rows is None else min(limit, coverage_rows(name))
        gen = None
        index, used = 0, 0
        while used < coverage:
            if index < len(sizes):
                rows = sizes[index]
            elif family.drawn_sizes is not None:
                if gen is None:
                    gen = torch.Generator().manual_seed(_seed(seed, name, "sizes"))
                low, high = family.drawn_sizes
                rows = int(torch.randint(low, high + 1, (1,), generator=gen))
            else:
                rows = sizes[index % len(sizes)]
            rows = min(rows, coverage - used) if used else rows
            yield CaseSpec(name, _seed(seed, name, index), rows, **shape, **extra)
            used += rows
            index += 1
        pinned_cases = pinned_specs(name, max_batch, bias=bias, points=points, experts=experts, topk=topk, contract=contract,
                                    admitted=admitted, extra_points=extra_points,
                                    max_batch_case=not quick and (name == host or (name in MAX_BATCH_FAMILIES and not absorbed)))  # fmt: skip
        # a quick look keeps some of them, at their own positions: the same seeds, so the same replay ids
        kept = quick_positions(name, pinned_cases, max_batch, class_points) if quick else range(len(pinned_cases))
        for position in kept:
            rows, pinned = pinned_cases[position]
            yield CaseSpec(name, _seed(seed, name, "pinned", position), rows, **shape, **extra, **pinned)
        if absorbed:  # one call of max_batch rows, out of the family's budget
            yield CaseSpec(name, _seed(seed, name, "max_batch"), max_batch, **shape, **extra)
        if used < limit:  # the rest in bulk cases of bulk_rows rows, the last of what is left: a count, not a loop
            count = -(-(limit - used) // bulk_rows)
            first = CaseSpec(name, _seed(seed, name, index), min(bulk_rows, limit - used), **shape, bulk=True, **extra)
            yield BulkTail(first, index, count, limit - used - (count - 1) * bulk_rows, seed)


def plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int, **options) -> list[CaseSpec]:
    """``iter_plan`` as a list."""
    return list(iter_plan(families, total_rows, seed, experts, topk, **options))


def shard(specs: Iterable[CaseSpec], index: int, count: int) -> Iterator[CaseSpec]:
    """The ``index``-th (1-based) of ``count`` interleaved slices of ``specs``."""
    return (s for position, s in enumerate(specs) if position % count == index - 1)
