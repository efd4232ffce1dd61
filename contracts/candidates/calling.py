"""Calling a candidate on a case, in whichever process it runs: one result type.

``CaseRunner.run(case)`` makes the call, ``repeat - 1`` more, and on CUDA
with repeats one CUDA graph replay; it records whether the inputs changed
and runs the ``--against`` candidate. What a misbehaving candidate becomes:

==========================================  ===================================================
the candidate ...                           reported as
==========================================  ===================================================
raises a Python exception                   a ``validity`` mismatch with its message (a finding)
returns the wrong type/shape/dtype/device   a ``validity`` mismatch
modifies its inputs                         a ``validity`` mismatch
runs out of memory (host or GPU)            ``error`` (kind ``out_of_memory``)
raises a CUDA error                         ``error`` (kind ``cuda_error``)
exits, segfaults or aborts (worker only)    ``error`` (kind ``crash``, the signal, stderr tail)
answers nothing for ``timeout`` s (worker)  ``error`` (kind ``timeout``; the worker is killed)
gives different answers on repeated calls   a ``determinism`` finding (``--repeat N``)
==========================================  ===================================================

``contracts.candidates.worker`` runs the same ``CaseRunner`` in a worker process.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..cases import Case

__all__ = ["DIFF_SAMPLE_ROWS", "CallOutcome", "CaseRunner", "fatal_kind", "first_line", "raised_message"]

DIFF_SAMPLE_ROWS = 16




def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def fatal_kind(exc: BaseException) -> str | None:
    """``out_of_memory`` / ``cuda_error`` / ``exit`` for failures that end a candidate's run, else None.

    Other exceptions are the candidate's answer to a case (a finding), not a reason to stop.
    """
    if isinstance(exc, MemoryError) or isinstance(exc, getattr(torch, "OutOfMemoryError", ())):
        return "out_of_memory"
    if isinstance(exc, SystemExit):
        return "exit"
    text = str(exc)
    if isinstance(exc, RuntimeError):
        if any(s in text for s in ("out of memory", "can't allocate memory", "not enough memory", "Cannot allocate memory")):
            return "out_of_memory"
        if isinstance(exc, getattr(torch, "AcceleratorError", ())) or "CUDA error" in text or "HIP error" in text:
            return "cuda_error"
    return None


def _call(route: Callable, case: Case):
    """One call; ``(value, None)`` or ``(None, exception)``. KeyboardInterrupt passes through."""
    try:
        value = route(case.scores, case.bias, case.topk, case.renormalize, case.routed_scaling_factor, **case.group_args)
        if case.scores.is_cuda:
            torch.cuda.synchronize()  # asynchronous CUDA errors surface here, inside the try
        return value, None
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # noqa: BLE001 -- SystemExit from a candidate is its failure, not ours
        return None, exc


def raised_message(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {first_line(exc)}"


def _is_pair(value) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, torch.Tensor) for t in value)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    as_int = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return bool(torch.equal(a.view(as_int), b.view(as_int)))


def _row_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Per row (dim 0): bit-equal, NaN equal to NaN whatever its payload."""
    if a.is_floating_point() and a.element_size() in (2, 4, 8):
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        same = (a.view(as_int) == b.view(as_int)) | (torch.isnan(a) & torch.isnan(b))
    else:
        same = a == b
    return same.reshape(a.shape[0], -1).all(1) if a.dim() else same.reshape(1)


def _differing_mask(first, again, rows: int) -> torch.Tensor:
    """Rows where two answers to the same case differ (every row if their structure differs)."""
    everything = torch.ones(rows, dtype=torch.bool)
    if _is_pair(first) != _is_pair(again):
        return everything
    if not _is_pair(first):  # both raised or both returned something unusable: nothing to compare
        return torch.zeros(rows, dtype=torch.bool)
    mask = torch.zeros(rows, dtype=torch.bool)
    for a, b in zip(first, again):
        if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device or a.device.type == "meta":
            return everything
        if a.dim() == 0 or a.shape[0] != rows:  # unusable shape: all or nothing
            if a.numel() and not bool(_row_equal(a.reshape(1, -1), b.reshape(1, -1)).all()):
                return everything
            continue
        mask |= ~_row_equal(a.detach(), b.detach()).cpu()
    return mask


def _row_readable(value, rows: int) -> bool:
    return _is_pair(value) and all(t.dim() == 2 and t.shape[0] == rows and t.device.type != "meta" for t in value)


