"""contracts.pytest_plugin with the contracts.conformance suite, run as a user would (pytest in a subprocess)."""

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import oracle
from contracts.pytest_plugin import _check_has_option

ROOT = Path(__file__).resolve().parent.parent
SUITE = ["-p", "contracts.pytest_plugin", "--pyargs", "contracts.conformance"]

BROKEN = '''
"""The aiter contract, except that exact ties among finite values go to the lowest expert id."""
import torch
import oracle


def route(scores, bias, topk, renormalize, routed_scaling_factor):
    sig, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking).long()
    experts = keys.shape[1]
    lowest_id_first = torch.arange(experts - 1, -1, -1, device=keys.device)
    aiter_first = experts - 1 - oracle.tie_priority(experts, "aiter").to(keys.device).long()
    second = torch.where(torch.isfinite(ranking), lowest_id_first, aiter_first)
    ids = (keys * experts + second).topk(topk, dim=1).indices
    w = sig.gather(1, ids)
    if renormalize:
        total = w.sum(dim=1, keepdim=True)
        w = torch.where(total > 0, w / total, w)
    return (w * routed_scaling_factor).float(), ids.int()
'''


def _pytest(cwd, *args, timeout=240):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(cwd)])}
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr


def test_every_clause_has_a_conformance_test():
    import contracts.conformance as suite

    names = set()
    for info in pkgutil.iter_modules(suite.__path__):
        if info.name.startswith("test_"):
            module = importlib.import_module(f"contracts.conformance.{info.name}")
            names |= {n[len("test_") :] for n in dir(module) if n.startswith("test_")}
    # generated from the contracts' clause lists (the grouped contracts' group_* clauses included), plus the verdict
    every = {str(c) for name in oracle.BUILTIN_CONTRACTS for c in oracle.get_contract(name).clause_names}
    assert names == every | {"check_verdict"}
    assert any(n.startswith("group_") for n in names)


@pytest.mark.slow  # a pytest run in a subprocess with its check in a worker: ~10 s
def test_the_oracle_conforms_and_the_header_names_it(tmp_path):
    code, out = _pytest(tmp_path, *SUITE, "--candidate", "oracle", "--rows", "8", "--max-batch", "2")
    assert code == 0, out
    assert "router-contracts: candidate oracle, contract aiter" in out
    assert "router-contracts: device cpu" in out or "router-contracts: device cuda" in out
    # every aiter clause x every family of the aiter contract passes, and the verdict; nothing skips
    from contracts.cases.families import families_for

    families, clauses = len(families_for(oracle.get_contract("aiter"))), len(oracle.get_contract("aiter").clauses)
    assert re.search(rf"\b{clauses * families + 1} passed in\b", out), out


@pytest.mark.slow  # a pytest run in a subprocess with its check: ~14 s
def test_a_broken_tie_order_fails_the_tie_order_tests_only(tmp_path):
    (tmp_path / "broken_router.py").write_text(textwrap.dedent(BROKEN))
    fast = ["--no-isolate"] if _check_has_option("--isolate") else []
    code, out = _pytest(tmp_path, *SUITE, "--candidate", "broken_router:route", "--rows", "16", "--max-batch", "2", *fast, "-q", "-rf")
    assert code == 1, out
    failed = re.findall(r"^FAILED (\S+)", out, flags=re.M)
    assert failed and all("test_tie_order[" in f or "test_check_verdict" in f for f in failed), failed
    assert any("test_check_verdict" in f for f in failed), failed
    assert "test_tie_order[all_equal]" in " ".join(failed)
    assert "first mismatch: case all_equal:" in out
    assert "replay: python -m contracts.check --candidate broken_router:route --contract aiter" in out


@pytest.mark.slow  # a pytest run in a subprocess with its check: ~6 s
def test_k_selects_the_tie_order_tests(tmp_path):
    code, out = _pytest(tmp_path, *SUITE, "--candidate", "oracle", "-k", "tie_order", "--collect-only", "-q")
    assert code == 0, out
    ids = [line for line in out.splitlines() if "::" in line]
    import oracle
    from contracts.cases.families import families_for

    # the oracle is checked under aiter: the grouped families do not apply there
    assert len(ids) == len(families_for(oracle.get_contract("aiter"))) and all("test_tie_order[" in i for i in ids)


@pytest.mark.slow  # a pytest run in a subprocess with its check in a worker: ~13 s
def test_one_check_serves_every_test_and_its_verdict_is_the_checks(tmp_path):
    """A router that raises on every call fails its tests (it used to get "10 passed"); one check ran for all of them."""
    (tmp_path / "raising_router.py").write_text("def route(*args, **kwargs):\n    raise RuntimeError('no')\n")
    code, out = _pytest(tmp_path, *SUITE, "--candidate", "raising_router:route", "--rows", "16", "--max-batch", "2", "--no-isolate",
                        "-q", "-rf", "-k", "verdict or tie_order or selection", "--basetemp", str(tmp_path / "t"))  # fmt: skip
    assert code == 1, out
    assert re.search(r"\b\d+ failed\b", out) and " passed" not in out, out
    assert "ended ERROR" in out, out
    assert len(list((tmp_path / "t").rglob("summary.json"))) == 1  # one check for the whole session


@pytest.mark.slow  # a pytest run in a subprocess with its check: ~7 s
def test_a_grouped_contract_gets_its_group_tests(tmp_path):
    code, out = _pytest(tmp_path, *SUITE, "--candidate", "oracle", "--contract", "deepseek-v3", "-k", "group_", "--collect-only", "-q")
    assert code == 0, out
    assert "test_group_" in out, out


@pytest.mark.slow  # three pytest runs in subprocesses: ~15 s
def test_without_a_candidate_the_suite_skips_saying_how(tmp_path):
    code, out = _pytest(tmp_path, *SUITE, "-q", "-rs", "-k", "all_equal")
    assert code == 0, out
    assert "pass --candidate NAME or --candidate package.module:attr" in out
    # Installed, the package registers the plugin (a pytest11 entry point), so a bare run
    # already knows --candidate; with the plugin switched off the suite says how to load it.
    code, out = _pytest(tmp_path, "--pyargs", "contracts.conformance", "-q", "-rs", "-k", "tie_order")
    assert code == 0, out
    assert "pass --candidate NAME or --candidate package.module:attr" in out
    code, out = _pytest(tmp_path, "-p", "no:contracts.pytest_plugin", "--pyargs", "contracts.conformance", "-q", "-rs", "-k", "tie_order")
    assert code == 0, out
    assert "needs its plugin: pytest -p contracts.pytest_plugin" in out


def test_a_candidate_that_cannot_be_loaded_is_a_usage_error(tmp_path):
    code, out = _pytest(tmp_path, *SUITE, "--candidate", "no_such_module:route", "-q")
    assert code == 4, out
    assert "could not import 'no_such_module'" in out
