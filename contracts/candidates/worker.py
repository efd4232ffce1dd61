"""A candidate in a worker process, where it cannot take the harness down.

``Worker`` starts ``python -m contracts.candidates.worker`` in its own
process and session. The parent sends case specs (family, case_seed, rows,
experts, topk); the worker rebuilds the inputs with
``contracts.cases.build_case`` (deterministic, so both sides hold the same
bits), runs the candidate through the same ``CaseRunner`` as an in-process
run, and sends back its outputs, plus whether it modified its inputs. The
parent compares. The parent never imports the candidate's code: the worker
looks the candidate up by name, and it also answers the gates
(``available``, ``covered``), which may load GPU code.

Messages are pickled records over a pair of pipes wrapped in
``multiprocessing.connection.Connection`` (its framing, its ``poll``). The
worker moves its own stdout onto its stderr before it imports a candidate,
so a candidate's prints cannot corrupt the protocol; the parent keeps the
worker's stderr in a temporary file and reports its tail when the worker
dies. A crash, hang or exit becomes a ``WorkerFailure`` whose ``kind`` says
which (``crash``, ``timeout``, ``worker_error``).
"""

from __future__ import annotations

import collections
import ctypes
import dataclasses
import faulthandler
import importlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from multiprocessing.connection import Connection
from typing import Callable

import torch

from kernels import BUILD_NOTICE_PREFIX

from ..cases import CaseSpec, build_case
from ..cases.launch_points import candidate_points
from ..cases.memory import reuse_freed_memory
from ..cases.plan import bulk_rows_for, call_size
from ..compare.dense import DenseAnswer, is_dense
from .calling import Answer, CallOutcome, CaseRunner, Fatal, Malformed, Raised, answered
from .fenced_call import first_line, raised_message
from .registry import CandidateLoadError, UnknownCandidateError, get_candidate

__all__ = ["Interrupted", "Worker", "WorkerFailure", "load_error_message"]

START_TIMEOUT_S = 300.0  # import + available()/build(): compiling a kernel can take minutes
POLL_S = 0.25  # how often a waiting parent looks at its stop flag
STDERR_TAIL = 3000  # characters of the worker's stderr kept in a report
STDERR_KEEP_BYTES = 1 << 20  # a chatty candidate's stderr file is cut back to its tail beyond this


class Interrupted(Exception):
    """The parent was asked to stop (SIGINT/SIGTERM) while it waited for a worker."""


class WorkerFailure(Exception):
    """The worker died, hung or failed inside the harness; ``kind`` says which."""

    def __init__(self, kind: str, message: str, stderr_tail: str = ""):
        super().__init__(message)
        self.kind, self.message, self.stderr_tail = kind, message, stderr_tail


# ---------------------------------------------------------------- wire format
# CPU tensors travel as raw bytes in plain pickles: a case's outputs are [M, k] (1.5 MB for a 16,384-row
# bulk case), cheaper to copy than to set up as shared memory (measured on the 2-core CPU: 1.6 ms one way
# per such case, encoding and decoding included, 0.1 us per row: 0.1 s of a 1M-row isolated check that
# takes 18 s; the inputs are not sent at all, the worker builds them from the spec). CUDA tensors travel as CUDA IPC handles
# (torch.multiprocessing's reduction: the parent maps the worker's memory, no copy through the host; the
# worker keeps the block alive until the parent lets go, and the parent clones it at once). Measured on the
# H200, radix4 over 20M rows isolated: 958,392 rows/s as bytes, 1,106,567 with IPC. CONTRACTS_CUDA_IPC=0
# sends them as bytes instead (a copy to the host and back), for a driver or container without IPC.

CUDA_IPC = os.environ.get("CONTRACTS_CUDA_IPC", "1") != "0"


def _encode_tensor(t: torch.Tensor) -> dict:
    if CUDA_IPC and t.is_cuda:
        from multiprocessing.reduction import ForkingPickler

        importlib.import_module("torch.multiprocessing")  # registers the CUDA reductions
        return {"ipc": bytes(ForkingPickler.dumps(t.detach().contiguous()))}
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "data": flat.view(torch.uint8).numpy().tobytes()}


def _decode_tensor(d: dict) -> torch.Tensor:
    if "ipc" in d:
        importlib.import_module("torch.multiprocessing")
        return pickle.loads(d["ipc"]).clone()  # our own copy: the worker's block may be reused by its next call
    dtype = getattr(torch, d["dtype"])
    if not d["data"]:
        return torch.empty(d["shape"], dtype=dtype)
    return torch.frombuffer(bytearray(d["data"]), dtype=torch.uint8).view(dtype).reshape(d["shape"])


