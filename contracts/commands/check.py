"""``python -m contracts check``: check router candidates against a routing contract.

Examples::

    python -m contracts check --candidate torch-native --contract aiter
    python -m contracts check --candidate all
    python -m contracts check --candidate serial --against block-argmax --exact
    python -m contracts check --candidate mypkg.router:route --contract serial
    python -m contracts check --candidate radix4 --replay tie_pool_straddle:12345:16 --row 3
    python -m contracts check --candidate radix4 --repeat 3 --timeout 30
    torchrun --nproc-per-node 8 -m contracts check --candidate radix4 --rows 1e9

GPU candidates and third-party candidates run in a worker process
(``--isolate``); ``docs/robustness.md`` has the details. Under torchrun each
rank checks its shard on its own GPU and rank 0 writes the one bundle
(``contracts.run.distributed``, ``docs/nightly.md``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import (
    ExitCode,
    UsageError,
    add_engine_path,
    EXPERTS_WHY,
    MAX_EXPERTS,
    make_parser,
    non_negative_int,
    positive_int,
    positive_seconds,
    refuse_unknown_candidates,
    refuse_unknown_contract,
    row_count,
    run_main,
    seed_int,
    sha256_prefix,
    verdict_options,
)

__all__ = ["add_arguments", "build_parser", "main", "run"]

PROG = "python -m contracts.check"
from ..cases.quick_look import QUICK_ROWS  # noqa: E402 -- light: no torch
from ..run.options import DEFAULT_ROWS, DEFAULT_TIMEOUT_S, MAX_REPLAY_ROWS  # noqa: E402 -- light: no torch


def _candidates_epilog() -> str:
    from ..candidates import all_candidates
    from ..cases.families import FAMILY_NAMES

    try:
        known = ", ".join(sorted(all_candidates()))
    except Exception as exc:  # noqa: BLE001 -- a broken entry point must not break --help
        known = f"(could not list them: {exc})"
    return f"candidates: {known}, or package.module:attr\n\nfamilies: {', '.join(FAMILY_NAMES)}"


def add_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME",
                    help="candidate name, package.module:attr, or 'all'; repeat or comma-separate for several")  # fmt: skip
    ap.add_argument("--contract", metavar="NAME|FILE.toml", help="contract to check: a built-in name or a contract file (default: the one the candidate claims)")
    ap.add_argument("--against", metavar="NAME", help="compare with this candidate instead of the oracle")
    ap.add_argument("--exact", action="store_true", help="bit-identity: weights to 0 ULP and no near-tie allowance")
    ap.add_argument("--out", type=Path, help="bundle directory (default reports/<UTC time>-<candidate>); must be empty unless --force")
    ap.add_argument("--force", action="store_true", help="replace the bundle already in --out, whole")
    ap.add_argument("--rows", type=row_count, default=None,
                    help=f"the bulk rows, spread over the families (default {DEFAULT_ROWS:,}; 100k, 100M, 1e9 work); the pinned cases (every "
                         "dtype pair, layout, call context and batch-size class: ~343,000 rows on a CPU) run on top at every --rows, so a "
                         "check runs more rows than this: the total is printed before the run (--plan prints it alone). For a first "
                         "look use --quick")  # fmt: skip
    ap.add_argument("--quick", action="store_true",
                    help=f"a first look in seconds: every family ({QUICK_ROWS:,} rows over them) and every pinned dtype pair, layout, "
                         "call context and call option once, at one launch class, the batch-size sweep at the launch-class boundaries "
                         "only; says what it left out, and its PASS is marked 'PASS (quick)': not a full check. Not with --rows, "
                         "--replay or --logits")  # fmt: skip
    ap.add_argument("--seed", type=seed_int(), default=0, help="case seed, any 64-bit integer (default 0)")
    ap.add_argument("--families", help="comma-separated subset of the families (listed below)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when the candidate runs there and a GPU is present)")
    ap.add_argument("--experts", type=positive_int("--experts 896", MAX_EXPERTS, EXPERTS_WHY), help="experts E (default: the contract's, 896 for aiter)")
    ap.add_argument("--topk", type=positive_int("--topk 16", MAX_EXPERTS, EXPERTS_WHY), help="top-k (default: the contract's, 16 for aiter)")
    ap.add_argument("--replay", metavar="FAMILY:SEED:ROWS[:bulk]", help="run exactly one case (from a report's replay line)")
    ap.add_argument("--row", type=non_negative_int("--row 3"), help="with --replay: print this row side by side")
    ap.add_argument("--shard", metavar="I/N", help="run the I-th of N deterministic slices of the cases (1-based); merge with contracts merge")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="run each candidate in a worker process, so a crash or hang is reported, not fatal "
                         "(default: on for GPU and third-party candidates)")  # fmt: skip
    ap.add_argument("--timeout", type=positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="S",
                    help=f"isolated runs: seconds one call may take before the worker is killed (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    ap.add_argument("--repeat", type=positive_int("--repeat 3"), default=1, metavar="N",
                    help="call the candidate N times per case (and once from a CUDA graph on GPUs); differences fail the run")  # fmt: skip
    ap.add_argument("--max-batch", type=positive_int("--max-batch 65536", MAX_REPLAY_ROWS, " (the largest case the harness makes)"), metavar="M",
                    help="the largest batch of the batch-size sweep that runs at every --rows (default 65,536 on a GPU, 16,385 on a CPU)")  # fmt: skip
    ap.add_argument("--plan", action="store_true", help="print the batch sizes, dtype pairs and layouts the run covers, and exit without running")
    ap.add_argument("--allow-not-covered", action="store_true",
                    help="exit 0 although a check checked no row of a family (status not_covered; default: exit 5)")  # fmt: skip
    ap.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
    add_logits_arguments(ap)
    return add_engine_path(ap)


def add_logits_arguments(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--logits FILE [--bias FILE] [--logits-sha256 D]``: captured router logits as the cases (docs/real-traffic.md)."""
    ap.add_argument("--logits", type=Path, metavar="FILE",
                    help="check on captured router logits ([tokens, E] or [layers, tokens, E]; .safetensors, .pt or .npy) "
                         "instead of the synthetic families: every row of every layer")  # fmt: skip
    ap.add_argument("--bias", type=Path, metavar="FILE", help="with --logits: the correction bias [E] or [layers, E], when the logits file has none")
    ap.add_argument("--logits-sha256", type=sha256_prefix, metavar="HEX", help="with --logits: refuse a file whose SHA-256 does not start with HEX (replay lines pass it)")
    return ap


