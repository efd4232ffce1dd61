"""Calling a candidate on a case, in whichever process it runs: one result type.

``CaseRunner.run(case)`` makes the call, ``repeat - 1`` more, and on CUDA
with repeats one CUDA graph replay; it records whether the inputs changed
and runs the ``--against`` candidate.

Each call is fenced in (``contracts.candidates.fenced_call``): it gets its own
copy of the case's inputs, in the case's call context, and what it returns is
copied at once; ``os._exit`` during it raises ``CandidateExit``, and a
``KeyboardInterrupt`` counts as the user's Ctrl-C only if a SIGINT really
arrived. torch.compile's recompiles across the cases are watched
(``contracts.candidates.compile_watch``).

What a misbehaving candidate becomes:

==========================================  ===================================================
the candidate ...                           reported as
==========================================  ===================================================
raises a Python exception                   ``error`` (kind ``exception``), its message and replay line
raises KeyboardInterrupt, no SIGINT came    the same: the candidate's error, not the user's stop
returns the wrong type/shape/dtype/device   a ``validity`` mismatch
returns outputs that are not row-major      a ``validity`` mismatch (transposed, expanded or sliced [M, k] views)
modifies its inputs (values or metadata)    a ``validity`` mismatch ("inputs were modified in place")
runs out of memory (host or GPU)            ``error`` (kind ``out_of_memory``)
raises a CUDA error                         ``error`` (kind ``cuda_error``)
calls sys.exit() or os._exit() in process   ``error`` (kind ``exit``); the run goes on to the next candidate
exits, segfaults or aborts (worker only)    ``error`` (kind ``crash``, the signal, stderr tail)
answers nothing for ``timeout`` s (worker)  ``error`` (kind ``timeout``; the worker is killed)
gives different answers on repeated calls   a ``determinism`` finding (``--repeat N``)
is recompiled by torch.compile              a note in the summary (how often; the recompile limit hit)
==========================================  ===================================================

A bulk case larger than the batches the candidate serves (``call_rows``,
from its ``covered`` gate and ``max_rows``) is answered in calls of at most
``call_rows`` rows, each answer copied at once and the answers joined in
row order: the harness generates, routes and compares 65,536 rows at a time
while the candidate sees only the batch sizes it declares. A slice whose
answer is malformed makes the whole case a ``validity`` mismatch naming the
slice.

``contracts.candidates.worker`` runs the same ``CaseRunner`` in a worker process.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..cases import Case
from ..compare.dense import dense_faults
from .compile_watch import CompileWatch
from .fenced_call import CallInputs, Fence, call_fenced, copied, fatal_kind, raised_message, read_copied

__all__ = ["DIFF_SAMPLE_ROWS", "Answer", "CallOutcome", "CallResult", "CaseRunner", "Fatal", "Malformed", "Raised", "answered", "in_slices"]

DIFF_SAMPLE_ROWS = 16


def _is_pair(value) -> bool:
    return isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, torch.Tensor) for t in value)


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


def _unusable_reference(value, rows: int) -> str | None:
    """Why an ``--against`` answer cannot stand in for the oracle's, or None: it must be fp32 weights and int32 ids of
    ``rows`` rows and one width (the comparison then holds the candidate to it, as to the oracle's)."""
    if isinstance(value, str):
        return value
    if not _is_pair(value):
        return f"returned {type(value).__name__}, not a (weights, ids) pair of tensors"
    w, ids = value
    if w.dim() != 2 or tuple(w.shape) != tuple(ids.shape) or w.shape[0] != rows:
        return f"shapes weights {tuple(w.shape)}, ids {tuple(ids.shape)}; expected two of [{rows}, k]"
    if w.dtype != torch.float32 or ids.dtype != torch.int32:
        return f"dtypes weights {w.dtype}, ids {ids.dtype}; expected torch.float32 and torch.int32"
    faults = dense_faults(value)
    if faults is not None and bool(faults.any()):  # a reference routes every row
        return f"a dense answer whose routing_map is malformed in {int(faults.count_nonzero())} of {rows} rows"
    return None


def _row_readable(value, rows: int) -> bool:
    return _is_pair(value) and all(t.dim() == 2 and t.shape[0] == rows and t.device.type != "meta" for t in value)


@dataclass
class Answer:
    """The candidate answered: ``value`` is its (weights, ids) pair as the harness read it (or a ``DenseAnswer``)."""

    value: object


@dataclass
class Raised:
    """The candidate raised an exception (an error of the candidate's, on this case only)."""

    message: str
    traceback: str


@dataclass
class Malformed:
    """The candidate returned something that is no answer (outputs on meta, not a pair of tensors...): a validity
    finding of the case, ``message`` saying what came back."""

    message: str


@dataclass
class Fatal:
    """The candidate's run ends here (a process exit, a CUDA error, an unusable --against answer): ``kind`` names it for
    the summary's error record (``fatal_kind``'s words, ``against_failed``)."""

    kind: str
    message: str
    traceback: str = ""


CallResult = Answer | Raised | Malformed | Fatal


@dataclass
class CallOutcome:
    """What calling a candidate on one case gave. Plain data: it crosses the worker pipe.

    ``result`` is one of ``Answer``, ``Raised``, ``Malformed`` or ``Fatal`` (a fatal end of a later call, the graph
    replay or the --against candidate replaces the first call's result: the candidate's run ends either way)."""

    result: CallResult = field(default_factory=lambda: Malformed("the call gave no result"))  # until a call sets it
    changed: bool = False  # the candidate modified its inputs
    other: object = None  # the --against candidate's answer
    differing_rows: int = 0  # rows whose answers differ between repeated calls / the graph replay
    differing_sample: list[int] = field(default_factory=list)
    differing_calls: list[str] = field(default_factory=list)
    difference: dict | None = None  # the first differing row: {"call", "row", "ids", "weights"} vs call 1
    notes: list[str] = field(default_factory=list)  # about determinism (a graph replay that could not run)
    # About the whole check so far, for the summary's notes (torch.compile recompiles): each outcome's list
    # replaces the one before.
    summary_notes: list[str] = field(default_factory=list)

    @property
    def fatal(self) -> Fatal | None:
        return self.result if isinstance(self.result, Fatal) else None

    @property
    def answer(self):
        """The answer's value, or None where the call gave none (raised, malformed, fatal)."""
        return self.result.value if isinstance(self.result, Answer) else None


def _fatal(exc: BaseException, kind: str, who: str = "") -> Fatal:
    return Fatal(kind, f"{who}{raised_message(exc)}",
                 "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=4))[-2000:])  # fmt: skip


def answered(value) -> Answer | Malformed:
    """The harness's reading of a call's value (``fenced_call.read_copied``: a message where it is no answer) as a result."""
    return Malformed(value) if isinstance(value, str) else Answer(value)


def _slice_problem(value, rows: int, first) -> str | None:
    """Why one slice's answer cannot be joined with the others (``first``: the first slice's answer)."""
    if not _is_pair(value):
        return f"returned {type(value).__name__}, not a (weights, ids) pair of tensors"
    for name, t, f in zip(("weights", "ids"), value, first or value):
        if t.dim() != 2 or t.shape[0] != rows:
            return f"{name} of shape {tuple(t.shape)}; expected {rows} rows"
        if (t.dtype, t.device, t.shape[1:]) != (f.dtype, f.device, f.shape[1:]):
            return f"{name} of {t.dtype} {tuple(t.shape)} on {t.device}, unlike the first slice's {f.dtype} {tuple(f.shape)} on {f.device}"
    return None


def in_slices(route: Callable, call_rows: int) -> Callable:
    """``route`` answering any number of rows in calls of at most ``call_rows`` rows, joined in row order.

    Each slice's answer is copied before the next call (a static output buffer
    cannot overwrite an earlier slice); a malformed slice answers the whole
    call with a message naming it (a ``validity`` finding).
    """

    def whole(scores, bias, *args, **kwargs):
        parts = []
        for start in range(0, scores.shape[0], call_rows):
            piece = scores[start : start + call_rows]
            value = copied(route(piece, bias, *args, **kwargs))
            problem = value if isinstance(value, str) else _slice_problem(value, piece.shape[0], parts[0] if parts else None)
            if problem:
                return f"rows {start}..{start + piece.shape[0] - 1} (one call of {piece.shape[0]:,} rows) {problem}"
            parts.append(value)
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    whole.__wrapped__ = route
    return whole


class CaseRunner:
    """Calls a candidate on cases: the call, ``repeat - 1`` more, and (on CUDA, with repeats) a CUDA graph replay.

    ``call_rows``: the most rows one call gets in a bulk case (None: the whole case in one call).
    """

    def __init__(self, route: Callable, *, other: Callable | None = None, other_name: str = "", repeat: int = 1, graph: bool = False,
                 call_rows: int | None = None):  # fmt: skip
        self.whole_route, self.whole_other, self.other_name = route, other, other_name
        self.repeat = repeat
        self.graph = graph  # turned off for good after the first failed capture
        self.call_rows = call_rows
        self.compile_watch = CompileWatch()

    def run(self, case: Case) -> CallOutcome:
        self.compile_watch.start()
        out = CallOutcome()
        sliced = bool(self.call_rows) and case.spec.bulk and case.spec.rows > self.call_rows
        self.route = in_slices(self.whole_route, self.call_rows) if sliced else self.whole_route
        self.other = in_slices(self.whole_other, self.call_rows) if sliced and self.whole_other else self.whole_other
        try:
            self._run(case, out)
        finally:
            self.compile_watch.stop(case)
            out.summary_notes = self.compile_watch.notes()
        return out

    def _run(self, case: Case, out: CallOutcome) -> CallOutcome:
        inputs = CallInputs(case)
        value, first_exc = call_fenced(self.route, inputs)
        exc = first_exc
        if exc is not None and fatal_kind(exc):
            # Before the inputs are read back: after a candidate's CUDA fault the context's sticky error raises again
            # in the next CUDA op, which would charge the harness with the candidate's fault.
            out.result = _fatal(exc, fatal_kind(exc))
            return out
        changed = inputs.changed()
        if exc is not None:
            out.result = Raised(raised_message(exc), "".join(traceback.format_exception(type(exc), exc, exc.__traceback__, limit=3))[-2000:])
        else:
            out.result = answered(value)
        rows = case.spec.rows
        mask = torch.zeros(rows, dtype=torch.bool)
        for n in range(2, self.repeat + 1):
            if changed:
                inputs = CallInputs(case)  # every call answers the case itself, not what an earlier call left behind
            again, exc = call_fenced(self.route, inputs)
            if exc is not None and fatal_kind(exc):  # before the read-back, as for the first call
                out.result = _fatal(exc, fatal_kind(exc), who=f"call {n}: ")
                return out
            changed = inputs.changed() or changed
            self._note(out, mask, f"call {n}", value, again if exc is None else raised_message(exc), rows)
        if self.graph and self.repeat > 1 and case.scores.is_cuda and first_exc is None and _is_pair(value):
            inputs = CallInputs(case)
            replayed = self._graph_replay(inputs, out)
            if out.fatal:
                return out
            changed = inputs.changed() or changed
            if replayed is not None:
                self._note(out, mask, "CUDA graph replay", value, replayed, rows)
        out.differing_rows = int(mask.sum())
        out.differing_sample = mask.nonzero().squeeze(1)[:DIFF_SAMPLE_ROWS].tolist()
        out.changed = changed
        if self.other is not None:
            other, exc = call_fenced(self.other, CallInputs(case))
            if exc is not None:
                kind = fatal_kind(exc) or "against_failed"
                out.result = _fatal(exc, kind, who=f"--against {self.other_name}: ")
            elif _unusable_reference(other, rows):
                # the expected answer of every row: one that is missing or malformed ends the check (None passed
                # for "no --against" and the rows were compared with the oracle instead)
                message = f"--against {self.other_name} answer unusable: {_unusable_reference(other, rows)}"
                out.result = Fatal("against_failed", message)
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

    def _graph_replay(self, inputs: CallInputs, out: CallOutcome):
        device = inputs.case.scores.device
        try:
            with Fence():
                side = torch.cuda.Stream(device=device)
                side.wait_stream(torch.cuda.current_stream(device))
                with torch.cuda.stream(side), inputs.grad_context():  # warm-up off the capture stream, as torch.cuda.graph asks
                    _ = self.route(*inputs.args(), **inputs.kwargs())
                torch.cuda.current_stream(device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph), inputs.grad_context():
                    static = self.route(*inputs.args(), **inputs.kwargs())
                graph.replay()
                torch.cuda.synchronize()
                answer = copied(static)
            del graph
        except SystemExit as exc:  # sys.exit / os._exit inside the replayed candidate ends its check
            out.result = _fatal(exc, "exit", who="CUDA graph replay: ")
            return None
        except Exception as exc:  # noqa: BLE001 -- not capturable is a note, not a determinism finding
            self.graph = False
            out.notes.append(f"CUDA graph capture/replay failed, graph replay skipped from here on: {raised_message(exc)}")
            return None
        return read_copied(answer, inputs.case)  # the harness's reading, outside the candidate's domain (as in call_fenced)