def _encode_answer(value, device: torch.device):
    """A candidate's answer for the wire: tensors that came back on the inputs' device, or a message."""
    if isinstance(value, str) or value is None:
        return value
    if not (isinstance(value, (tuple, list)) and len(value) == 2):
        return f"returned {type(value).__name__}, not a (weights, ids) pair"
    if not all(isinstance(t, torch.Tensor) for t in value):
        return f"returned ({type(value[0]).__name__}, {type(value[1]).__name__}), not two tensors"
    w, ids = value
    if w.device != device or ids.device != device:
        return f"outputs on {w.device}/{ids.device}; the inputs were on {device}"
    try:
        if is_dense(value):  # read from a dense answer in the worker: its per-row faults travel with it
            return ("dense", _encode_tensor(w), _encode_tensor(ids), _encode_tensor(value.faults))
        return ("tensors", _encode_tensor(w), _encode_tensor(ids))
    except Exception as exc:  # noqa: BLE001 -- a sparse or otherwise odd tensor
        return f"returned tensors the harness cannot read: {raised_message(exc)}"


def _decode_answer(wire, device: str):
    if isinstance(wire, tuple) and wire and wire[0] == "tensors":
        return tuple(_decode_tensor(d).to(device) for d in wire[1:])
    if isinstance(wire, tuple) and wire and wire[0] == "dense":
        return DenseAnswer(*(_decode_tensor(d).to(device) for d in wire[1:]))
    return wire


def _outcome_to_wire(out: CallOutcome, device: torch.device) -> dict:
    wire = dict(out.__dict__)
    if isinstance(out.result, Answer):  # the tensors as the wire carries them; what no wire carries is a message
        wire["result"] = _encode_answer(out.result.value, device)
    wire["other"] = _encode_answer(out.other, device)
    return wire


def _outcome_from_wire(wire: dict, device: str) -> CallOutcome:
    out = CallOutcome(**wire)
    if not isinstance(out.result, (Raised, Malformed, Fatal)):  # an answer, as _outcome_to_wire encoded it
        out.result = answered(_decode_answer(out.result, device))
    if out.other is not None:
        other = _decode_answer(out.other, device)
        if isinstance(other, str):
            out.other = None
            out.result = out.fatal or Fatal("against_failed", f"--against answer unusable: {other}")
        else:
            out.other = other
    return out


# ---------------------------------------------------------------- load errors


def load_error_message(exc: BaseException) -> str:
    """One line: the registry's message plus where the candidate's import failed (its innermost own frame)."""
    message = first_line(exc) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and cause.__traceback__ is not None:
        frames = [
            f for f in traceback.extract_tb(cause.__traceback__)
            if not f.filename.startswith("<") and "importlib" not in f.filename and not f.filename.endswith("registry.py")
        ]  # fmt: skip
        if frames:
            where = frames[-1]
            message += f" (at {os.path.relpath(where.filename)}:{where.lineno}{', in ' + where.name if where.name != '<module>' else ''})"
    return message


