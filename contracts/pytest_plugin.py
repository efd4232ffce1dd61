"""pytest plugin: run the routing-contract conformance suite against your router.

::

    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route
    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate oracle --contract serial -k tie_order

Options (group "router-contracts"):

- ``--candidate NAME``: a registered candidate or ``package.module:attr`` (a
  routing callable or a ``contracts.Candidate``). Without it the conformance
  tests skip, saying how to pass one.
- ``--contract NAME``: the contract to hold it to (default: the one it claims).
- ``--rows N``: rows of the one check the session runs (default 20,000), on top
  of the plan's pinned cases (every batch-size class up to ``--max-batch``,
  each bias dtype, strided rows at offset 0: ``docs/robustness.md``).
- ``--max-batch M``: the largest batch of that sweep (default: check's).
- ``--device cpu|cuda``: where to run it (default: cuda when the candidate runs
  there and torch sees a GPU, else cpu).
- ``--conformance-seed S``: the case seed (default 0).
- ``--isolate`` / ``--no-isolate``: run the candidate in a worker process (the
  default, as in ``contracts.check``), so that a crash or an exit is reported
  instead of ending pytest or passing for a success.
- ``--allow-not-covered``: a family the candidate serves no case of skips its
  tests instead of failing them.

The suite (``contracts.conformance``) has one test function per clause of the
contract checked, generated from the contract's clause list
(``test_tie_order``, ``test_group_selection``, ...), parametrized over the
case families, so a test id reads ``test_tie_order[all_equal]``; and one
``test_check_verdict``. **One check per pytest session**, through the
library's ``run_checks`` (one bundle under pytest's temporary folder, shared
by every test through a session-scoped fixture), whichever tests ``-k``
selects; every test reads its verdict from it:

- ``test_check_verdict`` has the check's verdict: it fails on ``fail``,
  ``error`` (the candidate raised, crashed or exited), ``not_covered`` and
  ``interrupted``;
- a clause test fails when the check did not complete (``error``,
  ``interrupted``: its rows are not all checked), when the family had no row
  checked (``not_covered``, unless ``--allow-not-covered``), or when rows of
  the family break the clause unexpectedly (the message gives the rows, the
  first mismatch side by side and the replay command);
- xfail: the candidate declares this clause as a known deviation and the
  family shows it;
- skip: no candidate was given, or it is unavailable here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from .reports.json_records import to_json

__all__ = ["ConformanceSession", "DEFAULT_ROWS"]

DEFAULT_ROWS = 20_000
_NO_CANDIDATE = (
    "no router to test: pass --candidate NAME or --candidate package.module:attr, e.g. "
    "pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route"
)
_SUITE_PACKAGE = "contracts.conformance"
_INCOMPLETE = ("error", "interrupted")  # the check ended early: no clause of any family has its verdict
_ACTIVE: list = []  # the session of the running pytest (the conformance module reads its contract's clauses)


def clause_names_under_test() -> tuple[str, ...]:
    """The clauses the suite makes a test for: the checked contract's, or every built-in contract's clause
    (without a session, e.g. a bare collection)."""
    import oracle

    if _ACTIVE and _ACTIVE[-1].spec:
        return tuple(map(str, _ACTIVE[-1].clause_names))
    names: list[str] = []
    for name in oracle.BUILTIN_CONTRACTS:
        names += [str(c) for c in oracle.get_contract(name).clause_names if str(c) not in names]
    return tuple(names)


def pytest_addoption(parser):
    group = parser.getgroup("router-contracts", "router contract conformance (pytest --pyargs contracts.conformance)")
    group.addoption("--candidate", metavar="NAME", help="router under test: a registered name or package.module:attr")
    group.addoption("--contract", help="contract to check (default: the one the candidate claims)")
    group.addoption("--rows", type=int, default=DEFAULT_ROWS, metavar="N", help=f"rows of the session's check (default {DEFAULT_ROWS:,})")
    group.addoption("--max-batch", type=int, default=None, metavar="M", help="largest batch of the batch-size sweep (default: check's)")
    group.addoption("--device", choices=("cpu", "cuda"), help="device (default: cuda when the candidate runs there and a GPU is present)")
    group.addoption("--conformance-seed", type=int, default=0, metavar="S", help="case seed (default 0)")
    group.addoption("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="run the candidate in a worker process (default: on, as in check)")  # fmt: skip
    group.addoption("--allow-not-covered", action="store_true", default=False,
                    help="skip, not fail, the tests of a family the candidate serves no case of")  # fmt: skip
    group.addoption("--logits", metavar="FILE", help="check on captured router logits (check --logits): the file's layers are the families")
    group.addoption("--logits-bias", metavar="FILE", help="with --logits: the correction bias (check --bias)")


class ConformanceSession:
    """The candidate under test and its one check (run once, on first use, shared by every test)."""

    def __init__(self, config, out_root: Path | None):
        self.spec = config.getoption("--candidate")
        self.rows = config.getoption("--rows")
        self.max_batch = config.getoption("--max-batch")
        self.seed = config.getoption("--conformance-seed")
        self.isolate = config.getoption("--isolate")
        self.allow_not_covered = config.getoption("--allow-not-covered")
        self.logits, self.logits_bias = config.getoption("--logits"), config.getoption("--logits-bias")
        self.out_root = out_root
        self.candidate = None
        self.contract = config.getoption("--contract") or "aiter"
        self.device = config.getoption("--device") or "cpu"
        self._run: dict | None = None
        if self.spec:
            from .candidates import CandidateLoadError, DuplicateCandidateError, get_candidate
            from .run.checks import device_for

            if self.rows < 1:
                raise pytest.UsageError(f"--rows must be >= 1, got {self.rows}")
            if self.max_batch is not None and self.max_batch < 1:
                raise pytest.UsageError(f"--max-batch must be >= 1, got {self.max_batch}")
            try:
                self.candidate = get_candidate(self.spec)
            except (CandidateLoadError, DuplicateCandidateError) as exc:
                raise pytest.UsageError(f"--candidate {self.spec}: {exc}") from None
            self.contract = config.getoption("--contract") or self.candidate.contract
            self.device = device_for(self.candidate, config.getoption("--device"))

    @property
    def clause_names(self) -> tuple[str, ...]:
        import oracle

        return oracle.get_contract(self.contract).clause_names

    def families(self, contract) -> list[str]:
        """The families the tests run: the contract's, or with --logits the captured file's layers."""
        if self.logits:
            from .cases.captured import CapturedError
            from .cases.logits_file import open_logits

            try:
                f = open_logits(self.logits, self.logits_bias)
            except CapturedError as exc:
                raise pytest.UsageError(f"--logits: {exc}") from None
            return [f.family(layer) for layer in range(f.layer_count)]
        from .cases.families import families_for

        return families_for(contract)

    def run(self) -> dict:
        """The session's one check of the candidate (run on first use); the summary, the bundle and the log."""
        if self._run is None:
            from .run.checks import run_checks

            out = self.out_root / "check"
            log = io.StringIO()
            source = (f"--logits {self.logits}" + (f" --bias {self.logits_bias}" if self.logits_bias else "") if self.logits
                      else f"--rows {self.rows} --seed {self.seed}" + (f" --max-batch {self.max_batch}" if self.max_batch else ""))
            command = (f"python -m contracts check --candidate {self.spec} --contract {self.contract} --device {self.device} {source} "
                       f"--out {out}" + (" --no-isolate" if self.isolate is False else ""))  # fmt: skip
            if self.isolate is False:  # in process, but not pytest's: a supervised check command (its _exit cannot end pytest)
                summary, error = self._run_command(out, log)
            else:
                with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                    try:
                        checked = run_checks([self.spec], contract=self.contract, device=self.device, rows=self.rows, seed=self.seed,
                                             isolate=self.isolate, out=out, progress=False, command=command, max_batch=self.max_batch,
                                             logits=self.logits, logits_bias=self.logits_bias)  # fmt: skip
                        summary, error = checked.results[0].summary, None
                    except Exception as exc:  # noqa: BLE001 -- the test says what went wrong
                        summary, error = None, f"{type(exc).__name__}: {exc}"
            self._run = {"summary": summary, "bundle": out, "log": log.getvalue(), "error": error, "command": command}
        return self._run

    def _run_command(self, out: Path, log: io.StringIO):
        """``--no-isolate``: ``python -m contracts check --no-isolate`` as a child (under its supervisor), its bundle read back."""
        import subprocess
        import sys

        from .reports.bundle import read_summary

        argv = [sys.executable, "-m", "contracts", "check", "--candidate", self.spec, "--contract", self.contract, "--device", self.device,
                "--rows", str(self.rows), "--seed", str(self.seed), "--out", str(out), "--no-isolate", "--quiet"]  # fmt: skip
        if self.max_batch:
            argv += ["--max-batch", str(self.max_batch)]
        if self.logits:
            argv += ["--logits", str(self.logits)] + (["--bias", str(self.logits_bias)] if self.logits_bias else [])
        done = subprocess.run(argv, capture_output=True, text=True)
        log.write(done.stdout + done.stderr)
        if (out / "summary.json").exists():
            return read_summary(out / "summary.json"), None
        return None, f"the check ended without a bundle (exit {done.returncode}): {(done.stdout + done.stderr).strip()[-2000:]}"

    def _summary(self):
        if self.candidate is None:
            pytest.skip(_NO_CANDIDATE)
        run = self.run()
        summary = run["summary"]
        if summary is None:
            pytest.fail(f"the check did not run: {run['error']}\n{run['log']}", pytrace=False)
        if summary.status.value == "unavailable":
            pytest.skip(f"{summary.candidate} is unavailable on {summary.device}: {summary.reason or ''}")
        return run, summary

    @staticmethod
    def _what_ended(summary) -> str:
        if summary.status.value == "interrupted":
            return f"interrupted ({summary.interrupted})"
        e = summary.error
        return f"{e.kind}: {e.message}" + (f" (case {e.case})" if e.case else "") + (f"\nreplay: {e.replay}" if e.replay else "")

    def assert_verdict(self) -> None:
        """Fail unless the check's status is pass (``not_covered`` passes only with ``--allow-not-covered``)."""
        run, summary = self._summary()
        status = summary.status.value
        if status == "pass" or (status == "not_covered" and self.allow_not_covered):
            return
        detail = {"not_covered": summary.reason or "", "fail": f"{summary.mismatched_rows:,} rows mismatch: {summary.clauses_broken or summary.clauses}"}
        what = self._what_ended(summary) if status in _INCOMPLETE else detail.get(status, "")
        pytest.fail(f"the check of {summary.candidate} under contract {summary.contract} ended {status.upper()}: {what}\n"
                    f"bundle: {run['bundle']}\nrerun: {run['command']}", pytrace=False)  # fmt: skip

    def assert_clause(self, family: str, clause: str) -> None:
        """Fail if the check did not complete, or ``family`` was not checked, or a row of it breaks ``clause`` unexpectedly,
        or the clause's evidence rests on a field no case exercised (``summary.unexercised``)."""
        import oracle

        from .cases.exercised import unexercised_clauses

        run, summary = self._summary()
        if clause not in self.clause_names:
            pytest.skip(f"clause {clause} is not part of contract {self.contract}")
        if summary.status.value in _INCOMPLETE:
            pytest.fail(f"the check of {summary.candidate} ended {summary.status.value.upper()} before it was whole, so no clause "
                        f"has a verdict: {self._what_ended(summary)}\nbundle: {run['bundle']}", pytrace=False)  # fmt: skip
        fam = summary.families.get(family)
        if fam is None or not fam.rows:
            skipped = fam.rows_skipped if fam else 0
            why = "; ".join(fam.skip_reasons) if fam and fam.skip_reasons else "no case of it ran"
            message = f"{summary.candidate}: no row of family {family} was checked ({skipped:,} rows skipped: {why})"
            if self.allow_not_covered:
                pytest.skip(message + " (--allow-not-covered)")
            pytest.fail(message + "; not covered is no pass (--allow-not-covered skips instead)", pytrace=False)
        bad = fam.clauses_broken.get(clause, fam.clauses.get(clause, 0))
        if bad:
            from .reports.junit import first_mismatch

            statement = oracle.get_contract(self.contract).clause(clause).statement
            pytest.fail(
                f"clause {clause} of contract {self.contract}: {bad:,} of {fam.rows:,} rows of family {family} mismatch "
                f"({summary.candidate} on {summary.device}, seed {self.seed})\n"
                f"clause: {statement}\n"
                f"first mismatch: {first_mismatch(run['bundle'], to_json(summary), family, clause)}\n"
                f"bundle: {run['bundle']}",
                pytrace=False,
            )
        unexercised = unexercised_clauses(summary.unexercised).get(clause)  # issue 55: no pass on a field never drawn
        if unexercised:
            message = (f"clause {clause} of contract {self.contract}: not exercised: {', '.join(unexercised)} (every case of "
                       f"family {family} left it at its default, so a router wrong only there passes; docs/real-traffic.md)")
            if self.allow_not_covered:
                pytest.skip(message + " (--allow-not-covered)")
            pytest.fail(message + "; not covered is no pass (--allow-not-covered skips instead)", pytrace=False)
        declared = summary.expected_deviations.get(clause)
        if declared and fam.expected_clauses.get(clause, 0):
            pytest.xfail(f"declared deviation: {declared.reason}")