def refuse_logits_options_alone(args: argparse.Namespace) -> None:
    """``--bias FILE`` or ``--logits-sha256 HEX`` without ``--logits FILE``: one line, before anything runs (``--plan``
    printed the synthetic plan and exited 0 with them)."""
    if args.logits is None and (args.bias is not None or args.logits_sha256):
        option = "--bias" if args.bias is not None else "--logits-sha256"
        raise UsageError(f"{option} needs --logits FILE (the captured logits it belongs to); add --logits FILE or drop {option}")


def take_rows(args: argparse.Namespace, default: int = DEFAULT_ROWS) -> None:
    """``args.rows``: ``QUICK_ROWS`` for ``--quick`` (refused, one line, beside ``--rows``, ``--replay`` or ``--logits``),
    else the given ``--rows`` or ``default`` (check's; matrix passes its own)."""
    from ..run.options import OptionError, check_quick

    if getattr(args, "quick", False):
        try:
            check_quick(args.rows or default, args.replay, args.logits, rows_given=args.rows is not None, defaults=(default,))
        except OptionError as exc:
            raise UsageError(str(exc)) from None
        args.rows = QUICK_ROWS
    elif args.rows is None:
        args.rows = default


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = add_arguments(make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], _candidates_epilog()))
    ap.add_argument("--backward", action="store_true",
                    help=f"check the gradient of the weights instead of the forward answer (python -m contracts backward for each "
                         f"candidate: --rows defaults to {BACKWARD_ROWS}; docs/backward.md)")  # fmt: skip
    return ap


BACKWARD_ROWS = 64  # the backward check's default: a float64 reference per row and variant, not the forward's 250,000
# check's options the backward check has no use for, with their defaults: each given is refused with one line, not ignored
_NOT_BACKWARD = {"against": None, "exact": False, "quick": False, "families": None, "shard": None, "repeat": 1, "plan": False,
                 "logits": None, "max_batch": None, "row": None, "replay": None}  # fmt: skip


