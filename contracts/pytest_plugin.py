"""pytest plugin: run the routing-contract conformance suite against your router.

::

    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route
    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate oracle --contract serial -k tie_order

Options (group "router-contracts"):

- ``--candidate NAME``: a registered candidate or ``package.module:attr`` (a
  routing callable or a ``contracts.Candidate``). Without it the conformance
  tests skip, saying how to pass one.
- ``--contract NAME``: the contract to hold it to (default: the one it claims).
- ``--rows N``: rows per case family (default 2,000).
- ``--device cpu|cuda``: where to run it (default: cuda when the candidate runs
  there and torch sees a GPU, else cpu).
- ``--conformance-seed S``: the case seed (default 0).
- ``--isolate`` / ``--no-isolate``: run the candidate in a worker process, so
  that a crash is reported instead of ending pytest (default: what
  ``contracts.check`` does by default; a worker costs a few seconds per family).

The suite (``contracts.conformance``) has one test function per contract
clause (``test_tie_order``, ``test_nan_last``...), grouped in modules by
clause group and parametrized over the case families, so a test id reads
``test_tie_order[all_equal]``. Each family runs once per session, through
the library's ``run_checks`` (a bundle per family under pytest's temporary
folder), and every clause test of that family reads its verdict from it:

- pass: no unexpected mismatch attributed to the clause in the family;
- fail: the message says how many rows, the clause, the first mismatch (ids
  and weights side by side) and the ``contracts.check`` command that replays it;
- xfail: the candidate declares this clause as a known deviation and the
  family shows it;
- skip: the candidate is unavailable here, or does not serve the family's
  shapes, or the clause is not part of the contract.
"""

from __future__ import annotations

import argparse
import contextlib
import io
from pathlib import Path

import pytest

from .reports.schema import to_json

__all__ = ["ConformanceSession", "DEFAULT_ROWS"]

DEFAULT_ROWS = 2_000
_NO_CANDIDATE = (
    "no router to test: pass --candidate NAME or --candidate package.module:attr, e.g. "
    "pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route"
)
_SUITE_PACKAGE = "contracts.conformance"


