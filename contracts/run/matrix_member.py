"""One candidate of the agreement matrix: where it runs (a worker, or a runner here), its gates, its answers, and its
record (``MatrixMember``), which says whether it ran and how it ended."""

from __future__ import annotations

import time

from ..candidates import Candidate
from ..candidates.worker import Worker, WorkerFailure
from ..cases import CaseSpec
from ..reports.matrix_schema import MatrixMember
from ..reports.schema import ErrorRecord, Status
from .checks import Target, should_isolate
from .containment import HarnessError

__all__ = ["Member"]


class Member:
    """A candidate in the matrix: where it runs, and its record."""

    def __init__(self, target: Target, record: MatrixMember):
        self.target, self.record = target, record
        self.candidate: Candidate = target.candidate
        self.worker: Worker | None = None
        self.runner = None
        self.live = False
        self.call_rows: int | None = None  # the most rows one of its calls gets in a bulk case (from its gates)
        self.contract: str | None = None  # as given (a name or a .toml path), set by open

    @property
    def name(self) -> str:
        return self.record.name

    def open(self, *, contract: str, device: str, shape, isolate: bool | None, timeout: float, stop) -> None:
        self.contract = contract
        """Start it (a worker, or a runner here) and ask its gates, as ``check`` does (a bulk case comes in calls it serves)."""
        import torch

        from ..candidates.calling import CaseRunner
        from ..cases.plan import bulk_rows_for

        cand, kind = self.candidate, device.split(":")[0]
        if kind not in cand.devices:
            return self._unavailable(f"{cand.name} runs on {'/'.join(cand.devices)}, not on {kind}")
        if should_isolate(isolate, cand, device, None):
            if kind == "cuda" and not torch.cuda.is_available():
                return self._unavailable(f"{cand.name} runs on {'/'.join(cand.devices)}, and torch {torch.__version__} sees no GPU on this host")
            self.worker = self.target.worker or Worker(self.target.lookup, timeout=timeout, should_stop=stop)
            self.record.isolated = True
            try:
                ok, why = self.worker.load(contract=contract, device=device, origin=cand.origin, experts=shape.experts, topk=shape.topk)
            except WorkerFailure as failure:
                return self.fail(failure.kind, f"loading {self.target.lookup}", failure.message, failure.stderr_tail)
            self.call_rows = self.worker.call_rows
        else:
            ok, why = cand.available(device)
            if ok:
                self.call_rows = bulk_rows_for(cand.covered, experts=shape.experts, topk=shape.topk, device=device, max_rows=cand.max_rows)
            self.runner = CaseRunner(cand.route_under(contract), call_rows=self.call_rows)
        if not ok:
            return self._unavailable(why)
        self.live = True

    def _unavailable(self, why: str) -> None:
        self.record.status, self.record.reason = Status.UNAVAILABLE, why
        self.close()

    def fail(self, kind: str, case: str, message: str, stderr_tail: str = "", replay: str | None = None) -> None:
        detail = message + (f"\n\nworker stderr (tail):\n{stderr_tail}" if stderr_tail else "")
        self.record.status = Status.ERROR
        self.record.error = ErrorRecord(kind=kind, case=case, message=message, traceback=detail, replay=replay,
                                        stderr_tail=stderr_tail or None)  # fmt: skip
        self.live = False
        self.close()

    def harness_failed(self, fault: HarnessError) -> None:
        """A fault of the harness's own code ended this candidate's part (``contracts.run.containment``)."""
        self.record.status, self.record.error = Status.ERROR, fault.record()
        self.live = False
        self.close()

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        self.target.worker = None

    def answer(self, spec: CaseSpec, case):
        """The candidate's CallOutcome on the case, or None when it does not cover it (WorkerFailure, Interrupted pass)."""
        started = time.perf_counter()
        try:
            if self.worker is not None:
                return self.worker.run(spec)
            from ..cases.plan import call_size

            shape = case.call_shape(call_size(spec, self.call_rows))
            return self.runner.run(case) if self.candidate.covers(contract=self.contract, **shape) else None
        finally:
            self.record.duration_s += time.perf_counter() - started