def pytest_configure(config):
    config._router_contracts = ConformanceSession(config, None)
    _ACTIVE.append(config._router_contracts)


def pytest_unconfigure(config):
    session = getattr(config, "_router_contracts", None)
    if session in _ACTIVE:
        _ACTIVE.remove(session)


def pytest_report_header(config):
    session = getattr(config, "_router_contracts", None)
    if session is None or session.candidate is None:
        return None
    import torch

    claims = session.candidate.contract
    contract = session.contract + ("" if claims == session.contract else f" (the candidate claims {claims})")
    gpu = torch.cuda.get_device_name() if session.device.startswith("cuda") and torch.cuda.is_available() else None
    return [
        f"router-contracts: candidate {session.candidate.name}, contract {contract}",
        f"router-contracts: device {session.device}{f' ({gpu})' if gpu else ''}, one check of {session.rows:,} rows "
        f"and the pinned cases, seed {session.seed}",
    ]


def pytest_generate_tests(metafunc):
    if "contract_family" not in metafunc.fixturenames:
        return
    import oracle

    from .cases.families import families_for

    session = getattr(metafunc.config, "_router_contracts", None)
    contract = oracle.get_contract(session.contract if session is not None else "aiter")
    # the families that mean something under the contract checked (with --logits: the captured file's layers)
    names = session.families(contract) if session is not None else families_for(contract)
    metafunc.parametrize("contract_family", names, ids=names)


@pytest.fixture(scope="session")
def conformance(request, tmp_path_factory) -> ConformanceSession:
    """The session's candidate and its one check, shared by every test of the session."""
    session = request.config._router_contracts
    if session.out_root is None:
        session.out_root = tmp_path_factory.mktemp("router-contracts")
    return session



def _check_has_option(flag: str) -> bool:
    """Whether the check command has ``flag`` (for callers that pass check options through)."""
    from .commands.check import build_parser

    return any(flag in action.option_strings for action in build_parser()._actions)