def cpu_thread_shares(total: int) -> tuple[int, int]:
    """(parent, worker) torch threads of an isolated CPU run with ``total`` threads to share.

    The two processes compute at once (the worker the candidate, the parent the oracle and the
    comparison), so together they take no more threads than there are: oversubscribed OpenMP
    threads stall each other (measured on 2 cores: 2.1x slower than one thread each).
    """
    parent = max(1, total // 2)
    return parent, max(1, total - parent)


# ---------------------------------------------------------------- the parent's side


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            name = f"{signal.Signals(-returncode).name} (signal {-returncode})"
        except ValueError:
            return f"signal {-returncode}"
        return name + (", sent from outside: the kernel's out-of-memory killer?" if -returncode == signal.SIGKILL else "")
    return f"exit status {returncode}"


class Worker:
    """A worker process for one candidate (and its ``--against``), started on first use.

    ``describe()`` -> the candidate's metadata; ``load(...)`` -> ``(ok, why)``
    from its gates; ``run(spec)`` -> ``CallOutcome`` or None when the case is
    not covered. Raises ``WorkerFailure`` when the worker dies or hangs (it is
    then dead for good) and ``Interrupted`` when ``should_stop()`` turns true
    while it waits for an answer not yet sent (one already sent is returned:
    its case ran).
    """

    def __init__(self, lookup: str, *, timeout: float = 60.0, should_stop: Callable[[], object] | None = None):
        self.lookup = lookup
        self.timeout = timeout
        self.should_stop = should_stop or (lambda: None)
        self.device: str | None = None
        self.calls_per_case = 1
        self.call_rows: int | None = None  # the most rows one call of a bulk case gets, from the gates (after load)
        self.switch_points: tuple[int, ...] = ()  # those the candidate's module publishes (plan.candidate_points; after load)
        self._proc: subprocess.Popen | None = None
        self._to: Connection | None = None
        self._from: Connection | None = None
        self._stderr = None
        self._relayed = 0  # bytes of the worker's stderr file already looked through for build notices
        self._dead = False
        self._pending: collections.deque[CaseSpec] = collections.deque()
        self.current: CaseSpec | None = None  # the spec whose answer is awaited

    # lifecycle
    def _start(self) -> None:
        if self._dead:
            raise WorkerFailure("crash", "the worker is no longer running")
        self._stderr = tempfile.TemporaryFile(prefix="contracts-worker-", suffix=".stderr")
        self._relayed = 0
        path = [os.path.abspath(p or ".") for p in sys.path if os.path.isdir(p or ".")]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(path + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]))
        env.update(PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1", CONTRACTS_WORKER="1", CONTRACTS_PARENT_PID=str(os.getpid()))
        to_worker_r, to_worker_w = os.pipe()
        from_worker_r, from_worker_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "contracts.candidates.worker"],
                stdin=to_worker_r, stdout=from_worker_w, stderr=self._stderr,
                env=env, start_new_session=True,  # no terminal SIGINT: the parent decides when the worker stops
            )  # fmt: skip
        finally:
            os.close(to_worker_r)
            os.close(from_worker_w)
        self._to = Connection(to_worker_w, readable=False)
        self._from = Connection(from_worker_r, writable=False)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        self._dead = True
        for conn in (self._to, self._from):
            if conn is not None:
                conn.close()
        self._to = self._from = None
        if proc is not None:
            try:
                proc.wait(timeout=2)  # EOF on its request pipe ends an idle worker
            except subprocess.TimeoutExpired:
                self._kill(proc)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: the worker and whatever it started
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    @staticmethod
    def _dump_stacks(proc: subprocess.Popen) -> None:
        """Ask a hung worker where it is: faulthandler writes every thread's stack to its stderr."""
        try:
            os.kill(proc.pid, signal.SIGUSR1)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.5)

    def _trim_stderr(self) -> None:
        # Between requests the worker is idle. It shares this file's offset, so after the
        # rewrite below (which leaves the offset at the end) it goes on appending.
        size = self._stderr.seek(0, os.SEEK_END)
        if size <= STDERR_KEEP_BYTES:
            return
        self._stderr.seek(max(0, size - 16 * STDERR_TAIL))
        tail = self._stderr.read()
        self._stderr.seek(0)
        self._stderr.truncate()
        self._stderr.write(b"[earlier worker stderr dropped]\n" + tail)
        self._stderr.flush()
        self._relayed = self._stderr.tell()

    def _relay_notices(self) -> None:
        """Pass the kernel builds' notices the worker wrote since the last look on to this console (a cold build of a
        kernel is minutes of silence otherwise). ``os.pread``: the worker shares this file's offset and appends at it,
        so the parent reads without moving it."""
        if self._stderr is None:
            return
        fd = self._stderr.fileno()
        size = os.fstat(fd).st_size
        if size <= self._relayed:
            return
        new = os.pread(fd, size - self._relayed, self._relayed)
        whole = new[: new.rfind(b"\n") + 1]  # complete lines only; a half-written one waits for the next look
        self._relayed += len(whole)
        for line in whole.decode("utf-8", "replace").splitlines():
            if line.startswith(BUILD_NOTICE_PREFIX):
                print(line, file=sys.stderr, flush=True)

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.flush()
        size = self._stderr.seek(0, os.SEEK_END)
        self._stderr.seek(max(0, size - 4 * STDERR_TAIL))
        return self._stderr.read().decode("utf-8", "replace")[-STDERR_TAIL:].strip()

    # requests
    def _post(self, message: dict) -> None:
        if self._proc is None:
            self._start()
        try:
            self._to.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            pass  # it died; the read says how

    def _await(self, timeout: float, doing: str):
        """The next reply, in request order; WorkerFailure on a crash, hang or harness error, Interrupted on a stop."""
        proc = self._proc
        deadline = time.monotonic() + timeout
        while True:
            self._relay_notices()
            if self._from.poll(0):  # an answer already sent is kept, even after a stop: its case ran
                break
            reason = self.should_stop()
            if reason:
                self._kill(proc)
                self._dead = True
                raise Interrupted(str(reason))
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._dump_stacks(proc)
                self._kill(proc)
                self._dead = True
                raise WorkerFailure(
                    "timeout",
                    f"no answer within --timeout {self.timeout:g} s while {doing}; the worker was killed (a hang?)",
                    self.stderr_tail(),
                )
            if self._from.poll(min(remaining, POLL_S)):
                break
        self._relay_notices()
        try:
            reply = pickle.loads(self._from.recv_bytes())
        except (EOFError, OSError):
            try:
                code = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill(proc)
                code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
            self._dead = True
            raise WorkerFailure("crash", f"the worker died with {_signal_name(code)} while {doing}", self.stderr_tail()) from None
        if "worker_error" in reply:
            self._kill(proc)
            self._dead = True
            raise WorkerFailure("worker_error", f"the harness failed inside the worker while {doing}: {reply['worker_error']}", reply.get("traceback", ""))
        return reply

    def _request(self, message: dict, timeout: float, doing: str):
        self._post(message)
        return self._await(timeout, doing)

    def describe(self) -> dict:
        """The candidate's metadata (name, contract, devices, deviations...); CandidateLoadError if it does not load."""
        try:
            reply = self._request({"op": "describe", "lookup": self.lookup}, max(self.timeout, START_TIMEOUT_S), f"importing {self.lookup}")
        except WorkerFailure as failure:
            self.close()
            tail = failure.stderr_tail.splitlines()[-1] if failure.stderr_tail else ""
            raise CandidateLoadError(f"--candidate {self.lookup}: {failure.message}{'; last stderr line: ' + tail if tail else ''}") from None
        if "load_error" in reply:
            self.close()
            raise CandidateLoadError(reply["load_error"])
        return reply["candidate"]

    def load(self, *, contract: str, device: str, against: str | None = None, repeat: int = 1, origin: str = "",
             experts: int | None = None, topk: int | None = None) -> tuple[bool, str]:  # fmt: skip
        """Import the candidate (and ``against``) in the worker and ask its gates; ``(ok, why)``.

        ``origin``: a module to import first if the name is not registered yet
        (a candidate that a module registers when imported).
        """
        self.device = device
        self.calls_per_case = repeat + (1 if device.startswith("cuda") and repeat > 1 else 0) + (1 if against else 0)
        message = {"op": "load", "lookup": self.lookup, "origin": origin, "against": against, "contract": contract, "device": device,
                   "repeat": repeat, "experts": experts, "topk": topk}  # fmt: skip
        reply = self._request(message, max(self.timeout, START_TIMEOUT_S), f"loading {self.lookup} on {device}")
        if "load_error" in reply:
            return False, reply["load_error"]
        self.call_rows = reply.get("call_rows")
        self.switch_points = tuple(reply.get("switch_points") or ())
        return tuple(reply["available"])

    def submit(self, spec: CaseSpec) -> None:
        """Queue ``spec``: the worker starts on it while the parent compares the case before (see ``collect``)."""
        self._post({"op": "run", "spec": dataclasses.astuple(spec)})
        self._pending.append(spec)

    def collect(self) -> tuple[CaseSpec, CallOutcome | None]:
        """The oldest submitted spec and its outcome (outputs on ``device``), or None if the case is not covered."""
        spec = self.current = self._pending.popleft()
        reply = self._await(self.timeout * self.calls_per_case, f"running case {spec.replay_id}")
        self._trim_stderr()
        if reply.get("skipped"):
            return spec, None
        return spec, _outcome_from_wire(reply["outcome"], self.device)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def run(self, spec: CaseSpec) -> CallOutcome | None:
        """The candidate's outcome on ``spec`` (submit, then collect), or None if it does not cover the case."""
        self.submit(spec)
        return self.collect()[1]


