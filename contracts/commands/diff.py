"""``python -m contracts diff OLD NEW``: what got worse between two report bundles.

OLD and NEW are bundle folders or their URLs (any fsspec URL: file://,
s3://, gs://...). Checks are paired by what was checked (candidate,
contract, E/k, the logits digest or the synthetic seed, families and rows),
not by name; unpaired checks are named, and "NOTHING PAIRS" is said at the
top when none pairs. ``contracts.reports.diff`` lists what counts as a
regression (one ordering of statuses: from pass, anything else is). Exit
code 1 here: a regression, or nothing paired; 2: a path that is not a
readable bundle (the message names the file and the field).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import ExitCode, make_parser, run_main

from ._common import fraction  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts diff"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 1)[1])
    ap.add_argument("old", help="the earlier bundle (folder or URL)")
    ap.add_argument("new", help="the later bundle (folder or URL)")
    ap.add_argument("--latency-threshold", type=fraction("--latency-threshold"), default=0.10,
                    help="relative latency growth counted as a regression (default 0.10 = 10%%)")  # fmt: skip
    ap.add_argument("--json", type=Path, metavar="FILE", help="also write the result as JSON")
    ap.add_argument("--markdown", type=Path, metavar="FILE", help="also write the summary as a Markdown file")
    return ap


def run(args: argparse.Namespace) -> int:
    from ..reports._atomic import write_json, write_text
    from ..reports.diff import diff_bundles, load_bundle

    old, new = load_bundle(args.old), load_bundle(args.new)  # BundleError: one line, exit 2
    result = diff_bundles(old, new, latency_threshold=args.latency_threshold)
    text = result.render()
    print(text, end="")
    if args.json:
        write_json(args.json, result.to_dict())
    if args.markdown:
        write_text(args.markdown, "# Regression diff\n\n```\n" + text + "```\n")
    return ExitCode.FAILED if result.regressed else ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
