"""Calling a candidate on a case, in whichever process it runs: one result type.

``CaseRunner.run(case)`` makes the call, ``repeat - 1`` more, and on CUDA
with repeats one CUDA graph replay; it records whether the inputs changed
and runs the ``--against`` candidate.

Each call gets its own copy of the case's inputs (same bits, same layout:
strides, storage offset and the padding of strided rows; the bias as an
``nn.Parameter``, the logits requiring grad, the call under ``no_grad`` or
``inference_mode``, under ``autocast`` (bf16 or fp16), a bf16 default dtype and
deterministic algorithms where the case pins that context) and what it
returns is copied at once, before anything else runs. So a candidate that
mutates or re-points its inputs (``scores.set_()``, ``t_()``) cannot
corrupt the harness's copy, a candidate that returns the same static
output buffers on every call is compared call against call (not its buffer
with itself), and a thread that keeps writing into a returned tensor cannot
change an answer already given. During a call ``os._exit`` raises
``CandidateExit`` instead of ending the process, and a ``KeyboardInterrupt``
counts as the user's Ctrl-C only if a SIGINT really arrived.

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

import contextlib
import os
import re
import signal
import sys
import threading
import traceback
from dataclasses import dataclass, field
from typing import Callable

import torch

from ..cases import Case
from ..compare.dense import dense_faults, read_answer

__all__ = ["DIFF_SAMPLE_ROWS", "Answer", "CallOutcome", "CallResult", "Fatal", "Malformed", "Raised", "answered", "CandidateExit", "CaseRunner", "call_once", "fatal_kind", "first_line", "raised_message"]

DIFF_SAMPLE_ROWS = 16


class CandidateExit(SystemExit):
    """The candidate called ``os._exit()`` during its call; in-process, that ends its check, not the harness."""


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


# ---------------------------------------------------------------- one call, fenced in


def _private_copy(t: torch.Tensor) -> torch.Tensor:
    """``t`` with a storage of its own: the same bytes (the whole storage, padding included), shape, strides and offset."""
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage().clone(), t.storage_offset(), t.size(), t.stride())


def _layout(t: torch.Tensor) -> tuple:
    storage = t.untyped_storage()
    return (t.dtype, t.device, tuple(t.shape), t.stride(), t.storage_offset(), storage.data_ptr(), storage.nbytes())


def _storage_bytes(storage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _same_bytes(a, b) -> bool:
    """Whether two storages hold the same bytes: compared as int64 words, then the tail bytes (5x faster than uint8)."""
    x, y = _storage_bytes(a), _storage_bytes(b)
    if x.numel() != y.numel():
        return False
    whole = x.numel() // 8 * 8
    return torch.equal(x[:whole].view(torch.int64), y[:whole].view(torch.int64)) and torch.equal(x[whole:], y[whole:])


_DEFAULT_DTYPES = {"bf16": torch.bfloat16}
_AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype):
    """``torch.set_default_dtype(dtype)`` for the call, the previous default restored whatever the call does."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


@contextlib.contextmanager
def _deterministic_algorithms():
    """``torch.use_deterministic_algorithms(True)`` for the call, the previous setting restored whatever the call does.
    warn_only: what a router sees is the flag (and torch.empty's NaN fill); an op with no deterministic form warns, as
    it cannot be made to pass in a process whose cuBLAS started without CUBLAS_WORKSPACE_CONFIG.

    The same two settings torch's function makes, without its import of ``torch._inductor`` (1.5 s of CPU in every
    process that meets the first such case, though most candidates never compile): inductor's ``deterministic`` is set
    where inductor is loaded, and where it is not, ``TORCHINDUCTOR_DETERMINISTIC`` makes an import during the call
    read it as set; after the call either is put back as it was."""
    previous, warn_only = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    inductor = sys.modules.get("torch._inductor.config")
    before = inductor.deterministic if inductor is not None else None
    env_before = os.environ.get("TORCHINDUCTOR_DETERMINISTIC")
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    if inductor is not None:
        inductor.deterministic = True
    else:
        os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    try:
        yield
    finally:
        torch._C._set_deterministic_algorithms(previous, warn_only=warn_only)
        if env_before is None:
            os.environ.pop("TORCHINDUCTOR_DETERMINISTIC", None)
        else:
            os.environ["TORCHINDUCTOR_DETERMINISTIC"] = env_before
        loaded = sys.modules.get("torch._inductor.config")  # loaded before the call or during it
        if loaded is not None:
            loaded.deterministic = before if inductor is not None else env_before == "1"


