"""The harness contains its own errors (issue 55, part 2).

An exception of the harness's own code while it handles one candidate (the
oracle's expected answer, ``compare_case`` and its attribution, the tally,
the diagnosis, a report writer) ends that candidate as ERROR with error kind
``harness_error``, naming the stage and the case, with a replay line, the
traceback and its bundle; the next candidate is still checked, the index is
written and the command exits 1. Each stage gets a fault injected with
monkeypatch (raising once: the first candidate's handling meets it).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.reports.bundle import read_summary
from contracts.reports.schema import HARNESS_ERROR, Status
from contracts.run.checks import bundle_dirname, run_checks

ROOT = Path(__file__).resolve().parents[1]
BROKEN = "tests.broken_candidates:scaled_twice"  # FAILs on its weights: the comparison attributes, the diagnosis runs
GOOD = "torch-native"
SMALL = dict(families=["random_fp32"], rows=20, max_batch=1, progress=False)


class InjectedFault(RuntimeError):
    """The fault a test plants in the harness (never raised by a candidate)."""


def _raising_once(original):
    calls = []

    def fault(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise InjectedFault("planted in the harness by tests/test_harness_errors.py")
        return original(*args, **kwargs)

    return fault


def _plant(monkeypatch, stage: str, fault=_raising_once) -> None:
    """Make the harness raise in ``stage`` (the first time it gets there)."""
    import contracts.compare.attribution as attribution
    import contracts.compare.diagnosis as diagnosis
    import contracts.reports.markdown as markdown
    import contracts.run.candidate_check as check
    from contracts.run.tally import Tally

    where = {
        "oracle": (check, "expected_for"),
        "comparison": (check, "compare_case"),
        "attribution": (attribution, "attribute"),
        "tally": (Tally, "compared"),
        "diagnosis": (diagnosis, "diagnose"),
        "report": (markdown, "render_markdown"),
    }[stage]
    monkeypatch.setattr(*where, fault(getattr(*where)))


CASE_STAGES = ("oracle", "comparison", "attribution", "tally")  # raised while a case was in hand: the case is named


@pytest.mark.parametrize("stage", [*CASE_STAGES, "diagnosis", "report"])
def test_a_fault_of_the_harness_ends_that_candidate_as_error_and_the_run_goes_on(monkeypatch, tmp_path, stage):
    _plant(monkeypatch, stage)
    run = run_checks([BROKEN, GOOD], isolate=False, out=tmp_path / "run", **SMALL)

    first, second = run.summaries
    assert first.status is Status.ERROR, first
    e = first.error
    assert e.kind == HARNESS_ERROR, e
    assert "InjectedFault" in e.traceback and "planted in the harness" in e.message, e
    assert e.replay and "--candidate tests.broken_candidates:scaled_twice" in e.replay, e.replay
    if stage in CASE_STAGES:  # the case in hand: its id, and in words its family, batch size, dtype and seed
        assert e.case.startswith("random_fp32:"), e.case
        assert f"--replay {e.case}" in e.replay, e.replay
        assert "family random_fp32" in e.message and "batch size" in e.message and "fp32" in e.message and "seed" in e.message, e.message
    assert "harness" in e.message
    on_disk = read_summary(tmp_path / "run" / bundle_dirname(BROKEN) / "summary.json")
    assert on_disk.status is Status.ERROR and on_disk.error.kind == HARNESS_ERROR and "InjectedFault" in on_disk.error.traceback
    assert second.candidate == GOOD and second.status is Status.PASS and second.rows_checked > 0, second
    assert run.failed
    index = json.loads((tmp_path / "run" / "index.json").read_text())
    assert [c["status"] for c in index["candidates"]] == ["error", "pass"], index


def test_a_fault_keeps_the_rows_checked_before_it(monkeypatch, tmp_path):
    import contracts.run.candidate_check as check

    original, calls = check.compare_case, []

    def third_case_raises(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise InjectedFault("planted")
        return original(*args, **kwargs)

    monkeypatch.setattr(check, "compare_case", third_case_raises)
    s = run_checks([GOOD], isolate=False, out=tmp_path / "one", **SMALL).summaries[0]
    assert s.status is Status.ERROR and s.error.kind == HARNESS_ERROR
    assert s.rows_checked > 0, s  # the two cases compared before the fault still count


def test_a_report_writer_that_always_fails_still_leaves_a_summary_for_every_candidate(monkeypatch, tmp_path):
    def always(original):
        def fault(*args, **kwargs):
            raise InjectedFault("the markdown writer is broken")

        return fault

    _plant(monkeypatch, "report", fault=always)
    run = run_checks([BROKEN, GOOD], isolate=False, out=tmp_path / "run", **SMALL)
    for s in run.summaries:
        assert s.status is Status.ERROR and s.error.kind == HARNESS_ERROR, s
        assert "report" in s.error.message, s.error.message
        on_disk = read_summary(tmp_path / "run" / bundle_dirname(s.candidate) / "summary.json")
        assert on_disk.error.kind == HARNESS_ERROR
    assert (tmp_path / "run" / "index.json").exists()


def test_a_fault_of_the_diagnosis_keeps_the_counts_of_the_run(monkeypatch, tmp_path):
    _plant(monkeypatch, "diagnosis")
    s = run_checks([BROKEN], isolate=False, out=tmp_path / "one", **SMALL).summaries[0]
    assert s.error.kind == HARNESS_ERROR and s.mismatched_rows > 0  # the rows were compared before the diagnosis raised


def test_the_check_command_exits_1_and_prints_the_harness_error(monkeypatch, tmp_path, capsys):
    from contracts.commands.check import main

    _plant(monkeypatch, "comparison")
    code = main(["--candidate", f"{BROKEN},{GOOD}", "--families", "random_fp32", "--rows", "20", "--max-batch", "1",
                 "--no-isolate", "--out", str(tmp_path / "cli"), "--quiet"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 1, out
    text = out.out + out.err
    assert "harness_error" in text and "ERROR" in text and "PASS" in text, text
    assert f"harness error: {BROKEN}: rerun with: python -m contracts.check --candidate {BROKEN}" in out.err, out.err
    assert (tmp_path / "cli" / "index.json").exists()


def test_a_fault_writing_the_index_is_said_and_fails_the_run(monkeypatch, tmp_path):
    import contracts.run.checks as checks

    def broken_index(*args, **kwargs):
        raise InjectedFault("the index writer is broken")

    monkeypatch.setattr(checks, "write_index", broken_index)
    run = run_checks([GOOD, "oracle"], isolate=False, out=tmp_path / "run", **SMALL)
    assert [s.status for s in run.summaries] == [Status.PASS, Status.PASS]
    assert run.index_error is not None and "the index writer is broken" in run.index_error.message
    assert run.failed  # exit 1: the run's record is incomplete
    assert all((tmp_path / "run" / bundle_dirname(s.candidate) / "summary.json").exists() for s in run.summaries)


@pytest.mark.slow  # a command in a subprocess with two worker processes: ~15 s on the 2-core machine
def test_the_command_in_a_subprocess_survives_a_fault_of_the_comparison(tmp_path):
    """The default (isolated) command, as a user runs it: the fault is planted in the parent before ``main`` runs."""
    plant = ("import sys, contracts.run.candidate_check as c\n"
             "def boom(*a, **k):\n    raise RuntimeError('planted: compare_case raised')\n"
             "c.compare_case = boom\n"
             "from contracts.commands import main\nsys.exit(main(sys.argv[1:]))\n")  # fmt: skip
    out = tmp_path / "sub"
    done = subprocess.run(
        [sys.executable, "-c", plant, "check", "--candidate", f"{BROKEN},{GOOD}", "--families", "random_fp32", "--rows", "20",
         "--max-batch", "1", "--out", str(out), "--quiet"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    assert "Traceback" not in text, text
    index = json.loads((out / "index.json").read_text())
    assert [c["status"] for c in index["candidates"]] == ["error", "error"], index  # the fault is planted for every case
    for name in (BROKEN, GOOD):
        s = read_summary(out / bundle_dirname(name) / "summary.json")
        assert s.error.kind == HARNESS_ERROR and "--replay" in s.error.replay, s.error


# ---------------------------------------------------------------- the matrix: its own loop, the same containment


def _matrix(tmp_path):
    from contracts.run.matrix import run_matrix

    return run_matrix([BROKEN, GOOD], families=["random_fp32"], rows=20, max_batch=1, isolate=False, out=tmp_path / "m", progress=False)


def test_a_fault_of_one_candidates_comparison_in_the_matrix_ends_that_candidate_only(monkeypatch, tmp_path):
    import contracts.compare as compare

    monkeypatch.setattr(compare, "compare_case", _raising_once(compare.compare_case))
    done = _matrix(tmp_path)
    broken, good = done.report.candidates
    assert broken.status is Status.ERROR and broken.error.kind == HARNESS_ERROR, broken
    assert broken.error.case.startswith("random_fp32:") and f"--replay {broken.error.case}" in broken.error.replay
    assert good.status is Status.PASS and good.rows_answered > 0, good
    assert done.errored and (tmp_path / "m" / "matrix.json").exists()


def test_a_fault_of_the_oracle_in_the_matrix_ends_every_candidate_with_the_bundle_written(monkeypatch, tmp_path):
    import contracts.compare as compare

    monkeypatch.setattr(compare, "expected_for", _raising_once(compare.expected_for))
    done = _matrix(tmp_path)
    assert [(m.status, m.error.kind) for m in done.report.candidates] == [(Status.ERROR, HARNESS_ERROR)] * 2
    assert all("--candidate" in m.error.replay for m in done.report.candidates)
    assert done.errored and (tmp_path / "m" / "matrix.json").exists()
