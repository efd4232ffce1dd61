"""The matrix's loop over its cases, one at a time: the case built once, every live candidate's answer and the
oracle's, then the comparisons (each candidate against the oracle as a check compares it, every pair, the split's two
sides) and why each side's rows depart from the contract. Nothing of a case is kept after it is compared."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..candidates import Candidate
from ..candidates.calling import Fatal, Malformed, Raised
from ..candidates.worker import WorkerFailure
from ..cases import CaseSpec
from ..reports.matrix_schema import MatrixReport, SplitView
from ..reports.schema import ErrorRecord, Status
from .containment import HarnessError, Handling, contained
from .matrix_member import Member
from .matrix_tally import PairTally
from .replay import replay_command, replay_pythonpath

__all__ = ["CaseLoop"]


def _own_contract(candidate: Candidate, c):
    """The contract ``candidate`` claims where it is another than the matrix's ``c`` of the same shape (a Megatron
    router's ``mcore-sigmoid`` under ``deepseek-v3``): the fields it differs in are causes it may show. None otherwise."""
    import oracle

    if not candidate.contract or candidate.contract == c.name:
        return None
    try:
        own = oracle.get_contract(candidate.contract)
    except (ValueError, OSError):
        return None
    # the same kind of router (grouped or not, with a bias or not); the scoring may differ: Megatron's post-softmax
    # router (mcore-softmax) takes the softmax over the k chosen where the serving contract takes it over all experts
    return own if (own.n_group > 1, own.has_bias) == (c.n_group > 1, c.has_bias) else None


@dataclass
class _Answers:
    """What the live candidates gave on one case: the outcome of each that answered (``calls``), each valid answer
    (``answers``), and for each candidate without one, why (``missing``)."""

    calls: dict = field(default_factory=dict)
    answers: dict = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)


