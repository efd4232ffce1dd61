"""A quick look (``check --quick``): a thin sample of the full plan's own cases, and what it leaves out."""

from __future__ import annotations

from dataclasses import dataclass

from .families import FAMILIES

__all__ = ["QUICK_ROWS", "QuickLook", "quick_boundaries", "quick_positions"]

# --quick: a first look in seconds on a CPU. Every family still runs (its first cases, QUICK_ROWS over all families,
# no bulk cases) and every pinned dtype pair, layout, call context and call option still runs, each once, at one launch
# class (the classes taken in turn, so that every class meets some), not in every class; the batch-size sweep keeps the
# empty batch and each side of every launch-class boundary only (no powers of two, no tile tails, no max-batch case).
# The cases it keeps are the full plan's own (same seeds, same replay ids): a quick FAIL's replay line is a full run's.
QUICK_ROWS = 4_096


def quick_positions(name: str, pins: list[tuple[int, dict]], max_batch: int | None, class_points: tuple[int, ...]) -> list[int]:
    """The positions in family ``name``'s full pinned list (``pinned_specs``, no max-batch case) that a quick look
    keeps: each distinct pin (a dtype pair, layout, context or option) at one of its launch classes, in turn from the
    family's place in the table; ``batch_sizes``' plain sizes only at the boundaries (1, 2, each side of a switch
    point in ``class_points``) and the empty batch."""
    if max_batch is None:
        return []
    boundaries = quick_boundaries(max_batch, class_points)
    groups: dict[tuple, list[tuple[int, int]]] = {}  # a pin's fields -> its (position, rows), one per launch class
    for position, (rows, fields) in enumerate(pins):
        groups.setdefault(tuple(sorted(fields.items())), []).append((position, rows))
    turn = list(FAMILIES).index(name) if name in FAMILIES else 0
    kept = []
    for k, (key, members) in enumerate(groups.items()):
        if name == "batch_sizes" and not key:  # the sweep and the tails: the boundaries only
            kept += [position for position, rows in members if rows == 0 or rows in boundaries]
        else:
            kept.append(members[(k + turn) % len(members)][0])
    return sorted(kept)


def quick_boundaries(max_batch: int, class_points: tuple[int, ...]) -> tuple[int, ...]:
    """The batch sizes a quick look's sweep keeps: 1, 2 and each side of every switch point of the checked shape."""
    return tuple(sorted(n for n in {1, 2, *(m for p in class_points if p > 1 for m in (p - 1, p))} if n <= max_batch))


@dataclass(frozen=True)
class QuickLook:
    """What a quick look (``--quick``) ran of the full plan, and what it left out, in words for the console and the
    report (``left_out``): a quick PASS is not a full check."""

    cases: int
    rows: int
    full_cases: int
    full_rows: int
    full_rows_option: int  # the --rows of the full plan compared with (the default)
    max_batch: int
    classes: tuple[int, ...]  # one batch of every launch class: where the full plan runs every pin
    boundaries: tuple[int, ...]  # the sweep sizes the quick look keeps

    def left_out(self) -> list[str]:
        sizes = ", ".join(f"{n:,}" for n in self.boundaries)
        classes = ", ".join(f"{n:,}" for n in self.classes)
        return [
            f"a quick look: {self.cases:,} cases, {self.rows:,} rows of the full plan's {self.full_cases:,} cases, "
            f"{self.full_rows:,} rows (--rows {self.full_rows_option:,}); a quick PASS is not a full check: run without --quick for one",
            f"left out by --quick: the bulk rows ({QUICK_ROWS:,} rows over the families, not --rows {self.full_rows_option:,}); "
            f"every pinned dtype pair, layout, call context and call option ran at one launch class, not at each of {classes}; "
            f"the batch-size sweep kept the empty batch and {sizes} (no powers of two, no tile tails, no max-batch case of {self.max_batch:,} rows)",
        ]  # fmt: skip
