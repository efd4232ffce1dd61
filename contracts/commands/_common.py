"""What every command shares: the exit codes, the parser factory, argument types, and the one error path.

A command module has ``add_arguments(parser)`` (parsing only: stdlib at
import, so ``--help`` and bad arguments answer at once, before torch loads)
and ``run(args) -> int`` (which calls the library with explicit keyword
options and prints). ``main(argv)`` of each module, and ``python -m
contracts COMMAND``, go through ``run_main``: a bad argument or a
``UsageError`` prints one line and exits ``ExitCode.USAGE``.
"""

from __future__ import annotations

import argparse
import difflib
import enum
import math
import os
import re
import shlex
import sys
import threading
from pathlib import Path
from typing import Callable

__all__ = [
    "EXIT_CODES_HELP",
    "ExitCode",
    "UsageError",
    "add_engine_path",
    "exit_process",
    "make_parser",
    "bounded_int",
    "fraction",
    "non_negative_int",
    "positive_int",
    "seed_int",
    "sha256_prefix",
    "positive_seconds",
    "row_count",
    "run_main",
]


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1  # unexpected mismatches, a candidate error, a regression, a failure found
    USAGE = 2  # bad input: one line names the argument and the fix
    UNAVAILABLE = 3  # a candidate asked for by name cannot run on this host
    UPLOAD = 4  # the nightly's upload failed
    NOT_COVERED = 5  # a check ran but checked no row (or no row of a family it ran): no evidence, no PASS
    SIGINT = 130  # interrupted (128 + signal number); the bundle keeps what ran
    SIGTERM = 143


EXIT_CODES_HELP = (
    "exit codes: 0 ok; 1 unexpected mismatches, a candidate error or a regression; 2 usage error; "
    "3 a candidate asked for by name is unavailable here; 4 upload failed (nightly); "
    "5 not covered: a check checked no row, or no row of a family (--allow-not-covered accepts it); "
    "130 / 143 interrupted by SIGINT / SIGTERM (the bundle keeps what ran)"
)


class UsageError(Exception):
    """Bad command-line input; the message names the argument and the fix."""


class _Parser(argparse.ArgumentParser):
    """One-line errors, and no prefix matching: ``--candidat`` is refused naming ``--candidate``, never taken for it
    (argparse's ``allow_abbrev`` ran a whole check on a typo), before any other complaint about the line."""

    def error(self, message):  # one line, through run_main's single exit point, not argparse's usage dump
        raise UsageError(f"{message} (see {self.prog} --help)")

    def parse_known_args(self, args=None, namespace=None):
        words = list(sys.argv[1:] if args is None else args)
        for word in words:
            if word == "--":
                break
            unknown = self._unknown_option(word)
            if unknown:
                raise UsageError(unknown)
        return super().parse_known_args(words, namespace)

    def _unknown_option(self, word: str) -> str | None:
        """The one-line refusal of ``word`` when it is an option this parser does not have, else None."""
        if not word.startswith("-") or word == "-" or self._negative_number_matcher.match(word):
            return None
        name = word.split("=", 1)[0] if word.startswith("--") else word[:2]
        if name in self._option_string_actions:
            return None
        return f"unknown option {name}{_nearest_option(name, self._option_string_actions)}; {self.prog} --help lists the options"


# What a one-letter option means in the Unix tools a user knows, where several long options begin with its letter.
_SHORT_CONVENTIONS = {"-q": "--quiet", "-f": "--force", "-o": "--out"}


