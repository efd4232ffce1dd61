"""pytest plugin: run the routing-contract conformance suite against your router.

::

    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate mypkg.router:route
    pytest -p contracts.pytest_plugin --pyargs contracts.conformance --candidate oracle --contract serial -k tie_order

Options (group "router-contracts"):

- ``--candidate NAME``: a registered candidate or ``package.module:attr`` (a
  routing callable or a ``contracts.Candidate``). Without it the conformance
  tests skip, saying how to pass one.
- ``--contract aiter|serial``: the contract to hold it to (default: the one it claims).
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
``contracts.check`` (a bundle per family under pytest's temporary folder),
and every clause test of that family reads its verdict from that bundle:

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
import json
from pathlib import Path

import pytest

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
    group.addoption("--contract", choices=("aiter", "serial"), help="contract to check (default: the one the candidate claims)")
    group.addoption("--rows", type=int, default=DEFAULT_ROWS, metavar="N", help=f"rows per case family (default {DEFAULT_ROWS:,})")
    group.addoption("--device", choices=("cpu", "cuda"), help="device (default: cuda when the candidate runs there and a GPU is present)")
    group.addoption("--conformance-seed", type=int, default=0, metavar="S", help="case seed (default 0)")
    group.addoption("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="run the candidate in a worker process (contracts.check --isolate; default: check's own default)")  # fmt: skip


def _device_for(candidate, requested: str | None) -> str:
    import torch

    if requested:
        return requested
    if "cuda" in candidate.devices and torch.cuda.is_available():
        return "cuda"
    return "cpu" if "cpu" in candidate.devices else candidate.devices[0]


class ConformanceSession:
    """The candidate under test and its per-family check bundles (one run per family, cached)."""

    def __init__(self, config, out_root: Path | None):
        self.spec = config.getoption("--candidate")
        self.rows = config.getoption("--rows")
        self.seed = config.getoption("--conformance-seed")
        self.isolate = config.getoption("--isolate")
        self.out_root = out_root
        self.candidate = None
        self.contract = config.getoption("--contract") or "aiter"
        self.device = config.getoption("--device") or "cpu"
        self._runs: dict[str, dict] = {}
        if self.spec:
            from .registry import CandidateLoadError, DuplicateCandidateError, get_candidate

            if self.rows < 1:
                raise pytest.UsageError(f"--rows must be >= 1, got {self.rows}")
            try:
                self.candidate = get_candidate(self.spec)
            except (CandidateLoadError, DuplicateCandidateError) as exc:
                raise pytest.UsageError(f"--candidate {self.spec}: {exc}") from None
            self.contract = config.getoption("--contract") or self.candidate.contract
            self.device = _device_for(self.candidate, config.getoption("--device"))

    @property
    def clause_names(self) -> tuple[str, ...]:
        import oracle

        return oracle.get_contract(self.contract).clause_names

    def run(self, family: str) -> dict:
        """Check the candidate over one family (once per session); the bundle's summary, folder and log."""
        if family not in self._runs:
            from . import check

            out = self.out_root / family
            argv = ["--candidate", self.spec, "--contract", self.contract, "--device", self.device, "--families", family,
                    "--rows", str(self.rows), "--seed", str(self.seed), "--out", str(out), "--quiet"]  # fmt: skip
            if self.isolate is not None and _check_has_option("--isolate"):
                argv.append("--isolate" if self.isolate else "--no-isolate")
            log = io.StringIO()
            with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
                code = check.main(argv)
            summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else None
            self._runs[family] = {"exit_code": code, "summary": summary, "bundle": out, "log": log.getvalue(), "argv": argv}
        return self._runs[family]

    def assert_clause(self, family: str, clause: str) -> None:
        """Fail if ``family`` has unexpected mismatches attributed to ``clause`` (see the module docstring)."""
        import oracle

        if self.candidate is None:
            pytest.skip(_NO_CANDIDATE)
        if clause not in self.clause_names:
            pytest.skip(f"clause {clause} is not part of contract {self.contract}")
        run = self.run(family)
        summary = run["summary"]
        if summary is None:
            pytest.fail(f"contracts.check exited {run['exit_code']} without a bundle:\n{run['log']}", pytrace=False)
        if summary["status"] == "unavailable":
            pytest.skip(f"{summary['candidate']} is unavailable on {summary['device']}: {summary.get('reason', '')}")
        fam = summary["families"].get(family, {})
        if not fam.get("rows"):
            pytest.skip(f"{summary['candidate']} does not serve the shapes of family {family} ({fam.get('rows_skipped', 0):,} rows skipped)")
        bad = fam.get("clauses", {}).get(clause, 0)
        if bad:
            from .junit import first_mismatch

            statement = next((c.statement for c in oracle.get_contract(self.contract).clauses if c.name == clause), "")
            pytest.fail(
                f"clause {clause} of contract {self.contract}: {bad:,} of {fam['rows']:,} rows of family {family} mismatch "
                f"({summary['candidate']} on {summary['device']}, seed {self.seed})\n"
                f"clause: {statement}\n"
                f"first mismatch: {first_mismatch(run['bundle'], summary, family, clause)}\n"
                f"bundle: {run['bundle']}",
                pytrace=False,
            )
        declared = (summary.get("expected_deviations") or {}).get(clause)
        if declared and _declared_rows(run["bundle"], family, clause):
            pytest.xfail(f"declared deviation: {declared.get('reason', '')}")


def _check_has_option(flag: str) -> bool:
    from . import check

    return any(flag in action.option_strings for action in check.build_parser()._actions)


def _declared_rows(bundle: Path, family: str, clause: str) -> int:
    from .junit import _read_cells

    cells = _read_cells(bundle)
    if cells.empty:
        return 0
    hit = cells[(cells["family"] == family) & (cells["clause"] == clause) & (cells["verdict"] == "expected")]
    return int(hit[["case", "row"]].drop_duplicates().shape[0])


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
    from .families import FAMILIES

    metafunc.parametrize("contract_family", list(FAMILIES), ids=list(FAMILIES))


@pytest.fixture(scope="session")
def conformance(request, tmp_path_factory) -> ConformanceSession:
    """The session's candidate and its cached per-family runs."""
    session = request.config._router_contracts
    if session.out_root is None:
        session.out_root = tmp_path_factory.mktemp("router-contracts")
    return session