def pytest_addoption(parser):
    group = parser.getgroup("router-contracts", "router contract conformance (pytest --pyargs contracts.conformance)")
    group.addoption("--candidate", metavar="NAME", help="router under test: a registered name or package.module:attr")
    group.addoption("--contract", help="contract to check (default: the one the candidate claims)")
    group.addoption("--rows", type=int, default=DEFAULT_ROWS, metavar="N", help=f"rows per case family (default {DEFAULT_ROWS:,})")
    group.addoption("--device", choices=("cpu", "cuda"), help="device (default: cuda when the candidate runs there and a GPU is present)")
    group.addoption("--conformance-seed", type=int, default=0, metavar="S", help="case seed (default 0)")
    group.addoption("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="run the candidate in a worker process (check --isolate; default: check's own default)")  # fmt: skip
    group.addoption("--logits", metavar="FILE", help="check on captured router logits (check --logits): the file's layers are the families")
    group.addoption("--logits-bias", metavar="FILE", help="with --logits: the correction bias (check --bias)")


class ConformanceSession:
    """The candidate under test and its per-family check bundles (one run per family, cached)."""

    def __init__(self, config, out_root: Path | None):
        self.spec = config.getoption("--candidate")
        self.rows = config.getoption("--rows")
        self.seed = config.getoption("--conformance-seed")
        self.isolate = config.getoption("--isolate")
        self.logits, self.logits_bias = config.getoption("--logits"), config.getoption("--logits-bias")
        self.out_root = out_root
        self.candidate = None
        self.contract = config.getoption("--contract") or "aiter"
        self.device = config.getoption("--device") or "cpu"
        self._runs: dict[str, dict] = {}
        if self.spec:
            from .candidates import CandidateLoadError, DuplicateCandidateError, get_candidate
            from .run.checks import device_for

            if self.rows < 1:
                raise pytest.UsageError(f"--rows must be >= 1, got {self.rows}")
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
            from .cases.captured import CapturedError, open_logits

            try:
                f = open_logits(self.logits, self.logits_bias)
            except CapturedError as exc:
                raise pytest.UsageError(f"--logits: {exc}") from None
            return [f.family(layer) for layer in range(f.layer_count)]
        from .cases.families import families_for

        return families_for(contract)

    def run(self, family: str) -> dict:
        """Check the candidate over one family (once per session); the summary, the bundle and the log.
        With --logits one check covers every layer of the file; each layer's test reads its family."""
        if self.logits:
            return self._run_captured()
        if family not in self._runs:
            from .run.checks import run_checks

            out = self.out_root / family
            log = io.StringIO()
            command = (f"python -m contracts check --candidate {self.spec} --contract {self.contract} --device {self.device} "
                       f"--families {family} --rows {self.rows} --seed {self.seed} --out {out}")  # fmt: skip
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                try:
                    checked = run_checks([self.spec], contract=self.contract, device=self.device, families=[family], rows=self.rows,
                                         seed=self.seed, isolate=self.isolate, out=out, progress=False, command=command)  # fmt: skip
                    summary, error = checked.results[0].summary, None
                except Exception as exc:  # noqa: BLE001 -- the test says what went wrong
                    summary, error = None, f"{type(exc).__name__}: {exc}"
            self._runs[family] = {"summary": summary, "bundle": out, "log": log.getvalue(), "error": error}
        return self._runs[family]

    def _run_captured(self) -> dict:
        if "captured" not in self._runs:
            from .run.checks import run_checks

            out = self.out_root / "captured"
            log = io.StringIO()
            bias = f" --bias {self.logits_bias}" if self.logits_bias else ""
            command = (f"python -m contracts check --candidate {self.spec} --contract {self.contract} --device {self.device} "
                       f"--logits {self.logits}{bias} --out {out}")  # fmt: skip
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                try:
                    checked = run_checks([self.spec], contract=self.contract, device=self.device, logits=self.logits, logits_bias=self.logits_bias,
                                         isolate=self.isolate, out=out, progress=False, command=command)  # fmt: skip
                    summary, error = checked.results[0].summary, None
                except Exception as exc:  # noqa: BLE001 -- the test says what went wrong
                    summary, error = None, f"{type(exc).__name__}: {exc}"
            self._runs["captured"] = {"summary": summary, "bundle": out, "log": log.getvalue(), "error": error}
        return self._runs["captured"]

    def assert_clause(self, family: str, clause: str) -> None:
        """Fail if any row of ``family`` breaks ``clause`` unexpectedly (see the module docstring)."""
        import oracle

        if self.candidate is None:
            pytest.skip(_NO_CANDIDATE)
        if clause not in self.clause_names:
            pytest.skip(f"clause {clause} is not part of contract {self.contract}")
        run = self.run(family)
        summary = run["summary"]
        if summary is None:
            pytest.fail(f"the check of family {family} did not run: {run['error']}\n{run['log']}", pytrace=False)
        if summary.status.value == "unavailable":
            pytest.skip(f"{summary.candidate} is unavailable on {summary.device}: {summary.reason or ''}")
        fam = summary.families.get(family)
        if fam is None or not fam.rows:
            skipped = fam.rows_skipped if fam else 0
            pytest.skip(f"{summary.candidate} does not serve the shapes of family {family} ({skipped:,} rows skipped)")
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
        declared = summary.expected_deviations.get(clause)
        if declared and fam.expected_clauses.get(clause, 0):
            pytest.xfail(f"declared deviation: {declared.reason}")


def pytest_configure(config):
    config._router_contracts = ConformanceSession(config, None)


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
        f"router-contracts: device {session.device}{f' ({gpu})' if gpu else ''}, {session.rows:,} rows per family, seed {session.seed}",
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
    """The session's candidate and its cached per-family runs."""
    session = request.config._router_contracts
    if session.out_root is None:
        session.out_root = tmp_path_factory.mktemp("router-contracts")
    return session



def _check_has_option(flag: str) -> bool:
    """Whether the check command has ``flag`` (for callers that pass check options through)."""
    from .commands.check import build_parser

    return any(flag in action.option_strings for action in build_parser()._actions)