class _Inputs:
    """A case's inputs as one candidate call gets them: private copies, checked for changes after the call."""

    def __init__(self, case: Case):
        self.case = case
        self.scores = _private_copy(case.scores)
        self.bias = None if case.bias is None else _private_copy(case.bias)  # a contract without a correction bias
        if self.bias is not None and case.spec.bias_parameter is not None:  # pinned: as a model module holds it
            self.bias = torch.nn.Parameter(self.bias, requires_grad=case.spec.bias_parameter == "trainable")
        if case.spec.logits_grad:  # pinned: a view of a leaf that requires grad, as the gate's output in a training step
            # (same storage, layout and bytes; made with grad enabled, so it carries a grad_fn)
            with torch.enable_grad():
                self.scores = self.scores.requires_grad_(True).view_as(self.scores)
        self._originals = [t for t in (case.scores, case.bias) if t is not None]
        self._given = [(t, t.untyped_storage(), _layout(t)) for t in (self.scores, self.bias) if t is not None]

    def grad_context(self) -> contextlib.ExitStack:
        """The context the call runs in: the case's pinned grad mode (default: grad enabled), under
        ``torch.autocast(device, bfloat16 or float16)``, a bf16 default dtype and deterministic algorithms where the case
        pins them."""
        spec = self.case.spec
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode() if spec.grad_mode == "inference" else torch.set_grad_enabled(spec.grad_mode != "off"))
        if spec.autocast:
            stack.enter_context(torch.autocast(self.scores.device.type, dtype=_AUTOCAST_DTYPES[spec.autocast]))
        if spec.deterministic:
            stack.enter_context(_deterministic_algorithms())
        if spec.default_dtype:
            stack.enter_context(_default_dtype(_DEFAULT_DTYPES[spec.default_dtype]))
        return stack

    def args(self) -> tuple:
        c = self.case
        return self.scores, self.bias, c.topk, c.renormalize, c.routed_scaling_factor

    def kwargs(self) -> dict:
        """``num_expert_group`` / ``topk_group`` for a grouped contract, ``expert_scale`` (a copy of its own) for a
        contract with a per-expert weight scale, else nothing."""
        extra = self.case.call_kwargs
        if "expert_scale" in extra:
            extra = {**extra, "expert_scale": extra["expert_scale"].clone()}
        return extra

    def changed(self) -> bool:
        """Whether the call re-pointed, reshaped or wrote into what it was given (anywhere in the storages)."""
        for (t, storage, layout), original in zip(self._given, self._originals):
            if _layout(t) != layout:
                return True
            if not _same_bytes(storage, original.untyped_storage()):
                return True
        return False


def _layout_problem(value) -> str | None:
    """Why a (weights, ids) pair is not two row-major ``[M, k]`` tensors, or None. A serving engine hands the ids and
    weights to its expert kernels by data pointer (``moe_align_block_size`` reads ``topk_ids`` as ``M * k``
    consecutive ints): a transposed, expanded or sliced answer with the right values still routes tokens to the wrong
    experts there. Read as the call returned it, before any copy (a copy, and the worker's pipe, make it contiguous)."""
    if len(value) != 2:
        return None  # not a pair: the validity check says so
    for name, t in zip(("weights", "ids"), value):
        if t.dim() == 2 and not t.is_contiguous():
            return (f"{name} of shape {tuple(t.shape)} with strides {t.stride()}: not a contiguous row-major [M, k] tensor "
                    f"(engines read it by data pointer); return {name}.contiguous()")  # fmt: skip
    return None


def _stored_values(t: torch.Tensor) -> torch.Tensor:
    """A plain copy of what ``t``'s memory holds (its storage at its offset, sizes and strides): what an engine that
    reads the data pointer gets. A subclass's ``__torch_dispatch__`` would answer a ``clone()`` with whatever it likes;
    a wrapper subclass with no memory of its own cannot be read (the caller reports that)."""
    if type(t) is torch.Tensor:
        return t.detach().clone()
    stored = torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return stored.clone()


