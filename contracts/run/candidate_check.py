"""Check one candidate over planned cases: case -> candidate and oracle -> comparison -> tally.

A candidate runs in this process or, given a ``contracts.candidates.worker.Worker``,
in a worker process; either way a crash, hang, out-of-memory or CUDA error
ends its run with status ``error``, keeping every row checked before it. A
``should_stop`` callable that turns true (the command line's SIGINT/SIGTERM
handler) ends the run after the current case with status ``interrupted``.

With a worker the two processes overlap: the worker runs case n + 1 while
this process builds case n, routes it through the oracle and compares it.
Every call of the candidate, its repeats and its graph replay stay inside
the worker's ``CaseRunner``, so determinism checks are unchanged. The
tally times each stage (generation, candidate, oracle, comparison).
"""

from __future__ import annotations

import time
from typing import Callable, Iterable

import torch

import oracle

from ..candidates import Candidate
from ..candidates.calling import CaseRunner, Fatal, Malformed, Raised
from ..candidates.worker import Interrupted, Worker, WorkerFailure, cpu_thread_shares
from ..cases import CaseSpec, build_case
from ..cases.memory import reuse_freed_memory
from ..cases.plan import call_size
from ..compare import agrees, compare_case, expected_for
from ..compare.dense import for_comparison
from ..reports.schema import CheckResult, ReplayTarget, Status, Summary
from .containment import Handling
from .expert_load import ExpertLoad
from .replay import candidate_lookup, replay_command, replay_pythonpath
from .tally import Tally

__all__ = ["check_candidate", "require_evidence", "uncovered_families"]

PIPELINE_DEPTH = 2  # cases in flight in a worker: the one it runs and the next


class _Stop(Exception):
    """Ends the loop over cases (the reason is already in the tally)."""


def check_candidate(
    candidate: Candidate,
    specs: Iterable[CaseSpec],
    *,
    contract: str,
    device: str,
    against: Candidate | None = None,
    exact: bool = False,
    seed: int = 0,
    command: str = "",
    progress=None,
    max_cells: int = 100_000,
    repeat: int = 1,
    worker: Worker | None = None,
    should_stop: Callable[[], object] | None = None,
    options: dict | None = None,
    lookup: str | None = None,
    against_lookup: str | None = None,
    call_rows: int | None = None,
    handling: Handling | None = None,
) -> CheckResult:
    """Check ``candidate`` on ``specs`` (any iterable; consumed once).

    ``worker``: a loaded ``Worker`` that runs the candidate (and ``against``)
    in its own process; without it they run here. ``repeat``: calls per
    case (differences are a ``determinism`` finding). ``lookup`` /
    ``against_lookup``: what ``get_candidate`` resolves to the candidates,
    for replay lines (default: ``candidate_lookup``). ``call_rows``: the
    most rows one in-process call of a bulk case gets (a worker knows its own).
    ``handling``: kept up to date with the stage and the case in hand, and given
    the way to the rows counted so far, for ``contracts.run.containment``: an
    exception of the harness's own code propagates, and the caller's
    ``contained`` ends the check with it (the candidate's own failures end it here).
    """
    c = oracle.get_contract(contract)
    reuse_freed_memory()  # every case allocates the same large tensors again: reuse the pages, skip the faults
    against_name = against.name if against is not None else None

    target = ReplayTarget(lookup or candidate_lookup(candidate), (against_lookup or candidate_lookup(against)) if against is not None else None)
    target.pythonpath = replay_pythonpath(target.candidate, target.against)

    def replay(spec: CaseSpec, row: int | None) -> str:  # the contract as given: a name, or the .toml path
        return replay_command(target.candidate, str(contract), device, spec, row, target.against, exact, repeat, pythonpath=target.pythonpath)

    tally = Tally(
        candidate=candidate.name, contract=oracle.contract_label(c), clause_names=tuple(map(str, c.clause_names)), device=device,
        deviations={} if against is not None else candidate.deviations(contract), replay=replay,
        against=against_name, exact=exact, repeat=repeat, max_cells=max_cells, call_rows=call_rows,
        own=_own_contract(candidate, c) if against is None else None,
    )  # fmt: skip
    handling = handling or Handling()
    step = _Step(candidate, against, c, contract, device, exact, tally, should_stop, call_rows, handling)

    def counted() -> CheckResult:
        result = tally.result(seed=seed, command=command, isolated=worker is not None, options=options)
        result.summary.notes += [n for n in tally.run_notes if n not in result.summary.notes]
        result.summary.replay_target = target
        result.summary.expert_load = step.load.record()  # captured logits only; None otherwise
        return result

    # a fault of the harness in process reproduces in process (a worker's answer reaches the comparison re-made)
    handling.case_replay = lambda spec: replay(spec, None) + (" --no-isolate" if worker is None else "")
    handling.partial = counted
    loop = _pipelined if worker is not None else _in_process
    try:  # a KeyboardInterrupt outside a call (no signal handler installed) still keeps what ran
        loop(iter(specs), step, worker, progress)
    except _Stop:
        pass
    except KeyboardInterrupt:
        tally.interrupted = tally.interrupted or (should_stop() if should_stop else None) or "KeyboardInterrupt"
    handling.doing("counting the rows checked")
    result = counted()
    require_evidence(result.summary)
    if result.summary.mismatched_rows and not tally.interrupted:
        handling.doing("the diagnosis of the mismatched rows")
        result.summary.diagnosis = tally.diagnosis(c, command)
    return result


