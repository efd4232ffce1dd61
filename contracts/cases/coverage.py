"""What a case plan covers (batch sizes, dtype pairs, layouts): above both the plan and the case builder,
which it reads, so neither has to import it."""

from __future__ import annotations

from typing import Iterable

from .build import logits_dtype_name
from .families import FAMILIES
from .pins import ALIGNED_OFFSET
from .plan import call_sizes
from .spec import CaseSpec

__all__ = ["coverage_of"]


def coverage_of(specs: Iterable["CaseSpec"], call_rows: int | None = None) -> dict:
    """What a plan covers: its batch sizes, its (logits, bias) dtype pairs, its layouts, for ``check --plan`` and
    the summary, and the batch sizes each pinned dtype pair or layout runs at (``pinned_batch_sizes``, keyed by its
    family and replay tags: one of every launch class). ``batch_sizes`` are the rows of the calls the candidate gets
    (``call_sizes``: a bulk case of more than ``call_rows`` rows comes in calls of ``call_rows``), not the cases' rows. Dtype pairs are read off the built cases' makers without building them (the logits dtype is the
    family's unless pinned; a drawn bias dtype may be either)."""
    specs = list(specs)
    sizes: set[int] = set()
    pairs: set[str] = set()
    layouts: set[str] = set()
    pinned: dict[str, set[int]] = {}  # each pinned dtype pair or layout -> the batch sizes it runs at
    for spec in specs:
        sizes.update(call_sizes(spec, call_rows))
        logits = logits_dtype_name(spec)
        if not spec.bias:
            pair = f"{logits}/none"
        elif spec.bias_dtype:
            pair = f"{logits}/{spec.bias_dtype}"
        else:
            pair = None
            pairs.update({f"{logits}/{logits}", f"{logits}/fp32"})
        if pair:
            pairs.add(pair)
        if spec.bias_offset:
            layouts.add("bias at an aligned offset" if spec.bias_offset >= ALIGNED_OFFSET else "bias at an offset")
        if spec.bias_stride != 1 and spec.bias:
            layouts.add(f"bias at stride {spec.bias_stride}")
        if spec.logits_offset:
            layouts.add("contiguous logits at an aligned offset" if spec.logits_offset >= ALIGNED_OFFSET else "contiguous logits at an offset")
        if FAMILIES[spec.family].strided:
            layouts.add("strided at offset 0" if spec.offset == 0 else "strided at an offset")
        elif spec.column_stride != 1:
            layouts.add(f"logits at column stride {spec.column_stride}")
        elif spec.transposed:
            layouts.add("transposed logits")
        else:
            layouts.add("contiguous")
        if spec.tags and not spec.bulk:
            pinned.setdefault(":".join((spec.family, *spec.tags)), set()).add(spec.rows)
    return {"batch_sizes": sorted(sizes), "dtype_pairs": sorted(pairs), "layouts": sorted(layouts),
            "pinned_batch_sizes": {tag: sorted(rows) for tag, rows in sorted(pinned.items())}}


COVERAGE_PASSES = 2
DEFAULT_BULK_ROWS = 65_536  # on a GPU; a bulk case's [M, E] work tensors are about 0.25 GB each there
CPU_BULK_ROWS = 16_384  # on a CPU: keeps a check's memory well under 2 GiB
