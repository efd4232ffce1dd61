"""``python -m contracts nightly``: check everything this host can run, in one dated bundle.

Examples::

    python -m contracts nightly --out /tmp/n --upload file:///tmp/store
    python -m contracts nightly --upload s3://bucket/router-nightly --compare-previous
    python -m contracts nightly --candidate oracle,serial --rows 2000 --no-probe --quiet

``contracts.run.nightly`` lists what runs and where it lands. ``--contract
NAME`` (a built-in name or a contract file, as ``check --contract``) checks
every candidate under it; every line printed names the contract. Exit codes
here: 1 when --fail-on is met (default regression: the diff found one, or
there is nothing to compare against (no --compare-previous, no earlier
bundle) and a check did not pass or a bench point errored; failure: also
any check that did not pass); 4 the upload failed (the bundle is still on
disk); 130/143 interrupted (the envelope, JUnit and totals are still written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ._common import ExitCode, UsageError, make_parser, refuse_unknown_candidates, row_count, run_main, verdict_options

from ._common import fraction, seed_int  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts nightly"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 3)[-1])
    ap.add_argument("--out", type=Path, default=Path("reports"), help="parent folder of the bundle (default reports/)")
    ap.add_argument("--logits", type=Path, metavar="FILE", help="run every check on captured router logits (check --logits, docs/real-traffic.md)")
    ap.add_argument("--bias", type=Path, metavar="FILE", help="with --logits: the correction bias [E] or [layers, E]")
    ap.add_argument("--upload", metavar="URL", help="copy the bundle to URL/YYYY/MM/DD/<name>/ (any fsspec URL: file://, s3://, gs://)")
    ap.add_argument("--rows", type=row_count, help="rows per check (default 250,000 with a GPU, 50,000 without)")
    ap.add_argument("--seed", type=seed_int(), default=0, help="case seed (default 0: fixed, so that night-to-night diffs compare like with like)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="run every check on this device (default: cuda where a candidate runs there and a GPU is present)")
    ap.add_argument("--candidate", "--candidates", action="append", metavar="NAME",
                    help="check only these candidates: a name or package.module:attr; repeat or comma-separate for several "
                         "(default: every registered one; --candidates, the earlier spelling, is the same option)")  # fmt: skip
    ap.add_argument("--contract", metavar="NAME|FILE.toml",
                    help="check every candidate under this contract: a built-in name or a contract file, as check --contract "
                         "(default: each candidate's own; a module:attr router's is aiter)")  # fmt: skip
    ap.add_argument("--compare-previous", action="store_true", help="diff against the newest earlier bundle of this execution target")
    ap.add_argument("--latency-threshold", type=fraction("--latency-threshold"), default=0.10, help="latency growth counted as a regression by the diff (default 0.10)")
    ap.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True, help="run the probe per candidate (default on)")
    ap.add_argument("--bench", action=argparse.BooleanOptionalAction, default=None, help="run the bench (default: only on a GPU host)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar or progress lines (each check's one line is still printed)")
    ap.add_argument("--fail-on", choices=["regression", "failure", "never"], default="regression",
                    help="what makes the exit code 1 (default regression, and with nothing to compare against any check "
                         "that did not pass; failure: any check that did not pass)")  # fmt: skip
    return ap


def run(args: argparse.Namespace) -> int:
    from ..run.distributed import ranked
    from ..run.signals import StopSignals

    from .check import check_contract

    names = [n.strip() for v in args.candidate for n in v.split(",") if n.strip()] if args.candidate else None
    if args.candidate and not names:
        raise UsageError("--candidate needs at least one name; e.g. --candidate oracle")
    check_contract(args.contract)  # as check --contract: a misspelled name or an unreadable file is one line, exit 2
    refuse_unknown_candidates(names or [], allow_all=False)  # a typo is one line naming the nearest, before torch loads

    if args.logits is not None or args.bias is not None:  # a bad file is one usage error now, not an error in every check
        from ..run.planning import open_captured
        from ..run.options import OptionError

        try:
            open_captured(args.logits, args.bias, None, None)
        except OptionError as exc:
            raise UsageError(str(exc)) from None

    def nightly(world) -> int:  # once, or on every rank of a torchrun world (rank 0 writes and prints)
        import torch

        from ..run.nightly import run_nightly

        if args.device == "cuda" and not torch.cuda.is_available():
            raise UsageError("--device cuda was asked for, but torch sees no GPU on this host; use --device cpu")
        done = run_nightly(
            out=args.out, upload=args.upload, rows=args.rows, seed=args.seed, device=args.device, candidates=names,
            compare_previous=args.compare_previous, latency_threshold=args.latency_threshold, probe=args.probe, bench=args.bench,
            command=args.command_line, stop=world.stop, world=world, logits=args.logits, logits_bias=args.bias, contract=args.contract,
            progress=not args.quiet,
        )  # fmt: skip
        stop.writing = True
        return _report(args, done, stop) if world.writer else ExitCode.OK  # the other ranks end with rank 0's code

    with StopSignals() as stop:
        return ranked(nightly, stop=stop, options=verdict_options(args))


def _report(args: argparse.Namespace, done, stop) -> int:
    from ..run.nightly import nightly_gate

    totals = done.envelope.totals
    under = f"contract {args.contract}" if args.contract else "each candidate's own contract"
    print(f"\nnightly [{under}]: {done.bundle}  ({', '.join(f'{k} {v}' for k, v in totals.items() if v)}); junit: {done.bundle / 'junit.xml'}")
    if done.upload_error:
        print(f"error: upload failed [{under}]: {done.upload_error}", file=sys.stderr)
        return ExitCode.UPLOAD
    if done.interrupted:
        print(f"interrupted ({done.interrupted}) [{under}]: the bundle keeps what ran", file=sys.stderr)
        return stop.exit_code
    failed, line = nightly_gate(done, args.fail_on)
    if failed:
        print(line, file=sys.stderr)
        return ExitCode.FAILED
    return ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    from ..run.supervisor import supervised  # light: no torch

    # The candidate runs in this command's process: a supervisor turns its exits (os._exit(0) and the like) into exit 1.
    return run_main(lambda: build_parser(prog), supervised("nightly", run), argv)
