"""The command line: argument parsing and printing over the library in ``contracts.run`` and ``contracts.reports``.

``python -m contracts COMMAND ...`` and the console script ``router-contracts
COMMAND ...`` dispatch here; ``python -m contracts.check`` (the spelling of
earlier releases, which replay lines use) is kept for ``check`` alone.
"""

from __future__ import annotations

import importlib
import sys

from ._common import EXIT_CODES_HELP, ExitCode

__all__ = ["COMMANDS", "main"]

# command -> (module under contracts.commands, one line of what it does)
COMMANDS = {
    "check": ("check", "check router candidates against a routing contract"),
    "probe": ("probe", "recover a candidate's tie order from its answers alone"),
    "search": ("search", "property-based search for contract breaks, shrunk to a minimal reproducer"),
    "matrix": ("matrix", "several routers on the same rows: which pairs route tokens differently, and why"),
    "bench": ("bench", "latency per launch against batch size M"),
    "nightly": ("nightly", "everything this host can run, in one dated bundle"),
    "diff": ("diff", "what got worse between two bundles"),
    "merge": ("merge", "one bundle from the --shard I/N bundles of a check"),
    "report": ("report", "(re)write report.html or junit.xml of a bundle"),
    "contracts": ("contracts", "list the routing contracts (every released model family's), or show one"),
    "capture": ("capture", "record a transformers MoE model's router logits, ids and weights per layer"),
    "trace-diff": ("trace_diff", "two engines' routing traces of the same tokens: every flip explained by one cause"),
    "backward": ("backward", "the gradient of a router's weights against autograd of its contract in float64"),
}


def _usage(prog: str) -> str:
    width = max(map(len, COMMANDS))
    lines = [f"usage: {prog} COMMAND [options]   ({prog} COMMAND --help for a command's options)", "", "commands:"]
    lines += [f"  {name:<{width}}  {what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines + ["", EXIT_CODES_HELP])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    if argv is None:  # started as a command: an in-process run of a candidate is supervised (contracts.run.supervisor)
        from ..run import supervisor

        supervisor.ENTRY = True
    argv = list(sys.argv[1:] if argv is None else argv)
    prog = prog or ("router-contracts" if sys.argv and sys.argv[0].endswith("router-contracts") else "python -m contracts")
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage(prog))
        return ExitCode.OK if argv else ExitCode.USAGE
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; choose one of {', '.join(COMMANDS)} (see {prog} --help)", file=sys.stderr)
        return ExitCode.USAGE
    module = importlib.import_module(f".{COMMANDS[name][0]}", __name__)
    return module.main(rest, prog=f"{prog} {name}")
