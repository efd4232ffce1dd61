"""A candidate routed at a chosen batch size: the two sides of the prefill/decode view.

Serving engines often route decode batches (few rows) through one kernel and
prefill batches (many rows) through another: SGLang picks its kernel by
shape, a deployment may run radix4 below 1024 rows and aiter above. A token
must be routed the same either way. Two derived candidates make that a plain
pair comparison:

- ``A@M<M0``: A sees only batches of fewer than ``M0`` rows. A case of
  ``M0`` rows or more is cut into consecutive batches of ``M0 - 1`` rows
  (views of the case's rows: the row stride is kept), the answers joined.
- ``B@M>=M0``: B sees only batches of at least ``M0`` rows. A smaller case
  is tiled (its own rows repeated, so the call options and the bias stay
  the case's) up to ``M0`` rows, and the answers of its first rows kept.
  The tiled batch keeps the case's layout (``_tile``): rows further apart
  than E stay so, at the case's storage offset, with the same padding
  between them, columns keep their stride and a transposed case stays
  column-major, so that a router wrong on a layout is wrong here too.

Both answer every row of every case, so ``A@M<M0`` against ``B@M>=M0``
counts the tokens whose routing changes across the split. The names are
candidate names like any other (``python -m contracts check --candidate
'radix4@M<1024' --against 'aiter@M>=1024'``): the resolver registered here
makes them on demand in every process, a worker's included. The derived
candidate keeps its base's contract, devices, gates and declared
deviations; its ``covered`` asks the base about the batch sizes (and
layouts) it really gets.
"""

from __future__ import annotations

import math
import re

from .registry import Candidate, CandidateLoadError, add_resolver, get_candidate

__all__ = ["AT_LEAST", "BELOW", "batched", "batched_name", "parse_batched"]

BELOW, AT_LEAST = "<", ">="
_NAME = re.compile(r"^(?P<base>.+)@M(?P<side><|>=)(?P<m0>[0-9]+)$")


def batched_name(base: str, side: str, m0: int) -> str:
    return f"{base}@M{side}{m0}"


def parse_batched(name: str) -> tuple[str, str, int] | None:
    """``(base, side, M0)`` of a name like ``radix4@M<1024``; None for any other name."""
    match = _NAME.match(name)
    if match is None:
        return None
    return match["base"], match["side"], int(match["m0"])


def _check_split(side: str, m0: int) -> None:
    if side == BELOW and m0 < 2:
        raise ValueError(f"M0={m0}: batches of fewer than M0 rows need M0 >= 2; e.g. @M<1024")
    if m0 < 1:
        raise ValueError(f"M0={m0} must be at least 1; e.g. @M>=1024")


