"""``python -m contracts report html|junit BUNDLE``: (re)write a bundle's report.html or junit.xml from its files.

Examples::

    python -m contracts report html reports/20261201T101500Z-radix4 --bench reports/bench
    python -m contracts report junit reports/nightly-20261201T021700Z-cuda -o junit.xml

Data come from the bundle files only, read through ``contracts.reports.bundle``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import ExitCode, make_parser, run_main

__all__ = ["build_parser", "html_main", "junit_main", "main", "run"]

PROG = "python -m contracts report"


def build_parser(prog: str = PROG, kind: str | None = None) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 1)[1])
    if kind is None:
        ap.add_argument("kind", choices=("html", "junit"), help="which report to write")
    ap.add_argument("bundle", type=Path, help="a bundle folder (a check, a multi-candidate check, or a nightly for junit)")
    ap.add_argument("--bench", type=Path, help="html: a folder written by the bench, shown on the page")
    ap.add_argument("-o", "--output", type=Path, help="junit: output file (default BUNDLE/junit.xml)")
    ap.set_defaults(kind=kind) if kind else None
    return ap


def run(args: argparse.Namespace) -> int:
    if args.kind == "html":
        from ..reports.bundle import write_html

        print(write_html(args.bundle, args.bench))
        return ExitCode.OK
    from ..reports.junit import entries_for_bundle, write_junit

    entries, tools = entries_for_bundle(args.bundle)
    out = write_junit(args.output or args.bundle / "junit.xml", entries, tools)
    print(f"junit: {out}")
    return ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)


def html_main(argv: list[str] | None = None, prog: str = "python -m contracts report html") -> int:
    return run_main(lambda: build_parser(prog, "html"), run, argv)


def junit_main(argv: list[str] | None = None, prog: str = "python -m contracts report junit") -> int:
    return run_main(lambda: build_parser(prog, "junit"), run, argv)