class CaseLoop:
    """One case at a time: answers, the oracle, the comparisons."""

    def __init__(self, members: list[Member], sides: list[Member], c, contract: str, device: str, report: MatrixReport, *, show_row,
                 row_answers: dict, split: tuple[str, str, int] | None):  # fmt: skip
        self.members, self.sides, self.c, self.device, self.report = members, sides, c, device, report
        self.show_row, self.row_answers, self.split_spec = show_row, row_answers, split
        lookups = {m.name: m.target.lookup for m in (*members, *sides)}  # what get_candidate resolves, for replay lines

        def replay(spec, row, candidate, against):
            a, b = lookups[candidate], lookups.get(against) if against else None
            return replay_command(a, str(contract), device, spec, row, b, False, pythonpath=replay_pythonpath(a, b))

        self._replay_line = replay

        self._pools: dict[tuple, list] = {}  # (logits dtype, own contract) -> contracts.compare.departures.variant_pool
        self._own = {m.name: _own_contract(m.candidate, c) for m in (*members, *sides)}
        self.vs_oracle = {m.name: PairTally(m.name, "oracle", replay=replay) for m in members}
        self.pairs = {(a.name, b.name): PairTally(a.name, b.name, replay=replay) for i, a in enumerate(members) for b in members[i + 1 :]}
        self.split = PairTally(sides[0].name, sides[1].name, replay=replay) if sides else None

    def case(self, spec: CaseSpec) -> None:
        from ..cases import build_case
        from ..compare import agrees, expected_for

        c = self.c
        case = build_case(spec, self.device)
        self.report.rows_run += spec.rows
        got = self._answers(spec, case)
        if not got.calls:
            self._not_compared(spec.rows, got.missing)
            return
        exp = expected_for(case, c)
        ok = {name: agrees(exp, answer, c) for name, answer in got.answers.items()}
        if self.show_row is not None:
            self._keep_row(exp, got.answers)
        sides = self._against_oracle(spec, case, exp, got)  # name -> its rows' departures from the contract
        for m in self.sides:
            if m.name in got.answers:
                sides[m.name] = self._explain(m, case, exp, got.answers[m.name], None)
        for (a, b), tally in self.pairs.items():
            self._pair(tally, case, exp, got.answers, ok, got.missing, a, b, sides)
        if self.split is not None:
            self._pair(self.split, case, exp, got.answers, ok, got.missing, self.sides[0].name, self.sides[1].name, sides)

    def _answers(self, spec: CaseSpec, case) -> _Answers:
        """Every live candidate's call on the case, each answer read as a check reads it (validity, inputs changed); a
        candidate that fails for good ends here, the others go on."""
        from ..compare.verdicts import validity_failure

        got = _Answers()
        answers, missing, calls = got.answers, got.missing, got.calls
        for m in (*self.members, *self.sides):
            if not m.live:
                missing[m.name] = f"{m.name} stopped with an error" if m.record.status is Status.ERROR else f"{m.name} is unavailable here"
                continue
            try:
                call = m.answer(spec, case)
            except WorkerFailure as failure:
                m.fail(failure.kind, spec.replay_id, failure.message, failure.stderr_tail, self._replay(m.name, spec))
                missing[m.name] = f"{m.name} stopped with an error"
                continue
            except Exception as exc:  # noqa: BLE001 -- a covered() gate that raises ends this candidate's run
                m.fail("gate_failed", spec.replay_id, f"covered() raised {type(exc).__name__}: {exc}")
                missing[m.name] = f"{m.name} stopped with an error"
                continue
            if call is None:
                m.record.rows_skipped += spec.rows
                missing[m.name] = f"{m.name} does not cover the case"
                continue
            result = call.result
            if isinstance(result, Fatal):
                m.fail(result.kind, spec.replay_id, result.message, replay=self._replay(m.name, spec))
                missing[m.name] = f"{m.name} stopped with an error"
                continue
            if isinstance(result, Raised):
                m.record.rows_raised += spec.rows
                if m.record.error is None:
                    m.record.error = ErrorRecord(kind="exception", case=spec.replay_id, message=result.message,
                                                 traceback=result.traceback, replay=self._replay(m.name, spec))  # fmt: skip
                missing[m.name] = f"{m.name} raised"
                continue
            calls[m.name] = call
            problem = ("inputs were modified in place" if call.changed else
                       result.message if isinstance(result, Malformed) else validity_failure(result.value, case))  # fmt: skip
            if problem:
                m.record.rows_invalid += spec.rows
                missing[m.name] = f"{m.name} gave no valid answer"
            else:
                m.record.rows_answered += spec.rows
                answers[m.name] = result.value
        return got

    def _against_oracle(self, spec: CaseSpec, case, exp, got: _Answers) -> dict:
        """Each member against the oracle, as a check compares it (its declared deviations allowed), and why each of its
        rows departs from the contract: those departures by name. A fault of the harness in one candidate's comparison
        ends that candidate, the others go on."""
        from ..compare import compare_case
        from ..compare.departures import SideRows, pair_causes

        c, answers, missing, calls = self.c, got.answers, got.missing, got.calls
        sides = {}
        for m in self.members:
            tally = self.vs_oracle[m.name]
            if m.name not in calls:
                tally.not_compared(spec.rows, missing[m.name])
                continue
            call = calls[m.name]
            actual = (call.result.message,) if isinstance(call.result, Malformed) else call.result.value
            handling = Handling(stage="the comparison with the oracle", spec=spec, case=case, case_replay=lambda s, m=m: self._replay(m.name, s))
            outcome = contained(lambda: compare_case(case, exp, actual, c, deviations=m.candidate.deviations(c.name),
                                                     inputs_changed=call.changed, per_row=True), handling)  # fmt: skip
            if isinstance(outcome, HarnessError):  # this candidate's comparison: it ends, the others go on
                m.harness_failed(outcome)
                answers.pop(m.name, None)
                missing[m.name] = f"{m.name} stopped with an error"
                tally.not_compared(spec.rows, missing[m.name])
                continue
            tally.add(case, outcome, oracle_ids=exp.ids, oracle_weights=exp.weights, declared=True)
            if m.name in answers and outcome.per_row is not None:
                why = contained(lambda: self._explain(m, case, exp, answers[m.name], outcome.per_row), handling)
                if isinstance(why, HarnessError):
                    m.harness_failed(why)
                    answers.pop(m.name, None)
                    continue
                sides[m.name] = why
                tally.departures(pair_causes(outcome.per_row.differs, outcome.per_row.near_tie, why, SideRows.following(spec.rows)))
        return sides

    def ended_by(self, fault: HarnessError, spec: CaseSpec) -> None:
        """A fault of the harness on ``spec`` outside one candidate's comparison: every live candidate ends on it."""
        for m in (*self.members, *self.sides):
            if m.live:
                m.harness_failed(dataclasses.replace(fault, replay=self._replay(m.name, spec)))

    def _explain(self, m: Member, case, exp, answer, verdicts):
        """``m``'s departures from the contract on every row of the case (``contracts.compare.departures``)."""
        from ..compare.departures import explain_rows, variant_pool

        own = self._own[m.name]
        key = (case.scores.dtype, own.name if own is not None else None)
        if key not in self._pools:
            self._pools[key] = variant_pool(self.c, case.scores.dtype, own=own, device=self.device)
        own_declared = m.candidate.deviations(own.name) if own is not None else {}
        return explain_rows(case, exp, answer, self.c, declared=m.candidate.deviations(self.c.name), own=own, own_declared=own_declared,
                            device=self.device, pool=self._pools[key], verdicts=verdicts)  # fmt: skip

    def _pair(self, tally: PairTally, case, exp, answers, ok, missing, a: str, b: str, explained: dict) -> None:
        from ..compare import agrees, compare_case
        from ..compare.dense import for_comparison
        from ..compare.departures import pair_causes

        if a not in answers or b not in answers:
            tally.not_compared(case.spec.rows, missing.get(a) or missing[b])
            return
        # The side the oracle agrees with more on this case is the reference, so a row's clause names
        # how the other side departs from the contract (the counts are the same either way).
        flip = ok[a] is not None and ok[b] is not None and int(ok[a].sum()) > int(ok[b].sum())
        departs, reference = (b, a) if flip else (a, b)
        exp_ref = exp.replaced(*for_comparison(answers[reference], exp))  # a dense reference in the oracle's columns
        outcome = compare_case(case, exp_ref, answers[departs], self.c, deviations={}, per_row=True)
        sides = None
        same = agrees(exp_ref, answers[departs], self.c)
        if same is not None and ok[a] is not None and ok[b] is not None:
            differ = ~same
            sides = {"candidate": int((differ & ok[a]).sum()), "against": int((differ & ~ok[a] & ok[b]).sum()),
                     "neither": int((differ & ~ok[a] & ~ok[b]).sum())}  # fmt: skip
        tally.add(case, outcome, oracle_ids=exp.ids, oracle_weights=exp.weights, sides=sides, departs=departs, reference=reference)
        if a in explained and b in explained and outcome.per_row is not None:
            tally.departures(pair_causes(outcome.per_row.differs, outcome.per_row.near_tie, explained[a], explained[b]))

    def _not_compared(self, rows: int, missing: dict) -> None:
        for name, tally in self.vs_oracle.items():
            tally.not_compared(rows, missing[name])
        for (a, b), tally in self.pairs.items():
            tally.not_compared(rows, missing.get(a) or missing[b])
        if self.split is not None:
            a, b = self.split.pair.a, self.split.pair.b
            self.split.not_compared(rows, missing.get(a) or missing[b])

    def _keep_row(self, exp, answers) -> None:
        r = self.show_row
        self.row_answers["oracle"] = {"ids": exp.ids[r].tolist(), "weights": exp.weights[r].tolist()}
        for name, (w, ids) in answers.items():
            self.row_answers[name] = {"ids": ids[r].tolist(), "weights": w[r].tolist()}

    def _replay(self, name: str, spec: CaseSpec) -> str:
        return self._replay_line(spec, None, name, None)

    def finish(self, *, interrupted: str | None) -> None:
        for m in (*self.members, *self.sides):
            r = m.record
            if r.status in (Status.UNAVAILABLE, Status.ERROR):
                continue
            if r.rows_raised:
                r.status = Status.ERROR
            elif interrupted:
                r.status = Status.INTERRUPTED
            elif m.name in self.vs_oracle and self.vs_oracle[m.name].pair.undeclared_rows - self.vs_oracle[m.name].pair.near_tie_rows > 0:
                r.status = Status.FAIL
        self.report.candidates = [m.record for m in self.members]
        self.report.oracle = [t.pair for t in self.vs_oracle.values()]
        self.report.pairs = [t.pair for t in self.pairs.values()]
        if self.split is not None:
            below, above, m0 = self.split_spec
            self.report.split = SplitView(below=below, above=above, split=m0, pair=self.split.pair, members=[m.record for m in self.sides])