def _run_backward(args: argparse.Namespace, names: list[str]) -> int:
    """``check --backward``: ``python -m contracts backward`` for each named candidate, the worst exit code (FAIL or
    ERROR 1 over NOT COVERED 5 over UNAVAILABLE 3 over PASS 0); several candidates' bundles go to ``--out/NAME``."""
    from .backward import run_backward

    for attr, default in _NOT_BACKWARD.items():
        if getattr(args, attr, default) != default:
            flag = "--" + attr.replace("_", "-")
            raise UsageError(f"{flag} does not apply to --backward; drop it (python -m contracts backward --help lists what does)")
    if "all" in names:
        raise UsageError("--backward takes named candidates (the differentiable ones: oracle, torch-native, hf-*, mcore-*), not 'all'")
    codes = []
    for name in names:
        out = args.out / name.replace(":", "_").replace("/", "_") if args.out is not None and len(names) > 1 else args.out
        codes.append(run_backward(name, args.contract, device=args.device or "cpu", rows=args.rows or BACKWARD_ROWS,
                                  seed=args.seed, experts=args.experts, topk=args.topk, out=out))  # fmt: skip
    for worst in (ExitCode.FAILED, ExitCode.NOT_COVERED, ExitCode.UNAVAILABLE):
        if worst in codes:
            return worst
    return max(codes)


def _names(values: list[str]) -> list[str]:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        raise UsageError("--candidate needs at least one name; e.g. --candidate oracle")
    return names


def check_contract(contract: str | None) -> None:
    """A built-in name or a readable contract file; else a one-line UsageError naming --contract and the choices."""
    refuse_unknown_contract(contract)  # a misspelled name: refused before oracle (and torch) is imported
    if contract is None or not contract.endswith(".toml"):
        return
    import oracle

    try:
        oracle.get_contract(contract)
    except (ValueError, OSError) as exc:
        message = str(exc)  # the TOML reader's errors name the file already: say it once
        raise UsageError(f"--contract: {message}" if contract in message else f"--contract {contract}: {message}") from None


def _check_device(requested: str | None, world_size: int = 1) -> str | None:
    if not requested:
        return None
    kind = requested.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"--device {requested!r} is not supported; use cpu or cuda")
    if world_size > 1 and requested != kind:
        raise UsageError(f"--device {requested}: under torchrun each rank uses the GPU of its LOCAL_RANK; pass --device {kind}")
    import torch

    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no GPU on this host; use --device cpu")
    return requested


def _print_row(results, row: int) -> None:
    for r in results:
        for d in r.details:
            if d.row == row:
                print(f"row {row}: {d.clause} ({d.verdict}): {d.reason}")
                print(f"  expected ids {d.expected_ids}\n  actual ids   {d.actual_ids}")
                print(f"  expected w   {d.expected_weights}\n  actual w     {d.actual_weights}")
                break
        else:
            if r.summary.status.value != "unavailable":
                print(f"row {row}: matches (no mismatch recorded for it)")


def run(args: argparse.Namespace) -> int:
    from ..run.supervisor import mark_completed, run_supervised, supervising

    in_process = args.isolate is False or getattr(args, "backward", False)  # the backward check runs its candidates here
    if in_process and not args.plan and supervising():  # in process: a candidate's _exit must not look like success
        return run_supervised("check", args.argv)
    return mark_completed(_run(args))