class _Step:
    """What the loops share: the stop check, the parent's half of a case, the tally."""

    def __init__(self, candidate, against, c, contract: str, device, exact, tally: Tally, should_stop, call_rows: int | None,
                 handling: Handling):  # fmt: skip
        self.candidate, self.against, self.c, self.device, self.exact = candidate, against, c, device, exact
        self.handling = handling
        self.call_rows, self.contract = call_rows, contract
        self.tally, self.should_stop = tally, should_stop
        self.load = ExpertLoad()  # per layer of captured logits
        notes = [x.coverage for x in (candidate, against) if x is not None and x.coverage]
        self.skip_reason = "not covered: " + ("; ".join(notes) if notes else "the candidate does not serve this shape or dtype")
        self.runner = CaseRunner(
            candidate.route_under(contract),  # as given: a name, or the .toml path
            other=against.route_under(contract) if against is not None else None,
            other_name=against.name if against is not None else "",
            repeat=tally.repeat,
            graph=device.startswith("cuda") and tally.repeat > 1,
            call_rows=call_rows,
        )

    def stopping(self) -> bool:
        reason = self.should_stop() if self.should_stop else None
        if reason:
            self.tally.interrupted = str(reason)
        return bool(reason)

    def interrupted(self, exc: BaseException) -> None:
        self.tally.interrupted = (self.should_stop() if self.should_stop else None) or str(exc) or "KeyboardInterrupt"
        raise _Stop from None

    def build(self, spec: CaseSpec):
        self.handling.doing("building the case's inputs", spec)
        with self.tally.timed("generation", spec.rows):
            return build_case(spec, self.device)

    def covered(self, case) -> bool:
        spec = case.spec
        shape = case.call_shape(call_size(spec, self.call_rows))
        try:
            return self.candidate.covers(contract=self.contract, **shape) and (
                self.against is None or self.against.covers(contract=self.contract, **shape))  # fmt: skip
        except Exception as exc:  # noqa: BLE001 -- a gate that raises ends the candidate's run
            self.tally.failed("gate_failed", spec, f"covered() raised {type(exc).__name__}: {exc}", fatal=True)
            raise _Stop from None

    def finish(self, case, call) -> None:
        """The parent's half of a case: the call's outcome against the oracle, into the tally."""
        tally, c, spec, doing = self.tally, self.c, case.spec, self.handling.doing
        doing("counting the case", spec, case)
        if call is None:
            tally.skipped(spec, self.skip_reason)
            return
        if call.summary_notes:  # notes on the whole check (torch.compile recompiles): the latest count stands
            tally.run_notes[:] = call.summary_notes
        result = call.result
        if isinstance(result, Fatal):
            tally.failed(result.kind, spec, result.message, result.traceback, fatal=True)
            raise _Stop
        tally.note(call.notes)
        if isinstance(result, Raised):  # an error of the candidate, with the first traceback and its replay line
            tally.failed("exception", spec, result.message, result.traceback or result.message, fatal=False)
            tally.raised(case)
            return
        doing("the oracle's expected answer", spec, case)
        with tally.timed("oracle", spec.rows):
            exp = expected_for(case, c)
        doing("the comparison", spec, case)
        with tally.timed("comparison", spec.rows):
            oracle_side = None
            malformed = isinstance(result, Malformed)  # it returned something that is not an answer: a validity finding
            actual = result.message if malformed else result.value
            if spec.source and not malformed and not spec.in_context:  # captured logits: the expert-load histograms, the
                # oracle's and the candidate's, of the file's rows once (a call context's case repeats rows)
                try:
                    self.load.add(spec.family, spec.experts, exp.ids, actual[1])
                except (TypeError, IndexError, RuntimeError, AttributeError):  # not a pair of tensors: the comparison reports it
                    pass
            if call.other is not None:
                # Which side the oracle agrees with, per row: tells a reader which of two
                # disagreeing routers breaks the contract (the clause names the difference).
                exp_oracle, exp = exp, exp.replaced(*for_comparison(call.other, exp))  # a dense one in the oracle's columns
                oracle_side = (agrees(exp_oracle, actual, c), agrees(exp_oracle, call.other, c), agrees(exp, actual, c))
            outcome = compare_case(case, exp, (actual,) if malformed else actual, c, deviations=tally.deviations,
                                   inputs_changed=call.changed, exact=self.exact, quiet=tally.quiet_kinds(spec))  # fmt: skip
            doing("the tally of the comparison", spec, case)
            # the diagnosis's sample: a dense answer's experts in the oracle's columns, as the comparison read them
            sampled = None if malformed else for_comparison(actual, exp)
            tally.compared(case, outcome, oracle_side=oracle_side, message=actual if malformed else None, actual=sampled)
            if call.differing_rows:
                tally.nondeterministic(call, case)