def _copied(value):
    """What a call returned, copied at once into plain tensors (a static buffer, a racing writer, a lying subclass
    cannot change it afterwards); anything else as it is, or a message if the tensors cannot be copied or are not
    row-major (``_layout_problem``)."""
    if not (isinstance(value, (tuple, list)) and value and all(isinstance(t, torch.Tensor) for t in value)):
        return value
    try:
        with torch._C.DisableTorchFunctionSubclass():
            problem = _layout_problem(value)
            if problem:
                return problem
            copies = [_stored_values(t) for t in value]
    except Exception as exc:  # noqa: BLE001 -- an output the harness cannot copy is not an answer
        return f"returned tensors the harness cannot copy: {raised_message(exc)}"
    return tuple(copies) if isinstance(value, tuple) else copies


def _answer(copied, case: Case):
    """A copied answer as every caller after the call reads it: a dense ``(probs [M, E], routing_map [M, E])`` answer
    read into ``(weights, ids)`` with its per-row faults (``compare.dense``), here where in-process and worker calls,
    repeats and graph replays all pass, so the pipe and the determinism check see ``[M, k]`` as for any answer."""
    return read_answer(copied, rows=case.spec.rows, experts=case.scores.shape[1], topk=case.topk, device=case.scores.device)


class _Fence:
    """Around one call: ``os._exit`` raises ``CandidateExit`` (in this process only, not in a child it forks), and
    ``sigint`` records whether a real SIGINT arrived (then a KeyboardInterrupt is the user's)."""

    def __init__(self):
        self.sigint = False
        self._exit = self._handler = None

    def __enter__(self):
        real_exit, owner = os._exit, os.getpid()

        def refuse_exit(status=0):
            if os.getpid() != owner:  # a forked child of the candidate exits as it asked
                real_exit(status)
            raise CandidateExit(f"the candidate called os._exit({status}) during its call (in process, that would end the run)")

        self._exit, os._exit = real_exit, refuse_exit
        if threading.current_thread() is threading.main_thread():
            previous = signal.getsignal(signal.SIGINT)
            if previous is not None:

                def on_sigint(signum, frame):
                    self.sigint = True
                    if callable(previous):
                        return previous(signum, frame)
                    if previous == signal.SIG_DFL:
                        raise KeyboardInterrupt
                    return None  # SIG_IGN

                self._handler = previous
                signal.signal(signal.SIGINT, on_sigint)
        return self

    def __exit__(self, *exc):
        os._exit = self._exit
        if self._handler is not None:
            signal.signal(signal.SIGINT, self._handler)
            self._handler = None
        return False


def call_once(route: Callable, case: Case) -> tuple[object, BaseException | None, bool]:
    """One call of ``route`` on ``case`` as a check makes it (private copies of the inputs, the case's call context, the
    fence), for callers that make their own calls (``search``): ``(answer, exception, inputs changed)``, the answer
    copied from its memory at once (or a one-line message: not row-major, not copyable), None when it raised."""
    inputs = _Inputs(case)
    value, exc = _call(route, inputs)
    if exc is not None and fatal_kind(exc) == "cuda_error":
        return value, exc, False  # the context's sticky error would raise again in the read-back, as the harness's
    return value, exc, inputs.changed()


def _call(route: Callable, inputs: _Inputs):
    """One call on private inputs; ``(a copy of the answer, None)`` or ``(None, exception)``.

    A KeyboardInterrupt passes through only when a SIGINT arrived during the call.
    """
    with _Fence() as fence:
        try:
            with inputs.grad_context():
                value = route(*inputs.args(), **inputs.kwargs())
            if inputs.case.scores.is_cuda:
                torch.cuda.synchronize()  # asynchronous CUDA errors surface here, inside the try
            copied = _copied(value)
        except KeyboardInterrupt as exc:
            if fence.sigint:
                raise
            return None, exc  # raised by the candidate itself: its error, not a stop
        except BaseException as exc:  # noqa: BLE001 -- SystemExit from a candidate is its failure, not ours
            return None, exc
    # Outside the candidate's domain: reading the copied answer (a dense one into [M, k]) is the harness's work, and
    # an exception there is the harness's (harness_error, through contracts.run.containment), not the candidate's.
    return _answer(copied, inputs.case), None


