"""``python -m contracts search``: property-based search for contract breaks, shrunk to a minimal reproducer.

Examples::

    python -m contracts search --candidate radix4 --examples 2000 --device cuda
    python -m contracts search --candidate mypkg.router:route --contract serial --seed 3
    python -m contracts search --replay reports/<run>/minimal.pt --candidate radix4

``contracts.run.search`` describes the inputs and the bundle (minimal.pt,
search.md, search.json). Exit codes here: 0 no failure found (or, with
--replay, it no longer fails); 1 a failure was found (bundle written) or
still reproduces.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from pathlib import Path

from ._common import (
    ExitCode,
    UsageError,
    add_engine_path,
    make_parser,
    positive_int,
    refuse_unknown_candidates,
    run_main,
    verdict_options,
)

from ._common import seed_int  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts search"
DEFAULT_EXAMPLES = 200
DEFAULT_DATABASE = Path("reports") / ".hypothesis-db"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 3)[-1])
    ap.add_argument("--candidate", metavar="NAME", help="candidate name or package.module:attr (with --replay: default the file's)")
    ap.add_argument("--contract", help="contract to check (default: the one the candidate claims)")
    ap.add_argument("--examples", type=positive_int("--examples 500"), default=DEFAULT_EXAMPLES, help=f"Hypothesis examples (default {DEFAULT_EXAMPLES})")
    ap.add_argument("--seed", type=seed_int(), default=0)
    ap.add_argument("--database", type=Path, default=DEFAULT_DATABASE, help=f"Hypothesis example database directory (default {DEFAULT_DATABASE})")
    ap.add_argument("--no-database", action="store_true", help="do not read or write an example database")
    ap.add_argument("--out", type=Path, help="bundle directory (default reports/<UTC time>-search-<candidate>)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when the candidate runs there and a GPU is present)")
    ap.add_argument("--replay", type=Path, metavar="MINIMAL.pt", help="re-run a saved minimal input and print it side by side")
    return add_engine_path(ap)


def run(args: argparse.Namespace) -> int:
    if args.replay and not args.replay.is_file():
        raise UsageError(f"--replay {args.replay} is not a file; give the minimal.pt of a search bundle")
    if not args.replay and not args.candidate:
        raise UsageError("--candidate NAME is required (or --replay MINIMAL.pt)")
    if args.candidate:
        refuse_unknown_candidates([args.candidate], allow_all=False)  # before the torch-heavy imports

    from ..run.distributed import ranked
    from .check import check_contract

    check_contract(args.contract)
    return ranked(lambda world: _search(args, world), stop=lambda: None, options=verdict_options(args))  # Hypothesis runs to the end; Ctrl-C stops it


def _search(args: argparse.Namespace, world) -> int:
    if world.writer:
        return _search_here(args, world)
    import tempfile

    from hypothesis.configuration import set_hypothesis_home_dir

    with tempfile.TemporaryDirectory(prefix=f"router-contracts-rank{world.rank}-") as private:
        set_hypothesis_home_dir(private)  # Hypothesis's own cache (.hypothesis/ in the working directory) goes here
        return _search_here(args, world)


def _search_here(args: argparse.Namespace, world) -> int:
    """Once, or on every rank of a torchrun world: each rank searches its share of the examples, rank 0 writes the bundle."""
    from ..candidates import get_candidate
    from ..run.checks import bundle_dirname, device_for
    from ..run.search import SearchSetupError, covered_space, load_minimal, merge_searches, rank_share, replay, search, write_search_bundle

    name = args.candidate
    if args.replay:
        try:
            saved = load_minimal(args.replay)
        except ValueError as exc:
            raise UsageError(f"--replay: {exc}") from None
        name = args.candidate or saved.get("candidate")
        if not name:
            raise UsageError("--replay: the file names no candidate; pass --candidate NAME")
    candidate = get_candidate(name)
    device = device_for(candidate, args.device)
    ok, why = candidate.available(device)
    if not ok:
        print(f"unavailable: {candidate.name}: {why}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    if args.replay:
        import oracle

        # a saved input whose call options its contract does not admit is bad input, never a mismatch
        contract = args.contract or saved.get("contract") or candidate.contract
        refused = oracle.get_contract(contract).admits(renormalize=bool(saved["renormalize"]),
                                                       routed_scaling_factor=float(saved["routed_scaling_factor"]))  # fmt: skip
        if refused:
            raise UsageError(f"--replay {args.replay}: {refused} (replay it under a --contract that admits its options)")
        if not world.writer:  # one input: rank 0 replays it
            return ExitCode.OK
        return ExitCode.FAILED if replay(args.replay, candidate, contract=args.contract, device=device) else ExitCode.OK
    shapes, _ = covered_space(candidate)
    if not shapes:
        from ..cases import strategies as strat

        print(f"unavailable: {candidate.name} covers none of the shapes {list(strat.SHAPES)}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    out = args.out or Path("reports") / f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-search-{bundle_dirname(candidate.name)}"
    database = None if args.no_database else args.database
    examples, seed_offset = rank_share(args.examples, world.rank, world.world_size)
    start = time.perf_counter()
    try:  # under torchrun only rank 0 reads and writes the example database (the other ranks write nothing)
        result = search(candidate, contract=args.contract, device=device, examples=examples, seed=args.seed + seed_offset,
                        database=database if world.writer else None)  # fmt: skip
    except SearchSetupError as exc:
        print(f"unavailable: {exc}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    parts = world.gather("search", result)
    if parts is None:
        return ExitCode.OK
    ranks = None
    if world.world_size > 1:
        result, ranks = merge_searches(parts)
    doc = write_search_bundle(out, result, command=args.command_line, seed=args.seed, database=database, duration=time.perf_counter() - start,
                              ranks=ranks)  # fmt: skip
    head = f"search {candidate.name} under {result.contract} on {device}: {result.examples_run} inputs tried (generation and shrinking)"
    incomplete = doc["status"] in ("error", "interrupted")
    if incomplete:
        print(f"{head}: {doc['status'].upper()}: not every rank searched; search.json says which", file=sys.stderr)
    if not result.findings:
        print(f"{head}: no unexpected mismatch")
        print(f"bundle: {out}")
        return ExitCode.FAILED if incomplete else ExitCode.OK
    print(f"{head}: FAIL ({', '.join(doc['clauses'])}){' (flaky)' if result.flaky else ''}")
    for m in doc["minimal"]:
        print(
            f"  {m['clause']}: {m['rows']} row(s) x {m['experts']}, top-{m['topk']}; row {m['row']} has "
            f"{m['nondefault_logits']} non-default logits, bias {m['nondefault_bias']} non-default entries"
        )
        print(f"  replay: {m['replay']}")
    print(f"bundle: {out}")
    return ExitCode.FAILED


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    from ..run.supervisor import supervised  # light: no torch

    # The candidate runs in this command's process: a supervisor turns its exits (os._exit(0) and the like) into exit 1.
    return run_main(lambda: build_parser(prog), supervised("search", run), argv)
