"""The batch sizes the pinned cases run at: one of every launch class, the sweep over size classes up to
``max_batch``, and the row-tile tails (``contracts.cases.pins`` says why each)."""

from __future__ import annotations

__all__ = ["PINNED_ROWS", "ROW_TILE", "launch_class_sizes", "sweep_sizes", "tail_sizes"]

PINNED_ROWS = 64  # the rows of a pinned dtype or layout case


def launch_class_sizes(max_batch: int, points: tuple[int, ...] = ()) -> tuple[int, ...]:
    """One batch size of every launch class up to ``max_batch``, the smallest: 1 and 2 (one row is a class of
    its own in many kernels, the decode step, unpublished), each switch point (the first batch of its class), and
    ``PINNED_ROWS`` (rows enough for a dtype's data; capped at ``max_batch``)."""
    return tuple(sorted(n for n in {1, 2, min(PINNED_ROWS, max_batch), *points} if n <= max_batch))


# The most rows one block of a kernel takes (radix4's warp launch: RADIX4_TOKENS_PER_BLOCK, 1..16): a batch's last
# block holds M mod ROW_TILE rows, and a kernel's tail handling can be wrong for some of those counts only.
ROW_TILE = 16


def tail_sizes(max_batch: int, points: tuple[int, ...] = ()) -> tuple[int, ...]:
    """``ROW_TILE`` consecutive batch sizes from the first of every launch class past one row (2, each switch point),
    within the class and ``max_batch``: every remainder of M modulo every tile of up to ``ROW_TILE`` rows, in every
    launch shape. The sweep's sizes (2^n + 1, each side of a point) leave a tile's tail at one or two counts."""
    _check_batch(max_batch, points)
    starts = sorted({2, *(p for p in points if p >= 2)})
    sizes: set[int] = set()
    for start, end in zip(starts, [*starts[1:], max_batch + 1]):
        sizes.update(range(start, min(start + ROW_TILE, end, max_batch + 1)))
    return tuple(sorted(sizes))


def _check_batch(max_batch, points) -> None:
    """ValueError, one line naming the argument and the fix, for a ``max_batch`` or ``points`` that are not batch sizes."""
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 0:
        raise ValueError(f"max_batch={max_batch!r} is not a batch size; pass a whole number >= 0 (e.g. max_batch=16385)")
    if not isinstance(points, (tuple, list, set, frozenset)) or any(isinstance(p, bool) or not isinstance(p, int) for p in points):
        raise ValueError(f"points={points!r} is not a tuple of batch sizes; pass whole numbers, e.g. points=(7, 1585)")


def sweep_sizes(max_batch: int, points: tuple[int, ...] = ()) -> tuple[int, ...]:
    """One batch size of every class from 1 to ``max_batch``: 1, the first size past each power of two
    (2, 3, 5, 9, ... 1025, 2049, ...), ``max_batch`` itself, and both sides of every switch point."""
    _check_batch(max_batch, points)
    sizes = {1, max_batch}
    power = 1
    while power < max_batch:
        sizes.add(power + 1)
        power *= 2
    for point in points:
        sizes.update({point - 1, point})
    return tuple(sorted(n for n in sizes if 1 <= n <= max_batch))