def _nearest_option(name: str, options) -> str:
    """`` (did you mean --x?)``: the one option ``name`` begins (an abbreviation), else the closest spelling, else ''."""
    longs = sorted(o for o in options if o.startswith("--"))
    start = name if name.startswith("--") else "-" + name  # -q: the one long option that begins --q
    extended = [o for o in longs if o.startswith(start)] if len(start) > 2 else []
    if len(extended) > 1 and _SHORT_CONVENTIONS.get(name) in extended:  # -q: --quiet, as in every Unix tool (not --quick)
        extended = [_SHORT_CONVENTIONS[name]]
    close = extended if len(extended) == 1 else difflib.get_close_matches(name, longs, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


_RST_LITERAL = re.compile(r"``([^`]+)``")


def plain(text: str) -> str:
    """A docstring paragraph as terminal text (``literal`` markup dropped)."""
    return _RST_LITERAL.sub(r"\1", text)


def make_parser(prog: str, description: str, epilog: str = "", parser_class=None) -> argparse.ArgumentParser:
    """A command's parser (every command builds its own here): one-line errors, no prefix matching of options,
    plain-text help, the exit codes at the end."""
    cls = parser_class or _Parser
    return cls(
        prog=prog,
        description=plain(description),
        epilog="\n\n".join(p for p in (plain(epilog), EXIT_CODES_HELP) if p),
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # an option is spelled out: a prefix is refused with the full name, never run as it
    )


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what a summary.json integer may hold (contracts.reports.schema.INT64_MAX)
# The most experts (and top-k) a case may have: far above any model's (256..896), small enough that a case's logits
# [rows, E] can be allocated at all (2**62 experts ended --plan in a torch traceback).
MAX_EXPERTS = 1 << 20
EXPERTS_WHY = " (far above any model's expert count)"


def bounded_int(example: str, minimum: int = 1, maximum: int = INT64_MAX, why: str = ""):
    """An argparse ``type`` for an int in ``minimum..maximum`` (argparse names the option; ``example`` shows the fix,
    ``why`` says where the maximum comes from). Every integer a command records parses back: the default maximum is
    the record's (int64)."""

    def parse(text: str) -> int:
        try:
            value = int(text.strip().replace("_", ""))
        except ValueError:  # also a string of over 4,300 digits (Python's int limit)
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise argparse.ArgumentTypeError(f"must be an integer from {minimum:,} to {maximum:,}, got {shown!r}; e.g. {example}") from None
        if not minimum <= value <= maximum:
            shown = str(value) if abs(value).bit_length() <= 128 else f"an integer of {len(str(abs(value)))} digits"
            raise argparse.ArgumentTypeError(f"must be an integer from {minimum:,} to {maximum:,}{why}, got {shown}; e.g. {example}")
        return value

    return parse


def positive_int(example: str, maximum: int = INT64_MAX, why: str = ""):
    """An argparse ``type`` for an int from 1 to ``maximum``; argparse names the option, ``example`` shows the fix."""
    return bounded_int(example, 1, maximum, why)


def seed_int(example: str = "--seed 0"):
    """``--seed``: any int64 (summary.json's integers; torch's generators take them too)."""
    return bounded_int(example, INT64_MIN, INT64_MAX, " (a seed is recorded as a 64-bit integer)")


def non_negative_int(example: str):
    return bounded_int(example, 0, INT64_MAX)


_SUFFIX = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "B": 10**9}


MAX_ROWS = 10**13


def row_count(text: str) -> int:
    """Rows: an integer, with an optional suffix (``100k``, ``100M``, ``1G``) or in e-notation (``1e9``), 1 to 1e13.
    Anything else (1e400, inf, nan, -0, 1.5, a word) is refused in one line, never an OverflowError."""
    raw = text.strip().replace("_", "").replace(",", "")
    bad = f"must be a whole number of rows from 1 to 1e13, got {text if len(text) <= 40 else text[:37] + '...'!r}; e.g. --rows 100000 or --rows 100M"
    try:
        if raw and raw[-1] in _SUFFIX:
            value = float(raw[:-1]) * _SUFFIX[raw[-1]]
        else:
            value = float(raw) if any(ch in raw for ch in ".eE") else int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a row count, got {text!r}; e.g. --rows 100000, --rows 100M or --rows 1e9") from None
    if isinstance(value, float) and not math.isfinite(value):  # 1e400, inf, nan: int() of them raises
        raise argparse.ArgumentTypeError(bad)
    if not 1 <= value <= MAX_ROWS or value != int(value):
        raise argparse.ArgumentTypeError(bad)
    return int(value)


