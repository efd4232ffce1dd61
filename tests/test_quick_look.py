"""``check --quick`` (issue 58, item 3): a first look in seconds that still draws every family, still reaches every
regime of every field, runs each pinned dtype pair, layout, call context and call option once, says what it left out,
and is never read as a full check; and the planned rows printed before every check.

The quick look's speed is measured by ``benchmarks/quick_look.py``, never by a timed test.
"""

from __future__ import annotations

import json

import pytest

import oracle
from contracts.cases.batch_sizes import launch_class_sizes
from contracts.cases.families import families_for
from contracts.cases.launch_points import launch_points
from contracts.cases.max_batch import CPU_MAX_BATCH
from contracts.cases.plan import _seed, iter_plan
from contracts.cases.quick_look import QUICK_ROWS
from contracts.commands import main as contracts_main
from tests.test_plan_reaches_every_field import unreached

CONTRACTS = ("aiter", "deepseek-v3")


def _plan(name: str, *, quick: bool, max_batch: int = CPU_MAX_BATCH):
    c = oracle.get_contract(name)
    groups = dict(n_group=c.n_group, topk_group=c.topk_group) if c.is_grouped else {}
    return list(iter_plan(families_for(c), QUICK_ROWS if quick else 250_000, 0, c.experts, c.topk, bulk_rows=16_384, max_batch=max_batch,
                          bias=c.has_bias, admitted=c.admitted_options(), contract=c.name, quick=quick, **groups))  # fmt: skip


def _pins(specs) -> set[tuple]:
    """Each distinct pin of a plan: its family and replay tags (a dtype pair, layout, call context or option)."""
    return {(s.family, *s.tags) for s in specs if s.tags and not s.bulk}


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_quick_plan_draws_every_family_and_every_pin_of_the_full_plan_in_a_fraction_of_its_rows(name):
    full, quick = _plan(name, quick=False), _plan(name, quick=True)
    assert {s.family for s in quick} == {s.family for s in full}
    assert _pins(quick) == _pins(full), _pins(full) - _pins(quick)
    c = oracle.get_contract(name)
    classes = set(launch_class_sizes(CPU_MAX_BATCH, launch_points(c.experts, c.topk, c.name)))
    assert classes <= {s.rows for s in quick if s.tags}, "every launch class meets some pinned case"
    assert 0 in {s.rows for s in quick}, "the empty batch"
    assert sum(s.rows for s in quick) * 5 < sum(s.rows for s in full) and len(quick) * 3 < len(full), (len(quick), len(full))
    assert max(s.rows for s in quick) < CPU_MAX_BATCH, "no max-batch case (said in its notes)"


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_quick_plans_pinned_cases_are_the_full_plans_own(name):
    """Same seeds, same replay ids: a quick FAIL's replay line reruns a case of the full check. Only the coverage
    cases, cut to the smaller budget, may differ in rows."""
    full = {s.replay_id for s in _plan(name, quick=False)}
    coverage = {(f, _seed(0, f, i)) for f in families_for(oracle.get_contract(name)) for i in range(64)}
    for s in _plan(name, quick=True):
        assert s.replay_id in full or (s.family, s.case_seed) in coverage, s.replay_id


@pytest.mark.parametrize("name", CONTRACTS)
def test_the_quick_plan_fails_every_regime_of_every_field(name, monkeypatch):
    """What tests/test_plan_reaches_every_field.py asks of the full plan: a router implementing any single-field
    variant of the contract (ties, NaN rule, bias, groups, scaling, renormalize, scoring ...) fails some quick case."""
    import tests.test_plan_reaches_every_field as reach

    monkeypatch.setattr(reach, "plan_specs", lambda c, max_batch: _plan(c.name, quick=True, max_batch=max_batch))
    assert not unreached(oracle.get_contract(name), 1025)


