"""The agreement matrix: several candidates on the same cases, every pair compared, and each against the oracle.

``run_matrix`` is the library behind ``python -m contracts matrix``. Data
flows one way, one case at a time: the plan's spec -> the case, built once
-> every candidate's answer (each candidate runs once per case, here or in
its worker) and the oracle's -> the comparisons -> counts. Nothing of a
case is kept after it is compared, so the row budget costs no memory.

Comparisons use ``contracts.compare.compare_case`` as a check does:

- a pair ``a``, ``b`` (``a`` before ``b`` in the ``--candidate`` order):
  ``b``'s answer is the expected one (``Expected.replaced``), no deviation
  is declared, so every row where ``a`` and ``b`` route differently counts:
  ids exactly (in the contract's output order), weights within the
  contract's tolerance. Near ties (rows that differ only among experts
  whose ranking values are within both implementations' rounding) count as
  differing too, under the cause ``near_tie``: the two engines do route
  that token to other experts. The cause of a row is its primary clause,
  computed from the oracle's values: how ``a`` differs from ``b``. For the
  rows that differ, the side the oracle takes (``oracle_agrees``).
- a candidate against the oracle: as ``check`` compares it, its declared
  deviations allowed (``declared_rows``); its status is the check's.
- why (``MatrixPair.departures``, the train-versus-serve table): each
  candidate's rows are explained once per case against the oracle
  (``contracts.compare.departures.explain_rows``: follows, a near tie, a
  declared clause, the fewest fields of its own contract or of the
  diagnosis' variants that give the row, or unexplained), and a pair's
  rows routed differently are counted by the two sides' explanations.

A candidate that does not run here is recorded with its reason; one that
crashes, hangs or raises is an error in the report, and the others go on.
Isolation is decided as ``check`` decides it (``should_isolate``: GPU
runs, third-party and GPU-only candidates run in a worker process); every
engine candidate is third-party. The prefill/decode view (``split``) adds
two derived candidates, ``A@M<M0`` and ``B@M>=M0``
(``contracts.candidates.batched``), answering the same cases, and compares
them as one more pair.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..candidates import Candidate
from ..candidates.batched import AT_LEAST, BELOW, batched_name
from ..candidates.calling import Fatal, Malformed, Raised
from ..candidates.worker import Interrupted, Worker, WorkerFailure
from ..cases import CaseSpec
from ..cases.memory import reuse_freed_memory
from ..cases.plan import plan_bulk_rows
from ..cases.quick_look import QUICK_ROWS
from ..reports.bundle import write_matrix_bundle, write_matrix_json
from ..reports.matrix_schema import MatrixMember, MatrixPair, MatrixReport, PairExample, PairFamily, SplitView
from ..reports.out_folder import prepare_out
from ..reports.schema import AgainstSides, ErrorRecord, Status
from .checks import Target, bundle_dirname, default_out, resolve, should_isolate
from .containment import HarnessError, Handling, contained
from .options import MATRIX_DEFAULT_ROWS, CheckOptions, OptionError
from .planning import RunPlan, open_captured
from .progress import Progress
from .replay import replay_command, replay_pythonpath

__all__ = ["DEFAULT_ROWS", "EXAMPLES_PER_CAUSE", "EXAMPLES_PER_PAIR", "MatrixRun", "run_matrix"]

DEFAULT_ROWS = MATRIX_DEFAULT_ROWS
EXAMPLES_PER_PAIR = 8
EXAMPLES_PER_CAUSE = 2


@dataclass
class MatrixRun:
    out: Path
    report: MatrixReport
    unavailable: list[tuple[str, str]] = field(default_factory=list)
    row_answers: dict[str, dict] = field(default_factory=dict)  # with show_row: name -> {"ids", "weights"} (and "oracle")
    write_error: HarnessError | None = None  # not even matrix.json could be written (contracts.run.containment)

    @property
    def errored(self) -> bool:
        members = [*self.report.candidates, *(self.report.split.members if self.report.split else ())]
        return self.write_error is not None or any(m.status is Status.ERROR for m in members)


# ---------------------------------------------------------------- one candidate's side


class _Member:
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


# ---------------------------------------------------------------- counting one pair


class _PairTally:
    def __init__(self, a: str, b: str, *, replay: Callable[[CaseSpec, int, str, str | None], str]):
        self.pair = MatrixPair(a=a, b=b)
        self.replay = replay
        self._sides = Counter()
        self._shown = Counter()

    def departures(self, causes) -> None:
        """Add one case's ``PairDeparture`` counts (``contracts.compare.departures.pair_causes``) to the pair's."""
        p = self.pair
        merged = {(d.departs, d.a_key, d.b_key, d.a, d.b): d for d in p.departures}
        for d in causes:
            key = (d.departs, d.a_key, d.b_key, d.a, d.b)
            if key in merged:
                merged[key].rows += d.rows
            else:
                merged[key] = dataclasses.replace(d)
            if d.unexplained:
                p.unexplained_rows += d.rows
        p.departures = sorted(merged.values(), key=lambda d: -d.rows)

    def not_compared(self, rows: int, why: str) -> None:
        p = self.pair
        p.rows_not_compared += rows
        p.not_compared[why] = p.not_compared.get(why, 0) + rows

    def add(self, case, outcome, *, oracle_ids, oracle_weights, declared: bool = False, sides=None, departs: str | None = None,
            reference: str | None = None) -> None:  # fmt: skip
        """One case's comparison of ``departs`` (the actual side, default a) against ``reference`` (a candidate; None: the oracle)."""
        p, v = self.pair, outcome.verdict_counts
        near = v.get("near_tie", 0)
        differing = v.get("mismatch", 0) + v.get("expected", 0) + near
        causes = Counter(outcome.clause_rows) + Counter(outcome.expected_rows) + Counter({"near_tie": near})
        fam = p.families.setdefault(case.family, PairFamily())
        for counts in (p, fam):
            counts.rows_compared += outcome.rows
            counts.rows_differing += differing
            counts.near_tie_rows += near
            counts.causes = dict(Counter(counts.causes) + causes)
        if declared:
            p.declared_rows += v.get("expected", 0)
        p.clauses_broken = dict(Counter(p.clauses_broken) + Counter(outcome.clauses_broken) + Counter(outcome.expected_clauses))
        if sides is not None:
            self._sides.update(sides)
            p.oracle_agrees = AgainstSides(**{k: self._sides[k] for k in ("candidate", "against", "neither")})
        for d in outcome.rows_detail:
            self._example(case, d, oracle_ids, oracle_weights, departs or p.a, reference)

    def _example(self, case, d: dict, oracle_ids, oracle_weights, departs: str, reference: str | None) -> None:
        cause = d["clause"] if d["verdict"] != "near_tie" else "near_tie"
        if len(self.pair.examples) >= EXAMPLES_PER_PAIR or self._shown[cause] >= EXAMPLES_PER_CAUSE or d.get("actual_ids") is None:
            return
        self._shown[cause] += 1
        row = d["row"]
        actual, expected = (d["actual_ids"], d["actual_weights"]), (d["expected_ids"], d["expected_weights"])
        (a_ids, a_w), (b_ids, b_w) = (actual, expected) if departs == self.pair.a else (expected, actual)
        self.pair.examples.append(PairExample(
            family=case.family, case=case.spec.replay_id, row=row, cause=cause, reason=d["reason"], departs=departs,
            a_ids=a_ids, b_ids=b_ids, a_weights=a_w, b_weights=b_w,
            oracle_ids=oracle_ids[row].tolist(), oracle_weights=oracle_weights[row].tolist(),
            renormalize=case.renormalize, routed_scaling_factor=case.routed_scaling_factor,
            replay=self.replay(case.spec, row, departs, reference),
        ))  # fmt: skip


