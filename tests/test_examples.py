"""The routers of examples/ do what examples/README.md and the front page say (issue 58).

- ``examples.deepseek_v3_router:route``, a plain callable ranked by torch.topk, FAILs under ``deepseek-v3`` on exactly
  the clauses the README names (group_tie_order, tie_order, nan_last, group_mask) and on no other.
- ``examples.declared_router:candidate``, the same router as a Candidate declaring those four, PASSes under its own
  contract, with the declared rows counted as declared.
- ``examples.declared_router:undeclared``, without the declarations, FAILs naming the same four.

Each runs a small plan (100 rows and the pinned cases up to a batch of 8, on three families: about 170 rows), in
process. A passing check takes 1-2 s; a failing one 5-12 s on the shared 2-core machine, nearly all of it the
comparison and diagnosis of ~150 mismatched rows, so the exact-clause tests are slow and a fast test runs the plain
callable on a smaller plan (28 rows), where not every clause is drawn.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from contracts.commands import check

ROOT = Path(__file__).resolve().parent.parent
TORCH_TOPK_CLAUSES = {"group_tie_order", "tie_order", "nan_last", "group_mask"}
SMALL = ["--rows", "100", "--max-batch", "8", "--families", "all_equal,nan_sparse,tie_pool_straddle", "--device", "cpu",
         "--no-isolate", "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def _examples_importable(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT))  # the README runs them from the clone's root, where sys.path holds "."


def _check(tmp_path, *args, plan=SMALL) -> tuple[int, dict]:
    out = tmp_path / "bundle"
    code = check.main([*args, *plan, "--out", str(out)])
    return code, json.loads((out / "summary.json").read_text())


def _broken(summary) -> set[str]:
    return {clause for clause, rows in summary["clauses"].items() if rows}


def test_the_plain_callable_fails_on_the_readmes_clauses_only_on_a_tiny_plan(tmp_path):
    tiny = ["--rows", "10", "--max-batch", "2", *SMALL[4:]]
    code, s = _check(tmp_path, "--candidate", "examples.deepseek_v3_router:route", "--contract", "deepseek-v3", plan=tiny)
    assert code == 1 and s["status"] == "fail"
    assert _broken(s) and _broken(s) <= TORCH_TOPK_CLAUSES, s["clauses"]


@pytest.mark.slow  # the comparison and diagnosis of ~150 mismatched rows: 5-12 s on the shared 2-core machine
def test_the_plain_callable_fails_on_exactly_the_clauses_the_readme_names(tmp_path):
    code, s = _check(tmp_path, "--candidate", "examples.deepseek_v3_router:route", "--contract", "deepseek-v3")
    assert code == 1 and s["status"] == "fail"
    assert _broken(s) == TORCH_TOPK_CLAUSES, s["clauses"]
    readme = (ROOT / "examples" / "README.md").read_text(encoding="utf-8")
    named = set(re.findall(r"^\| `(\w+)` \| [\d,]+ \|", readme, re.MULTILINE))
    assert named == TORCH_TOPK_CLAUSES, f"examples/README.md's clause table names {sorted(named)}"


def test_the_declared_candidate_passes_under_its_declarations(tmp_path):
    code, s = _check(tmp_path, "--candidate", "examples.declared_router:candidate")
    assert code == 0 and s["status"] == "pass" and s["contract"] == "deepseek-v3"
    assert s["mismatched_rows"] == 0 and s["expected_deviation_rows"] > 0
    seen = {clause for clause, rows in s["expected_deviations"].items() if rows}
    assert seen == TORCH_TOPK_CLAUSES, s["expected_deviations"]


@pytest.mark.slow  # as the plain callable's exact-clause test: 5-12 s
def test_the_same_candidate_without_its_declarations_fails_naming_them(tmp_path):
    code, s = _check(tmp_path, "--candidate", "examples.declared_router:undeclared")
    assert code == 1 and s["status"] == "fail" and s["expected_deviation_rows"] == 0
    assert _broken(s) == TORCH_TOPK_CLAUSES, s["clauses"]