def _below(route, m0: int):
    size = m0 - 1

    def call(scores, bias, topk, renormalize, routed_scaling_factor, **groups):
        rows = scores.shape[0]
        if rows < m0:
            return route(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
        import torch

        parts = [route(scores[start : start + size], bias, topk, renormalize, routed_scaling_factor, **groups) for start in range(0, rows, size)]
        for part in parts:
            if not (isinstance(part, (tuple, list)) and len(part) == 2 and all(isinstance(t, torch.Tensor) for t in part)):
                return part  # not an answer: the comparison says what it is
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    return call


def _tiled_strides(strides: tuple[int, int], experts: int, m0: int) -> tuple[int, int]:
    """The strides of ``_tile``'s ``m0`` rows for a case of ``strides``: a column-major case (a transposed buffer)
    stays column-major, (1, m0); any other keeps its column stride and its row stride (at least a row's span)."""
    row_stride, col_stride = strides
    if col_stride > row_stride:
        return 1, m0
    return max(row_stride, (experts - 1) * col_stride + 1), col_stride


def _tile(scores, m0: int):
    """``scores``' rows repeated to ``m0`` rows, in the layout of ``scores`` (``_tiled_strides``): the same row
    stride, column stride and storage offset, the padding between rows copied from the case (a contiguous tile would
    hide a layout bug)."""
    import torch

    rows, experts = scores.shape
    tiled = scores.repeat(math.ceil(m0 / rows), 1)[:m0]
    (width, col_stride), offset = _tiled_strides(scores.stride(), experts, m0), scores.storage_offset()
    if (width, col_stride) == (experts, 1) and offset == 0:
        return tiled
    if col_stride > width:  # column-major (a transposed buffer): the same order of strides
        return tiled.t().contiguous().t()
    row_stride = scores.stride(0)
    storage = torch.empty(0, dtype=scores.dtype, device=scores.device).set_(scores.untyped_storage())
    backing = torch.empty(offset + m0 * width, dtype=scores.dtype, device=scores.device)
    source = storage.as_strided((rows, width), (row_stride, 1), offset) if storage.numel() >= offset + rows * width else None
    whole = backing.as_strided((m0, width), (width, 1), offset)
    if source is not None:  # the case's own padding too, so a router that reads past a row sees what it saw there
        whole.copy_(source.repeat(math.ceil(m0 / rows), 1)[:m0])
    else:
        whole.fill_(9.0)
    if offset:
        backing[:offset] = storage[:offset] if storage.numel() >= offset else 9.0
    view = backing.as_strided((m0, experts), (width, col_stride), offset)
    view.copy_(tiled)
    return view


def _at_least(route, m0: int):
    def call(scores, bias, topk, renormalize, routed_scaling_factor, **groups):
        rows = scores.shape[0]
        if rows >= m0 or rows == 0:
            return route(scores, bias, topk, renormalize, routed_scaling_factor, **groups)
        answer = route(_tile(scores, m0), bias, topk, renormalize, routed_scaling_factor, **groups)
        if isinstance(answer, (tuple, list)) and len(answer) == 2 and all(hasattr(t, "shape") and t.dim() == 2 for t in answer):
            return answer[0][:rows], answer[1][:rows]
        return answer

    return call


def batched(base: Candidate, side: str, m0: int, *, base_lookup: str | None = None) -> Candidate:
    """``base`` routed in batches of fewer than ``m0`` rows (``side="<"``) or of at least ``m0`` rows (``">="``).

    The base's route and gates are looked up by ``base_lookup`` (default its
    name) when first called, so a proxy (a candidate known only by its
    metadata here, run in a worker) can stand for the base.
    """
    _check_split(side, m0)
    lookup = base_lookup or base.name
    wrap = _below if side == BELOW else _at_least

    def real() -> Candidate:
        return get_candidate(lookup)

    def route(scores, bias, topk, renormalize, routed_scaling_factor, **groups):
        return wrap(real().route, m0)(scores, bias, topk, renormalize, routed_scaling_factor, **groups)

    def route_for_contract(contract: str):
        return wrap(real().route_under(contract), m0)

    def covered(*, rows: int, **shape) -> bool:
        ask = real().covers  # which filters the call's options, layouts (and the contract) for the base's gate
        if side == AT_LEAST:
            if 0 < rows < m0 and shape.get("logits_strides") is not None:  # the base gets the tile's layout
                shape = {**shape, "logits_strides": _tiled_strides(shape["logits_strides"], shape["experts"], m0)}
            return ask(rows=max(rows, m0), **shape) and (base.max_rows is None or max(rows, m0) <= base.max_rows)
        if rows < m0:
            return ask(rows=rows, **shape)
        rest = rows % (m0 - 1)
        return ask(rows=m0 - 1, **shape) and (rest == 0 or ask(rows=rest, **shape))

    what = f"fewer than {m0} rows (cases of {m0} or more cut into batches of {m0 - 1})" if side == BELOW else \
        f"at least {m0} rows (smaller cases tiled up to {m0})"  # fmt: skip
    return Candidate(
        name=batched_name(base.name, side, m0),
        route=route,
        contract=base.contract,
        devices=tuple(base.devices),
        description=f"{base.name} in batches of {what}",
        supported_hardware=lambda device: real().supported_hardware(device),
        build=lambda device: real().build(device),
        covered=covered,
        expected_deviations={c: dict(d) for c, d in base.expected_deviations.items()},
        third_party=base.third_party,
        origin=base.origin,
        route_for_contract=route_for_contract if base.route_for_contract else None,
        gate_takes_contract=True,  # handed on to the base's covers, which passes it only to a gate that takes it
        max_rows=base.max_rows,
        coverage=base.coverage,
        contracts=tuple(base.contracts),
    )


def _resolve(name: str) -> Candidate | None:
    parsed = parse_batched(name)
    if parsed is None:
        return None
    base, side, m0 = parsed
    try:
        _check_split(side, m0)
    except ValueError as exc:
        raise CandidateLoadError(f"candidate {name!r}: {exc}") from None
    return batched(get_candidate(base), side, m0)


add_resolver(_resolve)