# ---------------------------------------------------------------- the run


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


def _claimed_contract(members: list[_Member]) -> str:
    claims = Counter(m.candidate.contract for m in members)
    return max(claims, key=lambda name: (claims[name], -list(claims).index(name))) if claims else "aiter"


def run_matrix(
    names: list[str],
    options: CheckOptions | None = None,
    *,
    split: tuple[str, str, int] | None = None,
    show_row: int | None = None,
    stop: Callable[[], object] | None = None,
    **fields,
) -> MatrixRun:
    """Run ``names`` (and the two sides of ``split``) on the same cases and write the matrix bundle under ``options.out``.

    ``options``: the ``CheckOptions`` record a check takes (or its fields as keywords, which replace the record's),
    read as ``check`` reads it: ``contract`` a name or a ``.toml`` path, default the one most of the candidates claim;
    the cases take its shape (``experts``/``topk`` where not given), groups, bias and families. ``device``: one for all
    (default cuda when torch sees a GPU). ``replay``: ``FAMILY:SEED:ROWS``, that one case only; ``show_row`` keeps
    every answer's row of it (``MatrixRun.row_answers``). ``logits`` (``logits_bias``, ``logits_sha256``): the rows of
    a captured logits file instead of the families. ``max_batch``: the pinned sweep's largest batch. ``quick``: the quick
    look of ``check --quick``, marked so in matrix.json and the table. ``rows`` defaults to the matrix's ``DEFAULT_ROWS``.
    The options of one candidate's check (``against``, ``exact``, ``repeat``, ``shard``, ``allow_not_covered``) are refused.
    """
    quick = fields.get("quick", options.quick if options else False)
    if options is None and "rows" not in fields:
        fields["rows"] = QUICK_ROWS if quick else DEFAULT_ROWS
    try:
        o = dataclasses.replace(options or CheckOptions(), **fields)
    except TypeError as exc:
        raise OptionError(f"run_matrix: {exc}; the options are the fields of contracts.run.options.CheckOptions") from None
    single = {name: value for name, value in (("against", o.against), ("exact", o.exact), ("repeat", o.repeat != 1),
                                              ("shard", o.shard), ("allow_not_covered", o.allow_not_covered)) if value}  # fmt: skip
    if single:
        raise OptionError(f"run_matrix: {', '.join(single)} belong to one candidate's check, not to a matrix; drop them")
    contract, rows, seed, device, experts, topk, replay = o.contract, o.rows, o.seed, o.device, o.experts, o.topk, o.replay
    families = list(o.families) if o.families else None
    isolate, timeout, out, force, progress, command = o.isolate, o.timeout, o.out, o.force, o.progress, o.command
    max_batch, logits, logits_bias, logits_sha256 = o.max_batch, o.logits, o.logits_bias, o.logits_sha256
    import torch

    import oracle

    stop = stop or (lambda: None)
    if len(set(names)) != len(names):
        twice = sorted(n for n, k in Counter(names).items() if k > 1)
        raise OptionError(f"--candidate names {', '.join(twice)} more than once; name each candidate once")
    if len(names) + (2 if split else 0) < 2:
        raise OptionError("a matrix needs at least two candidates (--candidate A,B,...) or a --split A:B@M0")
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    reuse_freed_memory()  # every case allocates the same large tensors again: reuse the pages, skip the faults
    side_names = [batched_name(split[0], BELOW, split[2]), batched_name(split[1], AT_LEAST, split[2])] if split else []
    members: list[_Member] = []
    sides: list[_Member] = []
    try:
        for name in [*names, *side_names]:
            target = resolve(name, role="--split" if name in side_names else "--candidate", isolate=isolate, timeout=timeout, stop=stop)
            cand = target.candidate
            record = MatrixMember(name=cand.name, status=Status.PASS, contract=cand.contract, device=device, description=cand.description)
            (sides if name in side_names else members).append(_Member(target, record))
        contract = contract or _claimed_contract(members or sides)
        try:
            c = oracle.get_contract(contract)
        except (ValueError, OSError) as exc:
            raise OptionError(f"--contract {contract}: {exc}") from None
        shape = RunPlan(families, rows, seed, experts, topk, None, replay, max_batch=max_batch,
                      captured=open_captured(logits, logits_bias, logits_sha256, families), quick=quick).shaped(c)
        if not shape.families:
            raise OptionError(f"none of the families {', '.join(shape.dropped)} applies to contract {c.name}; choose others with --families")
        label = "matrix-" + ("+".join(m.name for m in members) if members else f"split-{split[0]}-{split[1]}-{split[2]}")
        out_dir = prepare_out(out or default_out(bundle_dirname(label)[:100]), force=force)
        started = time.perf_counter()
        for m in (*members, *sides):
            m.record.declared = m.candidate.deviations(c.name)
            if stop():
                break
            m.open(contract=contract, device=device, shape=shape, isolate=isolate, timeout=timeout, stop=stop)
        specs, total = shape.specs(plan_bulk_rows(device), device)  # the same cases for all; each answers bulk ones in calls it serves
        report = MatrixReport(
            contract=c.name, device=device, rows=total, seed=seed, families=list(shape.families), experts=shape.experts,
            topk=shape.topk, weight_rtol=c.weight_rtol, weight_atol=c.weight_atol, command=command, quick=quick,
        )  # fmt: skip
        run = MatrixRun(out=out_dir, report=report)
        loop = _Loop(members, sides, c, contract, device, report, show_row=show_row, run=run, split=split)
        with Progress("matrix", total, enabled=progress) as bar:
            bar.say(f"matrix: planned {total:,} rows" + (" (a quick look: a thin sample of the full plan, not a full check)" if quick else ""))
            try:
                for spec in specs:
                    if stop():
                        report.interrupted = str(stop())
                        break
                    if not any(m.live for m in (*members, *sides)):
                        break
                    handling = Handling(stage="the matrix's handling of the case", spec=spec)
                    fault = contained(lambda: loop.case(spec), handling)  # the harness's own fault: contracts.run.containment
                    if isinstance(fault, HarnessError):  # no candidate can be compared on the case: each live one ends on it
                        loop.ended_by(fault, spec)
                        break
                    bar.update(spec.rows, spec.family)
            except (Interrupted, KeyboardInterrupt):
                report.interrupted = str(stop() or "KeyboardInterrupt")
            bar.close("interrupted" if report.interrupted else "done")
        loop.finish(interrupted=report.interrupted)
        if shape.plan.captured is not None:  # no PASS on a field no captured case drew (contracts.cases.exercised)
            from ..cases.exercised import unexercised, unexercised_reason

            fields = unexercised(c, shape.specs(plan_bulk_rows(device), device)[0])
            for m in (*members, *sides):
                if fields and m.record.status is Status.PASS:
                    m.record.status, m.record.reason = Status.NOT_COVERED, unexercised_reason(fields)
        report.duration_s = time.perf_counter() - started
        from ..reports.environment import environment

        report.environment = environment(device)
        written = contained(lambda: write_matrix_bundle(out_dir, report), Handling(stage="writing the matrix bundle", check_line=command or None))
        if isinstance(written, HarnessError):  # every member is ERROR, and matrix.json says why
            for m in (*members, *sides):
                if m.record.status is not Status.UNAVAILABLE:
                    m.record.status, m.record.error = Status.ERROR, written.record()
            again = contained(lambda: write_matrix_json(out_dir, report), Handling(stage="writing matrix.json"))
            run.write_error = again if isinstance(again, HarnessError) else None
        run.unavailable = [(m.name, m.record.reason) for m in (*members, *sides) if m.record.status is Status.UNAVAILABLE]
        return run
    finally:
        for m in (*members, *sides):
            m.close()