def _run(args: argparse.Namespace) -> int:
    from ..run.options import OptionError, parse_case_choice, parse_families, parse_shard

    names = _names(args.candidate)
    if getattr(args, "backward", False):
        return _run_backward(args, names)
    take_rows(args)
    refuse_unknown_candidates(names)  # before the torch-heavy imports below: a typo is answered at once
    refuse_unknown_candidates([args.against] if args.against else [], "--against", allow_all=False)
    check_contract(args.contract)
    refuse_logits_options_alone(args)
    try:
        families = parse_families(args.families)
        shard = parse_shard(args.shard)
        if args.logits is None:  # a captured case's replay id is checked against its file later
            parse_case_choice(args.replay, args.row, experts=args.experts, topk=args.topk)  # checked now; shaped by the contract later
        elif args.row is not None and not args.replay:
            raise OptionError("--row needs --replay FAMILY:FIRST_ROW:ROWS")
    except OptionError as exc:
        raise UsageError(str(exc)) from None

    from ..candidates.worker import Interrupted
    from ..reports.bundle import BundleError
    from ..run.checks import run_checks
    from ..run.distributed import ranked
    from ..run.options import CheckOptions
    from ..run.signals import StopSignals

    if args.plan:
        return _print_plan(args, names, families)
    if args.replay and args.row is not None and not args.against and args.logits is None:
        return _replay_one_row(args, names)  # one row of a generated case: routed and compared alone, no bundle

    def check(world) -> int:  # once, or on every rank of a torchrun world (rank 0 writes and prints)
        device = _check_device(args.device, world.world_size)
        try:
            options = CheckOptions(
                contract=args.contract, against=args.against, exact=args.exact, rows=args.rows, seed=args.seed,
                families=families, device=device, experts=args.experts, topk=args.topk, shard=shard, replay=args.replay,
                isolate=args.isolate, timeout=args.timeout, repeat=args.repeat, out=args.out, force=args.force,
                progress=not args.quiet and world.writer, command=args.command_line, max_batch=args.max_batch,
                allow_not_covered=args.allow_not_covered, logits=args.logits, logits_bias=args.bias, logits_sha256=args.logits_sha256,
                quick=args.quick,
            )  # fmt: skip
            checked = run_checks(names, options, stop=world.stop, world=world)
        except (OptionError, BundleError) as exc:
            raise UsageError(str(exc)) from None
        except (Interrupted, KeyboardInterrupt):  # before any candidate ran: nothing to write
            print("interrupted before any check ran", file=sys.stderr)
            return stop.exit_code
        return _report(args, checked, stop) if world.writer else ExitCode.OK  # the other ranks end with rank 0's code

    with StopSignals() as stop:
        return ranked(check, stop=stop, options=verdict_options(args))


