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

Each candidate is a ``contracts.run.matrix_member.Member``; the loop over the cases is
``contracts.run.matrix_loop``, and a pair's counts ``contracts.run.matrix_tally``.

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

from ..candidates.batched import AT_LEAST, BELOW, batched_name
from ..candidates.worker import Interrupted
from ..cases.memory import reuse_freed_memory
from ..cases.plan import plan_bulk_rows
from ..cases.quick_look import QUICK_ROWS
from ..reports.bundle import write_matrix_bundle, write_matrix_json
from ..reports.matrix_schema import MatrixMember, MatrixReport
from ..reports.out_folder import prepare_out
from ..reports.schema import Status
from .checks import bundle_dirname, default_out, resolve
from .containment import HarnessError, Handling, contained
from .matrix_loop import CaseLoop
from .matrix_member import Member
from .options import MATRIX_DEFAULT_ROWS, CheckOptions, OptionError
from .planning import RunPlan, open_captured
from .progress import Progress

__all__ = ["DEFAULT_ROWS", "MatrixRun", "run_matrix"]

DEFAULT_ROWS = MATRIX_DEFAULT_ROWS


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



def _claimed_contract(members: list[Member]) -> str:
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
    o = _matrix_options(options, fields)
    import torch

    import oracle

    stop = stop or (lambda: None)
    _check_names(names, split)
    device = o.device or ("cuda" if torch.cuda.is_available() else "cpu")
    reuse_freed_memory()  # every case allocates the same large tensors again: reuse the pages, skip the faults
    side_names = [batched_name(split[0], BELOW, split[2]), batched_name(split[1], AT_LEAST, split[2])] if split else []
    members: list[Member] = []
    sides: list[Member] = []
    try:
        for name in [*names, *side_names]:
            target = resolve(name, role="--split" if name in side_names else "--candidate", isolate=o.isolate, timeout=o.timeout, stop=stop)
            cand = target.candidate
            record = MatrixMember(name=cand.name, status=Status.PASS, contract=cand.contract, device=device, description=cand.description)
            (sides if name in side_names else members).append(Member(target, record))
        contract = o.contract or _claimed_contract(members or sides)
        try:
            c = oracle.get_contract(contract)
        except (ValueError, OSError) as exc:
            raise OptionError(f"--contract {contract}: {exc}") from None
        shape = RunPlan(list(o.families) if o.families else None, o.rows, o.seed, o.experts, o.topk, None, o.replay, max_batch=o.max_batch,
                        captured=open_captured(o.logits, o.logits_bias, o.logits_sha256, list(o.families) if o.families else None),
                        quick=o.quick).shaped(c)  # fmt: skip
        if not shape.families:
            raise OptionError(f"none of the families {', '.join(shape.dropped)} applies to contract {c.name}; choose others with --families")
        label = "matrix-" + ("+".join(m.name for m in members) if members else f"split-{split[0]}-{split[1]}-{split[2]}")
        out_dir = prepare_out(o.out or default_out(bundle_dirname(label)[:100]), force=o.force)
        started = time.perf_counter()
        _open(c, contract, device, shape, o, everyone=(*members, *sides), stop=stop)
        specs, total = shape.specs(plan_bulk_rows(device), device)  # the same cases for all; each answers bulk ones in calls it serves
        report = MatrixReport(
            contract=c.name, device=device, rows=total, seed=o.seed, families=list(shape.families), experts=shape.experts,
            topk=shape.topk, weight_rtol=c.weight_rtol, weight_atol=c.weight_atol, command=o.command, quick=o.quick,
        )  # fmt: skip
        run = MatrixRun(out=out_dir, report=report)
        loop = CaseLoop(members, sides, c, contract, device, report, show_row=show_row, row_answers=run.row_answers, split=split)
        _run_cases(loop, specs, total, report, everyone=(*members, *sides), stop=stop, progress=o.progress, quick=o.quick)
        loop.finish(interrupted=report.interrupted)
        if shape.plan.captured is not None:  # no PASS on a field no captured case drew (contracts.cases.exercised)
            _not_covered(c, shape.specs(plan_bulk_rows(device), device)[0], everyone=(*members, *sides))
        report.duration_s = time.perf_counter() - started
        from ..reports.environment import environment

        report.environment = environment(device)
        _write(run, everyone=(*members, *sides), command=o.command)
        run.unavailable = [(m.name, m.record.reason) for m in (*members, *sides) if m.record.status is Status.UNAVAILABLE]
        return run
    finally:
        for m in (*members, *sides):
            m.close()


def _matrix_options(options: CheckOptions | None, fields: dict) -> CheckOptions:
    """The record a matrix runs under: ``options`` with ``fields`` in place of its own (the matrix's ``DEFAULT_ROWS``
    where neither gives rows); ``OptionError`` for an option of one candidate's check."""
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
    return o


def _check_names(names: list[str], split) -> None:
    """``OptionError`` for a candidate named twice, or fewer than two candidates (a split's sides count)."""
    if len(set(names)) != len(names):
        twice = sorted(n for n, k in Counter(names).items() if k > 1)
        raise OptionError(f"--candidate names {', '.join(twice)} more than once; name each candidate once")
    if len(names) + (2 if split else 0) < 2:
        raise OptionError("a matrix needs at least two candidates (--candidate A,B,...) or a --split A:B@M0")


def _open(c, contract: str, device: str, shape, o: CheckOptions, *, everyone: tuple[Member, ...], stop) -> None:
    """Each candidate's declared deviations under the matrix's contract, then each started and gated, until a stop."""
    for m in everyone:
        m.record.declared = m.candidate.deviations(c.name)
        if stop():
            break
        m.open(contract=contract, device=device, shape=shape, isolate=o.isolate, timeout=o.timeout, stop=stop)


def _run_cases(loop: CaseLoop, specs, total: int, report: MatrixReport, *, everyone: tuple[Member, ...], stop, progress: bool,
               quick: bool) -> None:  # fmt: skip
    """Every case through the loop until the plan ends, a stop, or no candidate is left; a fault of the harness on a case
    (not in one candidate's comparison) ends every live candidate on it."""
    with Progress("matrix", total, enabled=progress) as bar:
        bar.say(f"matrix: planned {total:,} rows" + (" (a quick look: a thin sample of the full plan, not a full check)" if quick else ""))
        try:
            for spec in specs:
                if stop():
                    report.interrupted = str(stop())
                    break
                if not any(m.live for m in everyone):
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


def _not_covered(c, specs, *, everyone: tuple[Member, ...]) -> None:
    """A PASS of captured logits whose cases drew some field of the contract only at its default is not covered."""
    from ..cases.exercised import unexercised, unexercised_reason

    fields = unexercised(c, specs)
    for m in everyone:
        if fields and m.record.status is Status.PASS:
            m.record.status, m.record.reason = Status.NOT_COVERED, unexercised_reason(fields)


def _write(run: MatrixRun, *, everyone: tuple[Member, ...], command: str) -> None:
    """The matrix bundle; where a renderer fails every member is ERROR and matrix.json alone says why."""
    out_dir, report = run.out, run.report
    written = contained(lambda: write_matrix_bundle(out_dir, report), Handling(stage="writing the matrix bundle", check_line=command or None))
    if isinstance(written, HarnessError):  # every member is ERROR, and matrix.json says why
        for m in everyone:
            if m.record.status is not Status.UNAVAILABLE:
                m.record.status, m.record.error = Status.ERROR, written.record()
        again = contained(lambda: write_matrix_json(out_dir, report), Handling(stage="writing matrix.json"))
        run.write_error = again if isinstance(again, HarnessError) else None