def _own_contract(candidate: Candidate, checked) -> tuple[str, dict[str, str]] | None:
    """The candidate's own contract and its declarations there, when it is the trainer's arithmetic (an mcore
    contract: a Megatron router under its family's inference contract) and not the checked one: the diagnosis scores
    that contract's arithmetic as one combination. Only the mcore contracts: a user callable claims aiter by default,
    which says nothing of its arithmetic, and the diagnosis calls this combination the trainer's arithmetic."""
    own = getattr(candidate, "contract", None)
    if not isinstance(own, str) or own == checked.name or own not in {m.name for m in oracle.MCORE_CONTRACTS}:
        return None
    return own, candidate.deviations(own)


def _in_process(specs, step: _Step, worker, progress) -> None:
    while not step.stopping():  # asked before the next spec is pulled: an endless plan is never drawn ahead
        spec = next(specs, None)
        if spec is None:
            return
        try:
            case = step.build(spec)
            call = None
            if step.covered(case):
                step.handling.doing("calling the candidate", spec, case)
                with step.tally.timed("candidate", spec.rows):
                    call = step.runner.run(case)
        except (Interrupted, KeyboardInterrupt) as exc:
            step.interrupted(exc)
        step.finish(case, call)
        if progress:
            progress.update(spec.rows, spec.family)


def _pipelined(specs, step: _Step, worker: Worker, progress) -> None:
    threads = torch.get_num_threads()
    if step.device == "cpu":  # the worker computes at the same time: take our share of the cores only
        torch.set_num_threads(cpu_thread_shares(threads)[0])
    try:
        _run_pipelined(specs, step, worker, progress)
    finally:
        torch.set_num_threads(threads)


def _run_pipelined(specs, step: _Step, worker: Worker, progress) -> None:
    tally = step.tally
    exhausted = False
    while True:
        while not exhausted and worker.pending < PIPELINE_DEPTH and not step.stopping():
            spec = next(specs, None)
            if spec is None:
                exhausted = True
            else:
                worker.submit(spec)
        if not worker.pending or tally.interrupted:
            return
        try:
            step.handling.doing("reading the worker's answer")
            waited = time.perf_counter()
            spec, call = worker.collect()
            tally.add_time("candidate", time.perf_counter() - waited, spec.rows)
        except WorkerFailure as failure:
            text = failure.message + (f"\n\nworker stderr (tail):\n{failure.stderr_tail}" if failure.stderr_tail else "")
            tally.failed(failure.kind, worker.current, failure.message, text, fatal=True, stderr_tail=failure.stderr_tail)
            raise _Stop from None
        except (Interrupted, KeyboardInterrupt) as exc:
            step.interrupted(exc)
        if call is None:  # not covered: nothing to build here
            tally.skipped(spec, step.skip_reason)
        else:
            step.finish(step.build(spec), call)
        if progress:
            progress.update(spec.rows, spec.family)


def uncovered_families(summary: Summary) -> list[str]:
    """The families of the run of which no row was checked (every case skipped: the gate served none)."""
    return [name for name, f in summary.families.items() if f.rows == 0]


def require_evidence(summary: Summary) -> Summary:
    """A PASS rests on checked rows: a check that checked no row, or no row of a family it ran, is ``not_covered``.

    Only a PASS is demoted (a FAIL, ERROR or INTERRUPTED already says more).
    The reason names each family left unchecked, with its rows skipped and
    why, so the terminal's note column and the reports say what is missing.
    """
    if summary.status is not Status.PASS:
        return summary
    missing = uncovered_families(summary)
    if summary.rows_checked and not missing:
        return summary
    if not summary.families:
        summary.reason = "no case ran: the plan was empty"
    else:
        why = sorted({r for name in missing for r in summary.families[name].skip_reasons}) or ["not covered"]
        skipped = sum(summary.families[name].rows_skipped for name in missing)
        summary.reason = (f"0 rows checked of famil{'y' if len(missing) == 1 else 'ies'} {', '.join(missing)} "
                          f"({skipped:,} rows skipped: {'; '.join(why)}); {summary.rows_checked:,} rows checked in all")  # fmt: skip
    summary.status = Status.NOT_COVERED
    return summary