def _replay_one_row(args: argparse.Namespace, names: list[str]) -> int:
    """``--replay ID --row N``: route the case once, compare only row N, print it side by side; no bundle
    (``contracts.run.replay.replay_one_row``)."""
    from ..candidates.registry import CandidateLoadError
    from ..reports.markdown import side_by_side
    from ..reports.text import clean
    from ..run.options import OptionError
    from ..run.replay import replay_one_row

    if len(names) != 1:
        raise UsageError(f"--row replays one row of one candidate; give one --candidate, not {len(names)}")
    try:
        done = replay_one_row(names[0], contract=args.contract, device=_check_device(args.device), replay=args.replay, row=args.row,
                              experts=args.experts, topk=args.topk)  # fmt: skip
    except (CandidateLoadError, OptionError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    d = done.detail
    what = f"{d.clause} ({d.verdict})" if d.clause else d.verdict
    print(f"row {args.row}: {what}: {clean(d.reason)}  [{clean(done.candidate)}, contract {done.contract}, case {done.case}]")
    if d.expected_ids is not None:
        print(side_by_side(d).strip("`\n"))
    print("(the case was routed as the check routed it, in one call of its rows; only this row was compared; no bundle written)")
    return ExitCode.FAILED if done.failed else ExitCode.OK


def _print_plan(args: argparse.Namespace, names: list[str], families) -> int:
    """``check --plan``: what the run would cover, per contract, without running a candidate
    (``contracts.run.planning.describe_plan``)."""
    from ..candidates.registry import device_for
    from ..cases.max_batch import MAX_BATCH_ENV
    from ..run.options import OptionError
    from ..run.planning import describe_plan

    # the device the check itself would take (a GPU host runs a cuda candidate there, in larger calls)
    candidate = _plan_candidate(names[0])
    device = device_for(candidate, _check_device(args.device))
    try:
        p = describe_plan(candidate, args.contract, device=device, rows=args.rows, seed=args.seed, families=families,
                          experts=args.experts, topk=args.topk, max_batch=args.max_batch, quick=args.quick)  # fmt: skip
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    what = f"a quick look ({p.rows:,} rows and a thin sample of the pinned cases)" if p.quick else f"{p.rows:,} rows and the pinned cases"
    print(f"plan: contract {p.contract}, E={p.experts}, k={p.topk}, device {p.device}, {what}: "
          f"{p.cases:,} cases, {p.planned_rows:,} rows, {p.calls:,} calls of the candidate")  # fmt: skip
    print(f"families: {', '.join(p.families)}")
    source = f", from {MAX_BATCH_ENV}" if p.max_batch_from_env else ""
    largest = f"; bulk cases in calls of at most {p.call_rows:,} rows" if p.call_rows else ""
    unreached = f" ({', '.join(f'{n:,}' for n in p.beyond)} beyond the largest call, {p.largest_call:,} rows: not reached)" if p.beyond else ""
    print(f"batch sizes of the calls (max batch {p.max_batch:,}{source}; switch points {', '.join(map(str, p.switch_points)) or 'none published'}"
          f"{unreached}{largest}): " + ", ".join(f"{n:,}" for n in p.batch_sizes))
    print(f"dtype pairs (logits/bias): {', '.join(p.dtype_pairs)}")
    print(f"layouts: {', '.join(p.layouts)}")
    if p.pinned_classes:  # every pinned dtype pair and layout runs at each: one batch of every launch class at this shape
        print(f"pinned dtype pairs and layouts at batch sizes {', '.join(f'{n:,}' for n in p.pinned_classes)} "
              f"(1, 2, 64 and the first batch of each launch shape published for E={p.experts}, k={p.topk} under {p.contract})")
    if p.quick:  # what the quick look leaves out of the full plan, in place of the warning below (the max-batch case is one)
        for line in p.left_out:
            print(line)
    elif p.beyond:
        print(f"warning: the launch class from {p.beyond[0]:,} rows up is never exercised: no call of this run has more than "
              f"{p.largest_call:,} rows (max batch {p.max_batch:,}); raise --max-batch to at least {p.beyond[-1]:,} to reach every switch point",
              file=sys.stderr)  # fmt: skip
    return ExitCode.OK


def _plan_candidate(name: str):
    """The candidate ``--plan`` asks for its largest call (its ``covered`` gate, ``max_rows``); None for ``all`` or one
    that does not load here (its bulk cases are then listed in calls of the plan's bulk size)."""
    if name == "all":
        return None
    from ..candidates.registry import get_candidate

    try:
        return get_candidate(name)
    except Exception:  # noqa: BLE001 -- a candidate that cannot load here: the plan is still the plan
        return None


def _report(args: argparse.Namespace, checked, stop) -> int:
    from ..reports.schema import HARNESS_ERROR, INPUT_CHANGED
    from ..reports.terminal import verdict_table
    from ..reports.text import clean

    if checked.results:
        print(verdict_table(checked.summaries))
        for s in checked.summaries:
            for note in s.notes:
                print(f"note: {clean(s.label)}: {clean(note)}")
            for d in s.diagnosis or ():  # a built-in contract the candidate matches better than the one checked
                if isinstance(d, dict) and d.get("kind") == "contract":
                    print(f"hint: {clean(s.label)}: {clean(d.get('text', ''))}")
    print(f"bundle: {checked.out}")
    for s in checked.summaries:  # a fault of the harness: the line that reruns it, to report it with
        if s.error is not None and s.error.kind == HARNESS_ERROR and s.error.replay:
            print(f"harness error: {clean(s.label)}: rerun with: {s.error.replay}", file=sys.stderr)
        if s.error is not None and s.error.kind == INPUT_CHANGED:
            print(f"input changed: {clean(s.label)}: {clean(s.error.message)}", file=sys.stderr)
    if checked.index_error is not None:
        print(f"harness error: {checked.index_error.message}", file=sys.stderr)
    if args.replay and args.row is not None:
        _print_row(checked.results, args.row)
    for name, why in checked.unavailable:
        print(f"unavailable: {name}: {why}", file=sys.stderr)
    if stop.reason or checked.interrupted:
        if checked.not_started:
            print(f"interrupted; not started: {', '.join(checked.not_started)}", file=sys.stderr)
        return stop.exit_code
    if checked.unavailable:
        return ExitCode.UNAVAILABLE
    if not checked.results:  # nothing was checked and no bundle was written: never a success
        print("error: no check ran; no bundle was written", file=sys.stderr)
        return ExitCode.FAILED
    if checked.failed:
        return ExitCode.FAILED
    if checked.not_covered:
        print(f"not covered: {', '.join(checked.not_covered)}: no row of some family was checked, or a field no case exercised, so no PASS"
              + ("; accepted by --allow-not-covered" if args.allow_not_covered else " (exit 5; --allow-not-covered accepts it)"), file=sys.stderr)  # fmt: skip
        return ExitCode.OK if args.allow_not_covered else ExitCode.NOT_COVERED
    return ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
