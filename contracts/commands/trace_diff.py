"""``python -m contracts trace-diff``: two engines' routing traces of the same tokens, every flip explained by one cause.

Examples::

    python -m contracts trace-diff rollout.safetensors trainer.pt --contract deepseek-v3 --out reports/r3
    python -m contracts trace-diff a.safetensors b.safetensors --contract qwen3-moe --layer 3 --token 117

Each trace is a .pt dict or a .safetensors file with ids [tokens, k],
weights [tokens, k] and, where recorded, logits [tokens, E] and bias [E],
each with or without a leading layers dimension (the capture command
writes one). Every token and layer routed differently (a flip) is
attributed to logits_differ, near_tie or router (docs/real-traffic.md).
The output folder holds trace_diff.json, trace_diff.png and
trace_diff.html. With --token (and --layer) it prints that token of both
traces side by side instead (a replay line). Layers pair by the names the
files record. Exit codes here: 0 no flip is the router's; 1 a flip is
attributed to router, or a layer is in one trace only; 2 traces that do not
fit (shapes, dtypes, no token or no layer in common), in one line.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import ExitCode, UsageError, make_parser, run_main

from ._common import non_negative_int  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts trace-diff"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 2)[-1])
    ap.add_argument("a", type=Path, metavar="A", help="the first trace (.pt or .safetensors)")
    ap.add_argument("b", type=Path, metavar="B", help="the second trace, of the same tokens")
    ap.add_argument("--contract", required=True, metavar="NAME|FILE.toml", help="the routing contract both engines claim")
    ap.add_argument("--out", type=Path, help="output folder (default reports/<UTC time>-trace-diff); must be empty unless --force")
    ap.add_argument("--force", action="store_true", help="replace the trace diff already in --out")
    ap.add_argument("--layer", type=non_negative_int("--layer 0"), default=0, help="with --token: the layer (default 0)")
    ap.add_argument("--token", type=non_negative_int("--token 4"), help="print this token of both traces side by side (a replay line) instead of the diff")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _out(args) -> Path:
    import datetime as dt
    import shutil

    out = args.out or Path("reports") / (dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-trace-diff")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file; choose a directory")
    if out.is_dir() and any(out.iterdir()):
        if not (out / "trace_diff.json").is_file():
            raise UsageError(f"--out {out} is not empty and holds no trace diff; choose an empty or new directory")
        if not args.force:
            raise UsageError(f"--out {out} already holds a trace diff; pass --force to replace it, or choose another directory")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def run(args: argparse.Namespace) -> int:
    from .check import check_contract

    check_contract(args.contract)
    from ..run.progress import Progress
    from ..run.trace_diff import TraceError, check_traces, diff_traces, token_view

    try:
        if args.token is not None:
            print(token_view(args.a, args.b, args.contract, args.layer, args.token))
            return ExitCode.OK
        total = check_traces(args.a, args.b, args.contract)  # both traces' shapes and dtypes, before anything is written
        out = _out(args)
        with Progress("trace-diff", total, enabled=not args.quiet) as bar:
            record = diff_traces(args.a, args.b, args.contract, progress=bar)
            bar.close("done")
    except TraceError as exc:
        raise UsageError(str(exc)) from None
    from ..reports.trace_diff import write_trace_diff

    paths = write_trace_diff(out, record.to_json())
    causes = ", ".join(f"{k} {v:,}" for k, v in record.causes.items())
    print(f"{record.rows:,} token-layers, {record.flips:,} flips ({causes}); {record.tokens_flipped:,} of {record.tokens:,} tokens flipped in some layer")
    for clause, n in record.router_clauses.items():
        print(f"router: {clause}: {n:,}")
    for why, n in sorted(record.router_departures.items(), key=lambda kv: -kv[1]):
        print(f"router: {n:,} flips: {why}")  # the matrix's words (contracts.compare.departures)
    if record.causes["router"]:
        print(broken_sides(record))
    for side, names in record.unpaired_layers.items():
        if names:
            print(f"layers only in {record.a if side == 'a' else record.b}: {', '.join(names)} (not compared: the diff fails)")
    for note in record.notes:
        print(f"note: {note}")
    print(f"trace diff: {paths['page']}")
    unpaired = any(record.unpaired_layers.values())
    return ExitCode.FAILED if record.causes["router"] or unpaired else ExitCode.OK


def broken_sides(record) -> str:
    """Which trace broke the contract on the router's flips (its ids depart from the oracle's on its own logits), and
    which followed it: the side a kernel engineer fixes."""
    c = record.contract
    path = {"a": record.a, "b": record.b}
    sides = record.router_sides
    parts = [f"{'A' if side == 'a' else 'B'} ({path[side]}) breaks contract {c} on {sides[side]:,} flips" for side in ("a", "b") if sides[side]]
    if sides["both"]:
        parts.append(f"both break it on {sides['both']:,}")
    kept = [f"{'A' if side == 'a' else 'B'} ({path[side]})" for side in ("a", "b") if not sides[side] and not sides["both"]]
    return f"broken side: {'; '.join(parts)}" + (f"; {kept[0]} follows it" if len(kept) == 1 else "")


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