# ---------------------------------------------------------------- the worker's side


def _describe(candidate) -> dict:
    return {
        "name": candidate.name,
        "contract": candidate.contract,
        "devices": tuple(candidate.devices),
        "description": candidate.description,
        "third_party": candidate.third_party,
        "origin": candidate.origin,
        "expected_deviations": candidate.expected_deviations,
        "coverage": candidate.coverage,
    }


def _lookup(lookup: str, origin: str | None):
    """``get_candidate``; a name registered at run time is found by importing its origin module first."""
    try:
        return get_candidate(lookup)
    except UnknownCandidateError:
        if not origin:
            raise
        importlib.import_module(origin.split(":")[0])
        return get_candidate(lookup)


class _Serving:
    def __init__(self):
        self.candidate = self.against = self.runner = None
        self.call_rows: int | None = None
        self.device = "cpu"
        self.contract: str | None = None

    def _covered(self, **shape) -> bool:
        return self.candidate.covers(contract=self.contract, **shape) and (
            self.against is None or self.against.covers(contract=self.contract, **shape))  # fmt: skip

    def handle(self, msg: dict) -> dict:
        op = msg["op"]
        if op == "describe":
            try:
                return {"candidate": _describe(get_candidate(msg["lookup"]))}
            except Exception as exc:  # noqa: BLE001 -- the registry's message is the answer
                return {"load_error": load_error_message(exc)}
        if op == "load":
            try:
                self.candidate = _lookup(msg["lookup"], msg.get("origin"))
                self.against = _lookup(msg["against"], None) if msg["against"] else None
            except Exception as exc:  # noqa: BLE001
                return {"load_error": load_error_message(exc)}
            self.device = msg["device"]
            ok, why = self.candidate.available(self.device)
            if ok and self.against is not None:
                ok, why2 = self.against.available(self.device)
                why = why if ok else f"--against {self.against.name}: {why2}"
            if ok and self.device.startswith("cuda"):
                torch.zeros(1, device=self.device)  # the CUDA context, before the first timed call
            if self.device == "cpu":
                torch.set_num_threads(cpu_thread_shares(torch.get_num_threads())[1])
            contract, repeat = msg["contract"], msg["repeat"]
            self.contract = contract
            call_rows = None
            if ok and msg.get("experts"):
                call_rows = bulk_rows_for(self._covered, experts=msg["experts"], topk=msg["topk"], device=self.device,
                                     max_rows=min(filter(None, (self.candidate.max_rows, getattr(self.against, "max_rows", None))), default=None))  # fmt: skip
            self.runner = CaseRunner(
                self.candidate.route_under(contract),
                other=self.against.route_under(contract) if self.against else None,
                other_name=self.against.name if self.against else "",
                repeat=repeat,
                graph=self.device.startswith("cuda") and repeat > 1,
                call_rows=call_rows,
            )
            self.call_rows = call_rows
            points = ()
            if msg.get("experts"):  # the launch shapes the candidate's own module publishes (read here, where it is imported)
                origins = [c.origin for c in (self.candidate, self.against) if c is not None]
                points = candidate_points(origins, msg["experts"], msg["topk"], contract)
            return {"available": (ok, why), "call_rows": call_rows, "switch_points": points}
        if op == "run":
            spec = CaseSpec(*msg["spec"])  # dataclasses.astuple of the parent's spec
            case = build_case(spec, self.device)
            if not self._covered(**case.call_shape(call_size(spec, self.call_rows))):
                return {"skipped": True}
            return {"outcome": _outcome_to_wire(self.runner.run(case), case.scores.device)}
        raise ValueError(f"unknown request {op!r}")


def _die_with_parent() -> None:
    # Linux: SIGKILL this worker when the parent dies, so a hung candidate never outlives the harness.
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    expected = os.environ.get("CONTRACTS_PARENT_PID")
    if expected and os.getppid() != int(expected):
        os._exit(1)  # the parent died before prctl took effect


def serve() -> int:
    """The worker's main loop: requests on stdin, replies on stdout, until EOF."""
    requests, replies = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # a candidate's prints go to stderr, never into the protocol
    faulthandler.enable()  # a segfault or abort leaves the Python stack in the report
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent's "where are you?" before it kills a hang
    _die_with_parent()
    reuse_freed_memory()  # as the parent does: cases reuse the pages of the last one
    serving = _Serving()
    while True:
        try:
            msg = pickle.loads(requests.recv_bytes())
        except EOFError:
            return 0
        try:
            reply = serving.handle(msg)
        except Exception as exc:  # noqa: BLE001 -- a harness or gate failure: report it, then stop
            reply = {"worker_error": raised_message(exc), "traceback": traceback.format_exc(limit=6)[-STDERR_TAIL:]}
        replies.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


if __name__ == "__main__":
    raise SystemExit(serve())
