"""One call of a candidate, fenced in: what the candidate is given, the context it runs in, what comes back.

Each call gets its own copy of the case's inputs (``CallInputs``: same bits,
same layout: strides, storage offset and the padding of strided rows; the
bias as an ``nn.Parameter``, the logits requiring grad, the call under
``no_grad`` or ``inference_mode``, under ``autocast`` (bf16 or fp16), a bf16
default dtype and deterministic algorithms where the case pins that context)
and what it returns is copied at once (``copied``), before anything else
runs. So a candidate that mutates or re-points its inputs (``scores.set_()``,
``t_()``) cannot corrupt the harness's copy, a candidate that returns the
same static output buffers on every call is compared call against call (not
its buffer with itself), and a thread that keeps writing into a returned
tensor cannot change an answer already given. During a call (``Fence``)
``os._exit`` raises ``CandidateExit`` instead of ending the process, and a
``KeyboardInterrupt`` counts as the user's Ctrl-C only if a SIGINT really
arrived.

``contracts.candidates.calling`` makes the calls of a check with these
(repeats, graph replays, slices, the ``--against`` candidate); ``search``
makes its own with ``call_once``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from typing import Callable

import torch

from ..cases import Case
from ..compare.dense import read_answer

__all__ = ["CallInputs", "CandidateExit", "Fence", "call_fenced", "call_once", "copied", "fatal_kind", "first_line", "raised_message", "read_copied"]


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


def raised_message(exc: BaseException) -> str:
    return f"raised {type(exc).__name__}: {first_line(exc)}"


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


class CallInputs:
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


def copied(value):
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


def read_copied(answer, case: Case):
    """A copied answer as every caller after the call reads it: a dense ``(probs [M, E], routing_map [M, E])`` answer
    read into ``(weights, ids)`` with its per-row faults (``compare.dense``), here where in-process and worker calls,
    repeats and graph replays all pass, so the pipe and the determinism check see ``[M, k]`` as for any answer."""
    return read_answer(answer, rows=case.spec.rows, experts=case.scores.shape[1], topk=case.topk, device=case.scores.device)


class Fence:
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
    inputs = CallInputs(case)
    value, exc = call_fenced(route, inputs)
    if exc is not None and fatal_kind(exc) == "cuda_error":
        return value, exc, False  # the context's sticky error would raise again in the read-back, as the harness's
    return value, exc, inputs.changed()


def call_fenced(route: Callable, inputs: CallInputs):
    """One call on private inputs; ``(a copy of the answer, None)`` or ``(None, exception)``.

    A KeyboardInterrupt passes through only when a SIGINT arrived during the call.
    """
    with Fence() as fence:
        try:
            with inputs.grad_context():
                value = route(*inputs.args(), **inputs.kwargs())
            if inputs.case.scores.is_cuda:
                torch.cuda.synchronize()  # asynchronous CUDA errors surface here, inside the try
            answer = copied(value)
        except KeyboardInterrupt as exc:
            if fence.sigint:
                raise
            return None, exc  # raised by the candidate itself: its error, not a stop
        except BaseException as exc:  # noqa: BLE001 -- SystemExit from a candidate is its failure, not ours
            return None, exc
    # Outside the candidate's domain: reading the copied answer (a dense one into [M, k]) is the harness's work, and
    # an exception there is the harness's (harness_error, through contracts.run.containment), not the candidate's.
    return read_copied(answer, inputs.case), None