def positive_seconds(text: str) -> float:
    """Seconds > 0, finite, and at most ``threading.TIMEOUT_MAX`` (a wait on more raises OverflowError)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}; e.g. --timeout 60") from None
    if not 0 < value <= threading.TIMEOUT_MAX:  # nan, inf, 1e400, 0, -0 and negatives too
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0 and at most {threading.TIMEOUT_MAX:.0f}, got {text}; e.g. --timeout 60")
    return value


def fraction(option: str):
    """A finite fraction >= 0, or a percentage (``10%``); -0 is 0 (nan and inf are refused: nan would compare as no
    regression at any growth)."""

    def parse(text: str) -> float:
        try:
            value = float(text.strip().rstrip("%")) / (100.0 if text.strip().endswith("%") else 1.0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be a fraction like 0.1 or a percentage like 10%, got {text!r}") from None
        if not (math.isfinite(value) and value >= 0):
            raise argparse.ArgumentTypeError(f"{option} must be a finite fraction >= 0 like 0.1 or a percentage like 10%, got {text!r}")
        return value + 0.0  # -0.0 -> 0.0

    return parse


SHA256_MIN_CHARS = 16  # a replay line's digest prefix (contracts.cases.logits_file.DIGEST_CHARS)


def sha256_prefix(text: str) -> str:
    """``--logits-sha256``: 16 to 64 hex digits (a prefix of the file's SHA-256, as replay lines write it, or all of it)."""
    digest = text.strip().lower()
    if not re.fullmatch(r"[0-9a-f]{%d,64}" % SHA256_MIN_CHARS, digest):
        shown = text if len(text) <= 70 else text[:67] + "..."
        raise argparse.ArgumentTypeError(f"must be {SHA256_MIN_CHARS} to 64 hex digits of the file's SHA-256 (sha256sum FILE), got {shown!r}")
    return digest


def add_engine_path(ap: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``--engine-path``: where the serving engines' files are; ``run_main`` applies it before any candidate loads."""
    ap.add_argument("--engine-path", metavar="NAME=DIR,...",
                    help="directories of engine files where the engines are not pip-installed: sglang=DIR,flashinfer=DIR2 "
                         "(or DIR for all; python -m kernels.engines.extract writes one); sets ROUTER_ENGINE_PATH, "
                         "which worker processes inherit (docs/engines.md)")  # fmt: skip
    return ap


def _apply_engine_path(args: argparse.Namespace) -> None:
    spec = vars(args).get("engine_path")  # only the commands that run candidates have the option
    if spec is None:
        return
    from ..candidates.engines import set_engine_path

    try:
        set_engine_path(spec)
    except ValueError as exc:
        raise UsageError(f"--engine-path {spec!r}: {exc}") from None


# The built-in contracts' names, so that a misspelled --contract is refused before ``oracle`` (and torch, seconds
# on a loaded machine) is imported. Kept equal to oracle.BUILTIN_CONTRACTS, in its order, by
# tests/test_first_hour.py: a contract added to the oracle is added here too.
BUILTIN_CONTRACT_NAMES = (
    "aiter", "serial", "deepseek-v3", "deepseek-v3-reference", "qwen3-moe", "mixtral", "gpt-oss",
    "deepseek-v4", "deepseek-v4-flash", "llama4", "glm4-moe", "kimi-k2", "minimax-m2", "qwen3-next", "qwen2-moe", "olmoe",
    "dbrx", "gemma4", "ernie4.5", "longcat-flash", "mistral4", "deepseek-v2", "hunyuan-moe", "dots1", "jamba", "granite-moe",
    "mcore-sigmoid", "mcore-sigmoid-ungrouped", "mcore-softmax", "mcore-softmax-pre",
)  # fmt: skip


def _nearest(name: str, choices) -> str:
    """`` (did you mean 'x'?)`` for the closest of ``choices``, or nothing."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def refuse_unknown_contract(contract: str | None) -> None:
    """A --contract that is neither a built-in name nor a FILE.toml: a one-line UsageError, before any heavy import."""
    if contract is None or contract.endswith(".toml") or contract in BUILTIN_CONTRACT_NAMES:
        return
    raise UsageError(f"--contract {contract!r} is not a known contract{_nearest(contract, BUILTIN_CONTRACT_NAMES)}; "
                     f"choose from {', '.join(BUILTIN_CONTRACT_NAMES)}, or give a FILE.toml")  # fmt: skip


def refuse_unknown_candidates(names, option: str = "--candidate", *, allow_all: bool = True) -> None:
    """Names that are neither registered, nor made by a resolver (``radix4@M<1024``), nor ``module:attr``: one line
    naming ``option`` and the nearest known name. The registry imports no torch, so this answers in well under a second."""
    from ..candidates.registry import CandidateLoadError, UnknownCandidateError, all_candidates, get_candidate

    known = all_candidates()
    for name in names:
        if name in known or ":" in name or (allow_all and name == "all"):
            continue  # module:attr specs are imported later, where their own errors are reported
        try:
            get_candidate(name)
        except UnknownCandidateError:
            hint = _colon_spelling(name) or _nearest(name, known)
            raise UsageError(f"{option} {name!r} is not a known candidate{hint}; known: "
                             f"{', '.join(sorted(known))} (or give package.module:attr)") from None  # fmt: skip
        except CandidateLoadError as exc:
            raise UsageError(f"{option} {name!r}: {exc}") from None


def _colon_spelling(name: str) -> str:
    """`` (did you mean 'pkg.mod:attr'?)`` for ``pkg.mod.attr`` whose module imports and has that attribute, else ''.
    Only asked once the name is refused, so a module imported here (and torch with it) costs nothing on the way in."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):  # the longest module first: pkg.mod.attr, then pkg.mod.Class.attr
        module, attr = ".".join(parts[:cut]), ".".join(parts[cut:])
        try:
            value = importlib.import_module(module)
            for step in attr.split("."):
                value = getattr(value, step)
        except (Exception, SystemExit):  # noqa: BLE001 -- a module that does not import, or lacks the attribute: not this
            continue
        return f" (did you mean '{module}:{attr}'?)"
    return ""


def refuse_missing_out_parent(args: argparse.Namespace) -> None:
    """``--out A/B`` whose folder ``A`` does not exist is refused: a typo must not create a whole path silently."""
    out = vars(args).get("out")
    if isinstance(out, Path) and not out.parent.exists():
        raise UsageError(f"--out {out}: the folder {out.parent} does not exist; create it first, or give an --out inside "
                         "an existing folder")  # fmt: skip


# Where a run's results go, not what they say: the only options in which the ranks of one torchrun world may differ
# (each host may have its own paths; only rank 0 writes).
NOT_VERDICT_OPTIONS = frozenset({"out", "force", "quiet", "upload", "engine_path", "command_line"})


def verdict_options(args: argparse.Namespace) -> dict[str, object]:
    """The parsed options that change a run's verdict, by flag (``--seed``), for torchrun's ranks to compare."""
    return {
        "--" + name.replace("_", "-"): str(value) if isinstance(value, Path) else value
        for name, value in sorted(vars(args).items())
        if name not in NOT_VERDICT_OPTIONS and not callable(value)
    }


def command_line(prog: str, argv: list[str]) -> str:
    """The invocation as a shell line, for the report."""
    return shlex.join([*prog.split(), *argv])


def run_main(build_parser: Callable[[], argparse.ArgumentParser], run: Callable[[argparse.Namespace], int], argv: list[str] | None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), then ``run(args)``; every usage error is one line and ExitCode.USAGE.

    ``args.command_line`` holds the invocation (``python -m contracts.check ...`` as given), for reports.
    """
    from ..candidates.registry import CandidateLoadError, DuplicateCandidateError  # light: the registry imports no torch
    from ..reports.bundle import BundleError
    from ..reports.schema import RecordError
    from ..run.world import WorldError
    from ..run.options import OptionError

    if argv is None:  # started as a command: an in-process run of a candidate is supervised (contracts.run.supervisor)
        from ..run import supervisor

        supervisor.ENTRY = True
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or argparse's own exit
        return ExitCode.USAGE if exc.code else ExitCode.OK
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    args.command_line = command_line(parser.prog, argv)
    args.argv = argv  # as given: an in-process command runs it again under its supervisor (contracts.run.supervisor)
    try:
        refuse_missing_out_parent(args)
        _apply_engine_path(args)
        return int(run(args))
    except (UsageError, OptionError, CandidateLoadError, DuplicateCandidateError, BundleError, RecordError, WorldError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        # A usage error found in a supervised child (--out already holds a bundle, say) finished the command: recorded,
        # so the supervisor passes the 2 on instead of adding a second line blaming a candidate that never ran.
        from ..run.supervisor import mark_completed

        return mark_completed(ExitCode.USAGE)


def exit_process(code: int):
    """End the process with ``code`` (the ``python -m`` entry points call this with ``main()``'s answer).

    A candidate run in this process may leave threads behind (one that keeps
    writing into its outputs); at interpreter shutdown such a thread, caught
    inside torch's C++ code, aborts the process (exit 134) and replaces the
    run's exit code. With any such thread alive the process ends with
    ``os._exit(code)`` after flushing, so the code is the run's.
    """
    code = int(code or 0)
    if any(t.is_alive() and t is not threading.main_thread() for t in threading.enumerate()):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    raise SystemExit(code)