@dataclass
class CallOutcome:
    """What calling a candidate on one case gave. Plain data: it crosses the worker pipe."""

    actual: object = None  # (weights, ids) as returned, or a message ("raised ...", "outputs on meta ...")
    traceback: str | None = None  # of the exception, when the candidate raised
    changed: bool = False  # the candidate modified its inputs
    other: object = None  # the --against candidate's answer
    fatal: dict | None = None  # {"kind", "message", "traceback"}: stop checking this candidate
    differing_rows: int = 0  # rows whose answers differ between repeated calls / the graph replay
    differing_sample: list[int] = field(default_factory=list)
    differing_calls: list[str] = field(default_factory=list)
    difference: dict | None = None  # the first differing row: {"call", "row", "ids", "weights"} vs call 1
    notes: list[str] = field(default_factory=list)


def _fatal(exc: BaseException, kind: str, who: str = "") -> dict:
    return {
        "kind": kind,
        "message": f"{who}{raised_message(exc)}",
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=4))[-2000:],
    }


class CaseRunner:
    """Calls a candidate on cases: the call, ``repeat - 1`` more, and (on CUDA, with repeats) a CUDA graph replay."""

    def __init__(self, route: Callable, *, other: Callable | None = None, other_name: str = "", repeat: int = 1, graph: bool = False):
        self.route, self.other, self.other_name = route, other, other_name
        self.repeat = repeat
        self.graph = graph  # turned off for good after the first failed capture

    def run(self, case: Case) -> CallOutcome:
        out = CallOutcome()
        before = (case.scores.clone(), None if case.bias is None else case.bias.clone())
        value, first_exc = _call(self.route, case)
        exc = first_exc
        if exc is not None:
            kind = fatal_kind(exc)
            if kind:
                out.fatal = _fatal(exc, kind)
                return out
            out.actual = raised_message(exc)
            out.traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=3))[-2000:]
        else:
            out.actual = value
        rows = case.spec.rows
        mask = torch.zeros(rows, dtype=torch.bool)
        for n in range(2, self.repeat + 1):
            again, exc = _call(self.route, case)
            if exc is not None and fatal_kind(exc):
                out.fatal = _fatal(exc, fatal_kind(exc), who=f"call {n}: ")
                return out
            self._note(out, mask, f"call {n}", value, again if exc is None else raised_message(exc), rows)
        if self.graph and self.repeat > 1 and case.scores.is_cuda and first_exc is None and _is_pair(value):
            replayed = self._graph_replay(case, out)
            if replayed is not None:
                self._note(out, mask, "CUDA graph replay", value, replayed, rows)
        out.differing_rows = int(mask.sum())
        out.differing_sample = mask.nonzero().squeeze(1)[:DIFF_SAMPLE_ROWS].tolist()
        out.changed = not (_same_bits(case.scores, before[0]) and (case.bias is None or _same_bits(case.bias, before[1])))
        if self.other is not None:
            other, exc = _call(self.other, case)
            if exc is not None:
                kind = fatal_kind(exc) or "against_failed"
                out.fatal = _fatal(exc, kind, who=f"--against {self.other_name}: ")
            else:
                out.other = other
        return out

    def _note(self, out: CallOutcome, mask: torch.Tensor, label: str, first, again, rows: int) -> None:
        differs = _differing_mask(first, again, rows)
        if not bool(differs.any()):
            return
        out.differing_calls.append(label)
        if out.difference is None:
            row = int(differs.nonzero()[0])
            example = {"call": label, "row": row, "ids": None, "weights": None, "first_ids": None, "first_weights": None}
            if _row_readable(first, rows) and _row_readable(again, rows):
                example.update(
                    weights=again[0][row].tolist(), ids=again[1][row].tolist(),
                    first_weights=first[0][row].tolist(), first_ids=first[1][row].tolist(),
                )  # fmt: skip
            if isinstance(again, str):
                example["message"] = again
            out.difference = example
        mask |= differs

    def _graph_replay(self, case: Case, out: CallOutcome):
        try:
            side = torch.cuda.Stream(device=case.scores.device)
            side.wait_stream(torch.cuda.current_stream(case.scores.device))
            with torch.cuda.stream(side):  # warm-up off the capture stream, as torch.cuda.graph asks
                _ = self.route(case.scores, case.bias, case.topk, case.renormalize, case.routed_scaling_factor, **case.group_args)
            torch.cuda.current_stream(case.scores.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static = self.route(case.scores, case.bias, case.topk, case.renormalize, case.routed_scaling_factor, **case.group_args)
            graph.replay()
            torch.cuda.synchronize()
            result = tuple(t.clone() for t in static) if _is_pair(static) else static
            del graph
            return result
        except Exception as exc:  # noqa: BLE001 -- not capturable is a note, not a determinism finding
            self.graph = False
            out.notes.append(f"CUDA graph capture/replay failed, graph replay skipped from here on: {raised_message(exc)}")
            return None
