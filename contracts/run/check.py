"""Check one candidate over planned cases: case -> candidate and oracle -> comparison -> tally.

A candidate runs in this process or, given a ``contracts.candidates.worker.Worker``,
in a worker process; either way a crash, hang, out-of-memory or CUDA error
ends its run with status ``error``, keeping every row checked before it. A
``should_stop`` callable that turns true (the command line's SIGINT/SIGTERM
handler) ends the run after the current case with status ``interrupted``.
"""

from __future__ import annotations

from typing import Callable, Iterable

import oracle

from ..candidates import Candidate
from ..candidates.calling import CaseRunner
from ..candidates.worker import Interrupted, Worker, WorkerFailure
from ..cases import CaseSpec, build_case
from ..compare import agrees, compare_case, expected_for
from ..reports.schema import CheckResult, ReplayTarget
from .replay import candidate_lookup, replay_command, replay_pythonpath
from .tally import Tally

__all__ = ["check_candidate"]


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
) -> CheckResult:
    """Check ``candidate`` on ``specs`` (any iterable; consumed once).

    ``worker``: a loaded ``Worker`` that runs the candidate (and ``against``)
    in its own process; without it they run here. ``repeat``: calls per
    case (differences are a ``determinism`` finding). ``lookup`` /
    ``against_lookup``: what ``get_candidate`` resolves to the candidates,
    for replay lines (default: ``candidate_lookup``).
    """
    c = oracle.get_contract(contract)
    against_name = against.name if against is not None else None

    target = ReplayTarget(lookup or candidate_lookup(candidate), (against_lookup or candidate_lookup(against)) if against is not None else None)
    target.pythonpath = replay_pythonpath(target.candidate, target.against)

    def replay(spec: CaseSpec, row: int | None) -> str:
        return replay_command(target.candidate, c.name, device, spec, row, target.against, exact, repeat, pythonpath=target.pythonpath)

    tally = Tally(
        candidate=candidate.name, contract=c.name, clause_names=c.clause_names, device=device,
        deviations={} if against is not None else candidate.deviations(contract), replay=replay,
        against=against_name, exact=exact, repeat=repeat, max_cells=max_cells,
    )  # fmt: skip
    runner = None
    if worker is None:
        runner = CaseRunner(
            candidate.route_under(contract),
            other=against.route_under(contract) if against is not None else None,
            other_name=against_name or "",
            repeat=repeat,
            graph=device.startswith("cuda") and repeat > 1,
        )
    specs_iter = iter(specs)
    summary_notes: list[str] = []  # the runner's notes on the whole check (torch.compile recompiles)
    try:  # a KeyboardInterrupt outside a call (no signal handler installed) still keeps what ran
        while True:
            reason = should_stop() if should_stop else None
            if reason:
                tally.interrupted = str(reason)
                break
            spec = next(specs_iter, None)
            if spec is None:
                break
            try:
                _check_case(spec, candidate, against, c, device, exact, runner, worker, tally, should_stop, summary_notes)
            except _Stop:
                break
            if progress:
                progress.update(spec.rows)
    except KeyboardInterrupt:
        tally.interrupted = tally.interrupted or (should_stop() if should_stop else None) or "KeyboardInterrupt"
    result = tally.result(seed=seed, command=command, isolated=worker is not None, options=options)
    result.summary.notes += [n for n in summary_notes if n not in result.summary.notes]
    result.summary.replay_target = target
    return result


def _covered(candidate: Candidate, against: Candidate | None, case) -> bool:
    spec = case.spec
    shape = dict(rows=spec.rows, experts=spec.experts, topk=spec.topk, dtype=case.scores.dtype, bias_dtype=case.bias.dtype)
    return candidate.covered(**shape) and (against is None or against.covered(**shape))


def _check_case(spec, candidate, against, c, device, exact, runner, worker, tally: Tally, should_stop, summary_notes: list) -> None:
    """Run one case through the candidate and the comparison; raise ``_Stop`` when the run must end."""
    try:
        case = build_case(spec, device)
        if worker is not None:
            call = worker.run(spec)
        else:
            try:
                covered = _covered(candidate, against, case)
            except Exception as exc:  # noqa: BLE001 -- a gate that raises ends the candidate's run
                tally.failed("gate_failed", spec, f"covered() raised {type(exc).__name__}: {exc}", fatal=True)
                raise _Stop from None
            call = runner.run(case) if covered else None
    except WorkerFailure as failure:
        text = failure.message + (f"\n\nworker stderr (tail):\n{failure.stderr_tail}" if failure.stderr_tail else "")
        tally.failed(failure.kind, spec, failure.message, text, fatal=True, stderr_tail=failure.stderr_tail)
        raise _Stop from None
    except (Interrupted, KeyboardInterrupt) as exc:
        tally.interrupted = (should_stop() if should_stop else None) or str(exc) or "KeyboardInterrupt"
        raise _Stop from None
    if call is None:
        tally.skipped(spec, "not covered: the candidate does not serve this shape or dtype")
        return
    if call.summary_notes:
        summary_notes[:] = call.summary_notes
    if call.fatal:
        tally.failed(call.fatal["kind"], spec, call.fatal["message"], call.fatal["traceback"], fatal=True)
        raise _Stop
    tally.note(call.notes)
    actual = call.actual
    if call.traceback is not None:  # it raised: an error of the candidate, with the first traceback and its replay line
        tally.failed("exception", spec, actual, call.traceback or actual, fatal=False)
        tally.raised(case)
        return
    exp = expected_for(case, c)
    oracle_side = None
    if call.other is not None:
        w, i = call.other
        # Which side the oracle agrees with, per row: tells a reader which of two
        # disagreeing routers breaks the contract (the clause names the difference).
        exp_oracle = exp
        exp = exp.replaced(w, i)
        oracle_side = (agrees(exp_oracle, actual, c), agrees(exp_oracle, call.other, c), agrees(exp, actual, c))
    if isinstance(actual, str):  # it returned something that is not an answer: a validity finding
        outcome = compare_case(case, exp, (actual,), c, deviations=tally.deviations, inputs_changed=call.changed, exact=exact)
        tally.compared(case, outcome, oracle_side=oracle_side, message=actual)
        return
    outcome = compare_case(case, exp, actual, c, deviations=tally.deviations, inputs_changed=call.changed, exact=exact)
    tally.compared(case, outcome, oracle_side=oracle_side)
    if call.differing_rows:
        tally.nondeterministic(call, case)
