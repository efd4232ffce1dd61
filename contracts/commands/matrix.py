"""``python -m contracts matrix``: do these routers route the same token to the same experts? Every pair, on the same rows.

Examples::

    python -m contracts matrix --candidate oracle,torch-native,aiter-model,sglang-torch,vllm-torch,lmdeploy-torch
    python -m contracts matrix --candidate radix4,sglang-radix,sglang-triton,vllm-torch --device cuda --rows 1M
    python -m contracts matrix --candidate radix4,flashinfer-noaux --experts 384 --topk 8
    python -m contracts matrix --candidate radix4,sglang-radix --split radix4:sglang-radix@1024
    python -m contracts matrix --candidate torch-native,sglang-torch --replay random_bf16:12345:64 --row 3

Every candidate runs once on each case; each pair is compared (ids
exactly, weights within the contract's tolerance, order per the contract)
and each candidate against the oracle. ``--split A:B@M0`` adds the
prefill/decode view: the same rows routed by A in batches of fewer than M0
rows and by B in batches of M0 or more. The bundle holds matrix.json,
matrix.png (the heatmap), matrix.html and matrix.txt (the table printed
here). A candidate that cannot run here is listed with its reason. Exit
codes are the check's: 0 every candidate that ran passes against the
oracle (differences between two candidates that each pass are the matrix's
answer, not a failure); 1 a candidate FAILs against the oracle, or crashed,
hung or raised; 3 a candidate is unavailable here; 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import (
    ExitCode,
    UsageError,
    add_engine_path,
    make_parser,
    positive_int,
    positive_seconds,
    refuse_unknown_candidates,
    row_count,
    run_main,
)

from ._common import EXPERTS_WHY, MAX_EXPERTS, non_negative_int, seed_int  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts matrix"
DEFAULT_ROWS = 20_000  # contracts.run.matrix.DEFAULT_ROWS (not imported here: it loads torch)


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 2)[-1])
    ap.add_argument("--candidate", action="append", metavar="A,B,C",
                    help="candidates (names or package.module:attr), comma-separated or repeated; the matrix's rows and columns in this order")  # fmt: skip
    ap.add_argument("--split", metavar="A:B@M0",
                    help="prefill/decode view: A in batches below M0 rows, B at M0 rows or more, on the same rows (e.g. radix4:aiter@1024)")  # fmt: skip
    ap.add_argument("--contract", metavar="NAME|FILE.toml",
                    help="contract of the comparisons and of the oracle column: a built-in name or a contract file (default: the one most candidates claim)")  # fmt: skip
    ap.add_argument("--rows", type=row_count, default=None,
                    help=f"the bulk rows, spread over the families (default {DEFAULT_ROWS:,}); the pinned cases run on top of them, "
                         "so the matrix runs more rows than this: the total is printed before the run. For a first look use --quick")  # fmt: skip
    ap.add_argument("--quick", action="store_true",
                    help="the quick look of check --quick (every family and every kind of pinned case once); marked '(quick)' in the "
                         "table and matrix.json: not a full check. Not with --rows, --replay or --logits")  # fmt: skip
    ap.add_argument("--families", help="comma-separated subset of the families")
    ap.add_argument("--max-batch", type=positive_int("--max-batch 65536", 1 << 20, " (the largest case the harness makes)"), metavar="M",
                    help="the largest batch of the batch-size sweep that runs at every --rows (default 65,536 on a GPU, 16,385 on a CPU)")  # fmt: skip
    ap.add_argument("--seed", type=seed_int(), default=0, help="case seed, any 64-bit integer (default 0)")
    ap.add_argument("--device", help="cpu or cuda, one for all candidates (default: cuda when torch sees a GPU)")
    ap.add_argument("--experts", type=positive_int("--experts 896", MAX_EXPERTS, EXPERTS_WHY), help="experts E (default: the contract's, 896 for aiter)")
    ap.add_argument("--topk", type=positive_int("--topk 16", MAX_EXPERTS, EXPERTS_WHY), help="top-k (default: the contract's, 16 for aiter)")
    ap.add_argument("--replay", metavar="FAMILY:SEED:ROWS", help="run exactly one case (from a replay line)")
    ap.add_argument("--row", type=non_negative_int("--row 3"), help="with --replay: print this row of every answer side by side")
    ap.add_argument("--out", type=Path, help="bundle directory (default reports/<UTC time>-matrix-<candidates>); must be empty unless --force")
    ap.add_argument("--force", action="store_true", help="replace the bundle already in --out, whole")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="run each candidate in a worker process (default: on; --no-isolate runs them in this process, under a supervisor)")  # fmt: skip
    ap.add_argument("--timeout", type=positive_seconds, default=60.0, metavar="S",
                    help="isolated runs: seconds one call may take before the worker is killed (default 60)")  # fmt: skip
    ap.add_argument("--quiet", action="store_true", help="no progress bar or progress lines")
    from .check import add_logits_arguments

    add_logits_arguments(ap)
    return add_engine_path(ap)


def _names(values: list[str] | None) -> list[str]:
    return [n.strip() for v in values or () for n in v.split(",") if n.strip()]


def _print_row(answers: dict, row: int) -> None:
    width = max(map(len, answers))
    print(f"row {row}, ids then weights:")
    for name, a in answers.items():
        print(f"  {name:<{width}}  {a['ids']}")
    for name, a in answers.items():
        print(f"  {name:<{width}}  {[float(f'{w:.7g}') for w in a['weights']]}")


def run(args: argparse.Namespace) -> int:
    from ..commands.check import _check_device, check_contract, refuse_logits_options_alone, take_rows
    from ..run.options import OptionError, parse_case_choice, parse_families, parse_split

    names = _names(args.candidate)
    take_rows(args, default=DEFAULT_ROWS)
    refuse_unknown_candidates(names, allow_all=False)  # before the torch-heavy imports: a typo is answered at once
    check_contract(args.contract)
    refuse_logits_options_alone(args)
    try:
        split = parse_split(args.split) if args.split else None
        if not names and split is None:
            raise OptionError("--candidate A,B,... or --split A:B@M0 is required; e.g. --candidate oracle,torch-native")
        families = parse_families(args.families)
        if args.logits is None:  # a captured case's replay id is checked against its file later
            parse_case_choice(args.replay, args.row, experts=args.experts, topk=args.topk)  # checked now; shaped by the contract later
    except OptionError as exc:
        raise UsageError(str(exc)) from None
    device = _check_device(args.device)

    from ..candidates.worker import Interrupted
    from ..reports.matrix import render_matrix_table
    from ..run.matrix import run_matrix
    from ..run.options import CheckOptions
    from ..run.signals import StopSignals

    with StopSignals() as stop:
        try:
            options = CheckOptions(
                contract=args.contract, rows=args.rows, seed=args.seed, families=families, device=device, experts=args.experts,
                topk=args.topk, replay=args.replay, isolate=args.isolate, max_batch=args.max_batch, timeout=args.timeout,
                out=args.out, force=args.force, progress=not args.quiet, command=args.command_line, logits=args.logits,
                logits_bias=args.bias, logits_sha256=args.logits_sha256, quick=args.quick,
            )  # fmt: skip
            done = run_matrix(names, options, split=split, show_row=args.row, stop=stop)
        except OptionError as exc:
            raise UsageError(str(exc)) from None
        except (Interrupted, KeyboardInterrupt):
            print("interrupted before the matrix ran", file=sys.stderr)
            return stop.exit_code
    print(render_matrix_table(done.report))
    print(f"bundle: {done.out}")
    if args.row is not None and done.row_answers:
        _print_row(done.row_answers, args.row)
    for name, why in done.unavailable:
        print(f"unavailable: {name}: {why}", file=sys.stderr)
    if stop.reason or done.report.interrupted:
        return stop.exit_code
    return _exit_code(done)


def _exit_code(done) -> int:
    """The check's rule: a candidate that is not PASS against the oracle (FAIL, error, nothing covered) is exit 1."""
    from ..reports.schema import Status
    from ..reports.text import clean

    members = [*done.report.candidates, *(done.report.split.members if done.report.split else ())]
    bad = [f"{clean(m.name)} {m.status.value}" for m in members if m.status not in (Status.PASS, Status.UNAVAILABLE)]
    if bad or done.errored:
        print(f"matrix: against the oracle, {', '.join(bad) or 'a candidate errored'}: exit 1", file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.UNAVAILABLE if done.unavailable else ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    from ..run.supervisor import supervised  # light: no torch

    # --no-isolate runs the candidates in this process: a supervisor turns their exits (os._exit(0) and the like) into exit 1.
    return run_main(lambda: build_parser(prog), supervised("matrix", run, when=lambda args: args.isolate is False), argv)