# ---------------------------------------------------------------- torch.compile


def _dynamo_counts() -> tuple[int, dict[str, int]] | None:
    """(frames dynamo compiled, recompile-limit hits by limit name) so far in this process; None if dynamo never loaded."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    hits: dict[str, int] = {}
    for key, n in dict(counters.get("unimplemented", {})).items():
        text = str(key).lower()
        if "recompile limit" in text or "cache size limit" in text or "cache_size_limit" in text:
            found = re.search(r"limit type: (\w+)", str(key))
            name = found.group(1) if found else "recompile_limit"
            hits[name] = hits.get(name, 0) + n
    return int(dict(counters.get("frames", {})).get("ok", 0)), hits


def _dynamo_limit(name: str):
    config = sys.modules.get("torch._dynamo.config")
    value = getattr(config, name, None)
    if value is None and name == "recompile_limit":
        value = getattr(config, "cache_size_limit", None)  # its name before torch 2.6
    return value


@dataclass
class _CompileWatch:
    """Dynamo's compiles and recompile-limit hits across the cases of one runner (the whole check)."""

    compiles: int = 0
    recompiles: int = 0  # compiles in cases after the first that compiled anything
    limit: str | None = None  # the limit hit first, and where
    limit_case: str | None = None
    _before: tuple | None = None

    def start(self) -> None:
        self._before = _dynamo_counts()

    def stop(self, case: Case) -> None:
        after = _dynamo_counts()
        if after is None:
            return
        before = self._before or (0, {})
        compiled = after[0] - before[0]
        if compiled > 0:
            self.recompiles += compiled if self.compiles else 0
            self.compiles += compiled
        for name, n in after[1].items():
            if n > before[1].get(name, 0) and self.limit is None:
                self.limit, self.limit_case = name, case.spec.replay_id

    def notes(self) -> list[str]:
        if not self.recompiles and self.limit is None:
            return []
        text = (f"torch.compile: dynamo recompiled the candidate {self.recompiles} time(s) after its first case "
                f"({self.compiles} compiles in all), as cases changed dtypes, renormalize, scaling or layout")  # fmt: skip
        if self.limit is not None:
            text += (f", and fell back to eager after the limit of {_dynamo_limit(self.limit)} (torch._dynamo.config.{self.limit}) "
                     f"in case {self.limit_case}: later calls ran uncompiled, so this check did not test the compiled code "
                     "for them; raise the limit or mark the changing inputs dynamic")  # fmt: skip
        return [text]


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
    """The harness's reading of a call's value (``_answer``: a message where it is no answer) as a result."""
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
            value = _copied(route(piece, bias, *args, **kwargs))
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
        self.compile_watch = _CompileWatch()

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
        inputs = _Inputs(case)
        value, first_exc = _call(self.route, inputs)
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
                inputs = _Inputs(case)  # every call answers the case itself, not what an earlier call left behind
            again, exc = _call(self.route, inputs)
            if exc is not None and fatal_kind(exc):  # before the read-back, as for the first call
                out.result = _fatal(exc, fatal_kind(exc), who=f"call {n}: ")
                return out
            changed = inputs.changed() or changed
            self._note(out, mask, f"call {n}", value, again if exc is None else raised_message(exc), rows)
        if self.graph and self.repeat > 1 and case.scores.is_cuda and first_exc is None and _is_pair(value):
            inputs = _Inputs(case)
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
            other, exc = _call(self.other, _Inputs(case))
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

    def _graph_replay(self, inputs: _Inputs, out: CallOutcome):
        device = inputs.case.scores.device
        try:
            with _Fence():
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
                copied = _copied(static)
            del graph
        except SystemExit as exc:  # sys.exit / os._exit inside the replayed candidate ends its check
            out.result = _fatal(exc, "exit", who="CUDA graph replay: ")
            return None
        except Exception as exc:  # noqa: BLE001 -- not capturable is a note, not a determinism finding
            self.graph = False
            out.notes.append(f"CUDA graph capture/replay failed, graph replay skipped from here on: {raised_message(exc)}")
            return None
        return _answer(copied, inputs.case)  # the harness's reading, outside the candidate's domain (as in _call)
