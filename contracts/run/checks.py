"""Check several candidates in one run: resolve them, decide isolation, write each bundle as it finishes.

``run_checks`` is the library behind ``python -m contracts check``, the
nightly and the pytest plugin; it takes one ``CheckOptions`` record (or its
fields as keywords) and returns a ``CheckRun`` (the results, what was unavailable, what was not
started). It never prints except through the progress lines it is asked for.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..candidates import Candidate, CandidateLoadError, all_candidates, get_candidate
from ..candidates.registry import device_for
from ..candidates.worker import Interrupted, Worker, WorkerFailure, load_error_message
from ..cases.coverage import coverage_of
from ..cases.launch_points import candidate_points
from ..cases.plan import bulk_rows_for, plan_bulk_rows
from ..reports.bundle import write_check_bundle, write_index, write_plain_bundle
from ..reports.environment import environment
from ..reports.out_folder import prepare_out
from ..reports.schema import CheckResult, ErrorRecord, Status, Summary
from .candidate_check import check_candidate
from .containment import HarnessError, Handling, contained, ended_by, write_contained
from .world import ONE_PROCESS
from .options import DEFAULT_ROWS, DEFAULT_TIMEOUT_S, CheckOptions, OptionError
from .planning import RunPlan, open_captured, planned_line, quick_look
from .progress import Progress
from .replay import command_line, replay_pythonpath

__all__ = ["DEFAULT_ROWS", "DEFAULT_TIMEOUT_S", "CheckOptions", "CheckRun", "Target", "bundle_dirname", "device_for", "run_checks", "should_isolate"]

@dataclass
class Target:
    candidate: Candidate
    lookup: str  # what a worker passes to get_candidate
    worker: Worker | None = None  # already started: it imported the candidate to describe it


@dataclass
class CheckRun:
    out: Path
    results: list[CheckResult] = field(default_factory=list)
    unavailable: list[tuple[str, str]] = field(default_factory=list)  # asked for by name, with the reason
    not_started: list[str] = field(default_factory=list)
    interrupted: str | None = None
    several: bool = False
    index_error: HarnessError | None = None  # the harness failed to write index.json (the bundles are written)

    @property
    def summaries(self) -> list[Summary]:
        return [r.summary for r in self.results]

    @property
    def failed(self) -> bool:
        return self.index_error is not None or any(s.status in (Status.FAIL, Status.ERROR) for s in self.summaries)

    @property
    def not_covered(self) -> list[str]:
        """The candidates whose check checked no row, or no row of a family it ran (status ``not_covered``)."""
        return [s.label for s in self.summaries if s.status is Status.NOT_COVERED]


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def bundle_dirname(name: str) -> str:
    """A folder name for a candidate: safe characters only, never ``..`` or absolute, and distinct for distinct names.

    Names that are already safe stay as they are; others get their unsafe
    characters replaced and a short hash of the real name appended
    (``a:b_c`` and ``a_b:c`` become two folders).
    """
    safe = _UNSAFE.sub("_", name).lstrip(".") or "candidate"
    if safe != name:
        safe = f"{safe[:80]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"
    return safe


def default_out(label: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return Path("reports") / f"{stamp}-{bundle_dirname(label)}"


def should_isolate(isolate: bool | None, candidate: Candidate, device: str, against: Candidate | None) -> bool:
    """``isolate`` if given; else True: every call of a candidate runs in a worker process by default, so that
    no exit, crash or hang of it (``sys.exit``, ``os._exit``, libc ``_exit``, a segfault) can end the harness
    or pass for a success. In-process only on request (``--no-isolate``; ``docs/robustness.md``), or for a
    candidate a worker cannot find: one a program registered at run time with no ``origin`` to import (a
    library caller's own object; the command line only names built-ins, entry points and ``module:attr``)."""
    if isolate is not None:
        return isolate
    return all(c.origin for c in (candidate, against) if c is not None)


def _contract_name(contract: str) -> str:
    import oracle

    return oracle.get_contract(contract).name


def _runs_in_worker(*_args, **_kwargs):
    raise RuntimeError("this candidate was imported in a worker process only; run it with isolation on")


def resolve(name: str, *, role: str, isolate: bool | None, timeout: float, stop) -> Target:
    """A candidate by name or ``module:attr``. With isolation allowed, a ``module:attr`` is imported in a worker only."""
    known = all_candidates()
    if name in known:
        return Target(known[name], name)
    if ":" in name and isolate is not False:
        worker = Worker(name, timeout=timeout, should_stop=stop)
        meta = worker.describe()  # CandidateLoadError if it does not import
        proxy = Candidate(
            name=meta["name"], route=_runs_in_worker, contract=meta["contract"], devices=tuple(meta["devices"]),
            description=meta["description"], expected_deviations=meta["expected_deviations"],
            third_party=meta["third_party"], origin=meta["origin"], coverage=meta.get("coverage", ""),
        )  # fmt: skip
        return Target(proxy, name, worker)
    try:
        return Target(get_candidate(name), name)
    except CandidateLoadError as exc:
        message = load_error_message(exc)
        raise CandidateLoadError(message if role in message else f"{role}: {message}") from None


def _not_run(candidate: Candidate, contract: str, device: str, *, seed: int, command: str, reason: str | None = None,
             error: ErrorRecord | None = None) -> CheckResult:  # fmt: skip
    """The record of a check that did not run: unavailable here (``reason``) or failed to load (``error``)."""
    summary = Summary(
        candidate=candidate.name, contract=contract, device=device,
        status=Status.ERROR if error else Status.UNAVAILABLE, reason=reason, error=error,
        environment=environment(device), seed=seed, command=command,
    )  # fmt: skip
    return CheckResult(summary)


@dataclass(frozen=True)
class _NotRun:
    """A check that ends before its first case: its record, and why it is unavailable (None: it failed to load)."""

    result: CheckResult
    why: str | None


@dataclass(frozen=True)
class _Loaded:
    """A candidate ready for its check: its worker (None: it runs in this process), the most rows one of its calls gets
    in a bulk case (its gates'), and the switch points its own modules publish."""

    worker: Worker | None
    call_rows: int | None
    points: tuple[int, ...]


def _check_one(target: Target, against: Target | None, o: CheckOptions, *, plan: RunPlan, stop,
               handling: Handling) -> tuple[CheckResult, str | None]:  # fmt: skip
    """Check one candidate; ``(result, unavailable reason or None)``. ``handling``: see ``contracts.run.containment``."""
    import oracle

    contract, exact, repeat, command = o.contract, o.exact, o.repeat, o.command
    cand = target.candidate
    try:
        c = oracle.get_contract(contract or cand.contract)
    except (ValueError, OSError) as exc:
        raise OptionError(f"--contract {contract or cand.contract}: {exc}") from None
    # a plain callable claims no contract: say which one it was checked under, in the summary and so on the terminal
    assumed = None if contract else (f"no --contract given: checked under {c.name}, the default for a plain callable; "
                                     f"pass --contract NAME ({', '.join(oracle.BUILTIN_CONTRACTS)} or a .toml file) for another"
                                     if cand.description == f"user callable {cand.origin}" else None)  # fmt: skip
    contract = contract or cand.contract  # the name, or the .toml path a worker loads again
    shape = plan.shaped(c)
    device = device_for(cand, o.device)
    against_c = against.candidate if against else None
    loaded = _load(target, against, o, c, contract=contract, shape=shape, device=device, plan=plan, stop=stop)
    if isinstance(loaded, _NotRun):
        return loaded.result, loaded.why
    worker, call_rows, points = loaded.worker, loaded.call_rows, loaded.points
    if not shape.families:
        why = f"none of the families {', '.join(shape.dropped)} applies to contract {c.name}"
        return _not_run(cand, oracle.contract_label(c), device, seed=plan.seed, command=command, reason=why), why
    bulk = plan_bulk_rows(device)
    specs, total = shape.specs(bulk, device, points)
    counted = shape.counted(bulk, device, points, call_rows)  # the whole plan, its bulk cases counted: None for a shard, a replay
    # a second, lazy pass over the specs (no tensors); a captured file's rows are what they are
    covers = (coverage_of(counted.representatives if counted else shape.specs(bulk, device, points)[0], call_rows)
              if plan.captured is None else None)  # the calls' sizes
    quick = quick_look(plan, c, bulk, device, points, call_rows, counted) if plan.quick else None
    options = {**o.recorded, "bulk_rows": bulk, "max_batch": shape.max_batch(device), "call_rows": call_rows, "families": shape.families, "experts": shape.experts, "topk": shape.topk,
               "groups": list(shape.groups), "contract_source": contract if str(contract).endswith(".toml") else None, "coverage": covers,
               "candidate_switch_points": list(points)}  # fmt: skip
    label = cand.name + (f" vs {against_c.name}" if against_c else "")
    with Progress(f"{label} [contract {oracle.contract_label(c)}]", total, enabled=o.progress) as bar:  # every line names the contract
        bar.say(f"{bar.label}: {planned_line(plan, counted, total)}")  # before the run: what --rows and the pins make
        for line in quick.left_out() if quick else ():
            bar.say(f"{bar.label}: {line}")
        result = check_candidate(
            cand, specs, contract=contract, device=device, against=against_c, exact=exact, seed=plan.seed,
            command=command, progress=bar, repeat=repeat, worker=worker, should_stop=stop, options=options, call_rows=call_rows,
            lookup=target.lookup, against_lookup=against.lookup if against else None, handling=handling,
        )  # fmt: skip
        bar.close(result.summary.status.word, summary=result.summary)
    _add_notes(result.summary, c, shape, plan, quick=quick, assumed=assumed, bulk=bulk, device=device, points=points)
    return result, None


def _load(target: Target, against: Target | None, o: CheckOptions, c, *, contract: str, shape, device: str, plan: RunPlan,
          stop) -> _Loaded | _NotRun:  # fmt: skip
    """Start ``target`` where it runs (a worker, or this process) and ask its gates, as its check needs them; a
    ``_NotRun`` where it does not run on this device or host, or fails to load."""
    import torch

    import oracle

    cand, kind = target.candidate, device.split(":")[0]
    against_c = against.candidate if against else None

    def not_run(why: str | None = None, error: ErrorRecord | None = None) -> _NotRun:
        return _NotRun(_not_run(cand, oracle.contract_label(c), device, seed=plan.seed, command=o.command, reason=why, error=error), why)

    if kind not in cand.devices:
        return not_run(f"{cand.name} runs on {'/'.join(cand.devices)}, not on {kind}")
    worker = None
    if should_isolate(o.isolate, cand, device, against_c):
        if kind == "cuda" and not torch.cuda.is_available():
            return not_run(f"{cand.name} runs on {'/'.join(cand.devices)}, and torch {torch.__version__} sees no GPU on this host")
        worker = target.worker or Worker(target.lookup, timeout=o.timeout, should_stop=stop)
        target.worker = worker
        try:
            ok, why = worker.load(contract=contract, device=device, against=against.lookup if against else None, repeat=o.repeat,
                                  origin=cand.origin, experts=shape.experts, topk=shape.topk)  # fmt: skip
            call_rows, points = worker.call_rows, worker.switch_points
        except WorkerFailure as failure:
            detail = failure.message + (f"\n\nworker stderr (tail):\n{failure.stderr_tail}" if failure.stderr_tail else "")
            return not_run(error=ErrorRecord(kind=failure.kind, case=f"loading {target.lookup}", message=failure.message, traceback=detail))
    else:
        ok, why = cand.available(device)
        if ok and against_c is not None:
            ok, why2 = against_c.available(device)
            why = why if ok else f"--against {against_c.name}: {why2}"
        call_rows, points = None, ()
        if ok:
            points = candidate_points([c_.origin for c_ in (cand, against_c) if c_ is not None], shape.experts, shape.topk, contract)

            def covered(**shape):
                return cand.covers(contract=contract, **shape) and (against_c is None or against_c.covers(contract=contract, **shape))

            caps = [m for m in (cand.max_rows, getattr(against_c, "max_rows", None)) if m]
            call_rows = bulk_rows_for(covered, experts=shape.experts, topk=shape.topk, device=device, max_rows=min(caps) if caps else None)
    if not ok:
        return not_run(why)
    return _Loaded(worker, call_rows, points)


def _add_notes(summary: Summary, c, shape, plan: RunPlan, *, quick, assumed: str | None, bulk: int, device: str, points) -> None:
    """What a reader of the summary must see besides the counts: families left out, a quick look, the contract assumed
    for a plain callable, and for captured logits the file and the fields no case drew."""
    if shape.dropped:
        summary.notes.append(f"families that do not apply to contract {c.name} were left out: {', '.join(shape.dropped)}")
    if quick is not None:  # first: whoever reads the summary or report.md reads that this was no full check
        summary.quick = True
        summary.notes[:0] = quick.left_out()
    if assumed:
        summary.notes.insert(0, assumed)
    if plan.captured is not None:
        from ..cases.captured import describe
        from ..cases.exercised import not_exercised

        described, notes = describe(plan.captured, c)
        summary.options = {**(summary.options or {}), "logits": described}
        summary.notes += notes
        whole = dataclasses.replace(plan, shard=None, replay=None).shaped(c)  # the file's whole plan, whatever this shard runs
        not_exercised(summary, c, whole.specs(bulk, device, points)[0])  # no PASS on a field no case drew


def _faulted(target: Target, o: CheckOptions, plan: RunPlan) -> Summary:
    """The summary of a check the harness failed before it had counts to keep (``contracts.run.containment``)."""
    cand = target.candidate
    device = o.device or (cand.devices[0] if cand.devices else "cpu")
    return Summary(candidate=cand.name, contract=o.contract or cand.contract, device=device, status=Status.ERROR,
                   seed=plan.seed, command=o.command)  # fmt: skip


def _check_line(target: Target, against: Target | None, o: CheckOptions, plan: RunPlan) -> str:
    """The command that reruns the check of ``target`` alone (its options as given), for a fault of the harness
    outside a case (``contracts.run.containment``)."""
    parts = ["python", "-m", "contracts", "check", "--candidate", target.lookup]
    named = [("--contract", o.contract), ("--against", against.lookup if against else None), ("--device", o.device),
             ("--rows", None if o.logits or o.quick else plan.rows), ("--seed", plan.seed),
             ("--families", ",".join(plan.families) if plan.families else None), ("--experts", o.experts), ("--topk", o.topk),
             ("--max-batch", o.max_batch), ("--repeat", o.repeat if o.repeat > 1 else None), ("--replay", o.replay),
             ("--logits", o.logits), ("--bias", o.logits_bias)]  # fmt: skip
    for flag, value in named:
        if value is not None:
            parts += [flag, str(value)]
    if o.exact:
        parts.append("--exact")
    if o.quick:
        parts.append("--quick")
    if o.isolate is False:
        parts.append("--no-isolate")
    return command_line(parts, replay_pythonpath(target.lookup))


def run_checks(
    names: list[str],
    options: CheckOptions | None = None,
    *,
    stop: Callable[[], object] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
    world=ONE_PROCESS,
    **fields,
) -> CheckRun:
    """Check ``names`` (registered names, ``module:attr`` specs, or ``["all"]``) and write their bundles under ``options.out``.

    ``options``: a ``CheckOptions`` record; or give its fields as keywords
    (``rows=2000, device="cpu"``), or both (the keywords replace fields).
    One name writes its bundle at ``out``; several write one folder each
    (``bundle_dirname``) plus ``index.json``. Each bundle is written as soon
    as its check finishes. ``stop()`` turning true ends the run after the
    current case (status ``interrupted``; later candidates are not started).

    ``world``: a ``contracts.run.distributed`` world (torchrun). Each rank
    checks its shard of the cases; rank 0 writes the bundles, with the
    counts of all ranks; the other ranks write nothing.

    ``logits`` (and ``logits_bias``): check on the rows of a captured logits
    file instead of the families (``contracts.cases.captured``); every row of
    every layer, ``rows``/``families`` do not apply. ``logits_sha256``: refuse
    a file whose digest does not start with it (a replay line's check).
    """
    try:
        o = dataclasses.replace(options or CheckOptions(), **fields)
    except TypeError as exc:
        raise OptionError(f"run_checks: {exc}; the options are the fields of contracts.run.options.CheckOptions") from None
    stop = stop or (lambda: None)
    everything = names == ["all"]
    contract, isolate, timeout, out = o.contract, o.isolate, o.timeout, o.out
    if not everything and "all" in names:
        raise OptionError("--candidate all cannot be combined with other names")
    if o.topk and o.experts and o.topk > o.experts:
        raise OptionError(f"--topk {o.topk} is larger than --experts {o.experts}; choose --topk <= {o.experts}")
    plan = RunPlan(list(o.families) if o.families else None, o.rows, o.seed, o.experts, o.topk, world.shard(o.shard), o.replay,
                 world.runs_replay(), o.max_batch, captured=open_captured(o.logits, o.logits_bias, o.logits_sha256, o.families),
                 quick=o.quick)  # fmt: skip
    targets: list[Target] = []
    against_t: Target | None = None
    try:
        if everything:
            targets = [Target(c, name) for name, c in all_candidates().items()
                       if (c.in_all and contract is None) or (contract is not None and c.serves(_contract_name(contract)))]
        else:
            targets = [resolve(n, role="--candidate", isolate=isolate, timeout=timeout, stop=stop) for n in names]
        if o.against:
            against_t = resolve(o.against, role="--against", isolate=isolate, timeout=timeout, stop=stop)
            if against_t.worker is not None:  # it runs in each candidate's worker; only its name was needed here
                against_t.worker.close()
                against_t.worker = None
        several = len(targets) > 1
        label = "all" if everything else ("+".join(t.candidate.name for t in targets) if several else targets[0].candidate.name)
        out = out or default_out(label)
        run = CheckRun(out=prepare_out(out, force=o.force) if world.writer else out, several=several)
        _run_targets(run, targets, against_t, o, everything=everything, plan=plan, stop=stop, on_result=on_result, world=world)
        return run
    finally:
        for t in targets:
            if t.worker is not None:
                t.worker.close()


def _run_targets(run: CheckRun, targets: list[Target], against: Target | None, o: CheckOptions, *, everything: bool, plan: RunPlan,
                 on_result, stop, world) -> None:  # fmt: skip
    taken: set[str] = set()
    for position, target in enumerate(targets):
        if stop():
            run.not_started = [t.candidate.name for t in targets[position:]]
            break
        handling = Handling(check_line=_check_line(target, against, o, plan))
        try:  # the harness's own faults end this candidate only (contracts.run.containment)
            checked = contained(lambda: _check_one(target, against, o, plan=plan, stop=stop, handling=handling), handling)
            if isinstance(checked, HarnessError):
                checked = ended_by(checked, handling, lambda: _faulted(target, o, plan)), None
            result, unavailable = checked
        except Interrupted:
            run.not_started = [t.candidate.name for t in targets[position:]]
            break
        except KeyboardInterrupt:  # a second signal outside a candidate's run: keep what finished
            run.interrupted = run.interrupted or "SIGINT"
            run.not_started = [t.candidate.name for t in targets[position:]]
            break
        finally:
            if target.worker is not None:
                target.worker.close()
                target.worker = None
        result = world.gather_check(result)  # one process: as it is; torchrun: every rank's counts (on rank 0, the cells)
        s = result.summary
        if s.status is not Status.UNAVAILABLE:
            unavailable = None
        if unavailable is not None and not everything:
            run.unavailable.append((s.candidate, unavailable))
        if unavailable is None:
            handling.doing("recording the environment")
            recorded = contained(lambda: environment(s.device), handling)
            if isinstance(recorded, HarnessError):
                recorded.end(s)
            else:
                s.environment = recorded
            s.shard = f"{o.shard[0]}/{o.shard[1]}" if o.shard else None
        folder = run.out
        if run.several:
            name = bundle_dirname(s.candidate)
            while name in taken:
                name += "_"
            taken.add(name)
            folder = run.out / name
        s.bundle = str(folder)
        if world.writer:
            write_contained(lambda r: write_check_bundle(folder, r), lambda r: write_plain_bundle(folder, r), result, handling)
        run.results.append(result)
        if on_result is not None and world.writer:
            on_result(result)
        if s.status is Status.INTERRUPTED:
            run.interrupted = s.interrupted
            run.not_started = [t.candidate.name for t in targets[position + 1 :]]
            break
    if stop():
        run.interrupted = run.interrupted or str(stop())
    if run.several and world.writer:  # every bundle is written already: a fault here loses no check, but is said
        run.index_error = contained(lambda: write_index(run.out, run.summaries, command=o.command, interrupted=run.interrupted,
                                                        not_started=run.not_started), Handling(stage="writing the index", check_line=o.command or None))  # fmt: skip
        if not isinstance(run.index_error, HarnessError):
            run.index_error = None