class _Loop:
    """One case at a time: answers, the oracle, the comparisons."""

    def __init__(self, members: list[_Member], sides: list[_Member], c, contract: str, device: str, report: MatrixReport, *, show_row,
                 run: MatrixRun, split: tuple[str, str, int] | None):  # fmt: skip
        self.members, self.sides, self.c, self.device, self.report = members, sides, c, device, report
        self.show_row, self.run, self.split_spec = show_row, run, split
        lookups = {m.name: m.target.lookup for m in (*members, *sides)}  # what get_candidate resolves, for replay lines

        def replay(spec, row, candidate, against):
            a, b = lookups[candidate], lookups.get(against) if against else None
            return replay_command(a, str(contract), device, spec, row, b, False, pythonpath=replay_pythonpath(a, b))

        self._replay_line = replay

        self._pools: dict[tuple, list] = {}  # (logits dtype, own contract) -> contracts.compare.departures.variant_pool
        self._own = {m.name: _own_contract(m.candidate, c) for m in (*members, *sides)}
        self.vs_oracle = {m.name: _PairTally(m.name, "oracle", replay=replay) for m in members}
        self.pairs = {(a.name, b.name): _PairTally(a.name, b.name, replay=replay) for i, a in enumerate(members) for b in members[i + 1 :]}
        self.split = _PairTally(sides[0].name, sides[1].name, replay=replay) if sides else None

    def case(self, spec: CaseSpec) -> None:
        from ..cases import build_case
        from ..compare import agrees, compare_case, expected_for
        from ..compare.departures import SideRows, pair_causes
        from ..compare.verdicts import validity_failure

        c = self.c
        case = build_case(spec, self.device)
        self.report.rows_run += spec.rows
        answers, missing, calls = {}, {}, {}
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
        if not calls:
            self._not_compared(spec.rows, missing)
            return
        exp = expected_for(case, c)
        ok = {name: agrees(exp, answer, c) for name, answer in answers.items()}
        sides = {}  # name -> its rows' departures from the contract (contracts.compare.departures)
        if self.show_row is not None:
            self._keep_row(exp, answers)
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
        for m in self.sides:
            if m.name in answers:
                sides[m.name] = self._explain(m, case, exp, answers[m.name], None)
        for (a, b), tally in self.pairs.items():
            self._pair(tally, case, exp, answers, ok, missing, a, b, sides)
        if self.split is not None:
            self._pair(self.split, case, exp, answers, ok, missing, self.sides[0].name, self.sides[1].name, sides)

    def ended_by(self, fault: HarnessError, spec: CaseSpec) -> None:
        """A fault of the harness on ``spec`` outside one candidate's comparison: every live candidate ends on it."""
        for m in (*self.members, *self.sides):
            if m.live:
                m.harness_failed(dataclasses.replace(fault, replay=self._replay(m.name, spec)))

    def _explain(self, m: _Member, case, exp, answer, verdicts):
        """``m``'s departures from the contract on every row of the case (``contracts.compare.departures``)."""
        from ..compare.departures import explain_rows, variant_pool

        own = self._own[m.name]
        key = (case.scores.dtype, own.name if own is not None else None)
        if key not in self._pools:
            self._pools[key] = variant_pool(self.c, case.scores.dtype, own=own, device=self.device)
        own_declared = m.candidate.deviations(own.name) if own is not None else {}
        return explain_rows(case, exp, answer, self.c, declared=m.candidate.deviations(self.c.name), own=own, own_declared=own_declared,
                            device=self.device, pool=self._pools[key], verdicts=verdicts)  # fmt: skip

    def _pair(self, tally: _PairTally, case, exp, answers, ok, missing, a: str, b: str, explained: dict) -> None:
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
        self.run.row_answers["oracle"] = {"ids": exp.ids[r].tolist(), "weights": exp.weights[r].tolist()}
        for name, (w, ids) in answers.items():
            self.run.row_answers[name] = {"ids": ids[r].tolist(), "weights": w[r].tolist()}

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