def _check(capsys, argv):
    try:
        code = contracts_main(argv)
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_a_quick_check_is_marked_quick_in_summary_console_and_report(tmp_path, capsys):
    out = tmp_path / "q"
    code, stdout, stderr = _check(capsys, ["check", "--candidate", "oracle", "--quick", "--families", "nan_sparse", "--no-isolate",
                                           "--out", str(out)])  # fmt: skip
    assert code == 0, stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["quick"] is True and summary["options"]["quick"] is True and summary["options"]["rows"] == QUICK_ROWS
    assert any("a quick PASS is not a full check" in n for n in summary["notes"])
    assert any(n.startswith("left out by --quick") for n in summary["notes"])
    assert "PASS (quick)" in stdout and "a quick PASS is not a full check" in stdout
    assert "planned" in stderr and "a quick look" in stderr
    assert (out / "report.md").read_text().startswith("# PASS (quick)")


@pytest.mark.slow  # a quick check per planted router (2-4 s each)
@pytest.mark.parametrize("router", ["wrong_tie_order", "nan_like_neg_inf", "other_tie_rule_above_1024_rows"])
def test_a_broken_router_fails_a_quick_check(tmp_path, capsys, router, monkeypatch):
    """Each wrong in another clause (tie order, the NaN rule; the last only at more than 1,024 rows, a launch class
    the quick look meets at its boundary). One family each, the one that shows it (the whole quick look: the benchmark)."""
    monkeypatch.delenv("ROUTER_CONTRACTS_MAX_BATCH", raising=False)  # the product's default sweep: its boundaries to 1,585
    family = {"wrong_tie_order": "all_equal", "nan_like_neg_inf": "nan_neg_inf_bias", "other_tie_rule_above_1024_rows": "all_equal"}[router]
    code, stdout, stderr = _check(capsys, ["check", "--candidate", f"tests.broken_candidates:{router}", "--contract", "aiter", "--quick",
                                           "--families", family, "--no-isolate", "--out", str(tmp_path / "q")])  # fmt: skip
    assert code == 1 and "FAIL (quick)" in stdout, (code, stdout, stderr)


def test_every_check_prints_its_planned_cases_and_rows_before_it_runs(tmp_path, capsys):
    out = tmp_path / "c"
    code, _, stderr = _check(capsys, ["check", "--candidate", "oracle", "--rows", "40", "--families", "nan_sparse", "--no-isolate",
                                      "--out", str(out)])  # fmt: skip
    assert code == 0, stderr
    rows = json.loads((out / "summary.json").read_text())["rows_checked"]
    first = stderr.splitlines()[0]
    assert "planned" in first and f"{rows:,} rows" in first and "--rows 40" in first and "pinned cases on top" in first, first
    _check(capsys, ["check", "--candidate", "oracle", "--rows", "40", "--families", "nan_sparse", "--no-isolate", "--quiet", "--out", str(out), "--force"])
    assert "planned" not in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--rows", "2000"], ["--rows", "250000"], ["--replay", "nan_sparse:1:4"], ["--logits", "x.npy"]],
                         ids=["rows", "rows-default-value", "replay", "logits"])  # fmt: skip
def test_quick_with_what_it_cannot_go_with_is_one_line_exit_2(tmp_path, capsys, extra):
    code, _, stderr = _check(capsys, ["check", "--candidate", "oracle", "--quick", *extra, "--out", str(tmp_path / "x")])
    assert code == 2 and "--quick" in stderr and len(stderr.strip().splitlines()) == 1, (code, stderr)
    assert "Traceback" not in stderr


def test_matrix_quick_with_rows_is_one_line_exit_2(tmp_path, capsys):
    code, _, stderr = _check(capsys, ["matrix", "--candidate", "oracle,torch-native", "--quick", "--rows", "100", "--out", str(tmp_path / "m")])
    assert code == 2 and "--quick" in stderr and len(stderr.strip().splitlines()) == 1, (code, stderr)


def test_a_quick_matrix_is_marked_quick(tmp_path, capsys):
    out = tmp_path / "m"
    code, stdout, stderr = _check(capsys, ["matrix", "--candidate", "oracle,torch-native", "--quick", "--families", "nan_sparse,all_equal",
                                           "--no-isolate", "--out", str(out)])  # fmt: skip
    assert code == 0, stderr
    assert json.loads((out / "matrix.json").read_text())["quick"] is True
    assert "PASS (quick)" in stdout and "a quick look" in stdout and "planned" in stderr
