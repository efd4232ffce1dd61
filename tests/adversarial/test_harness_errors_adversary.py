"""Adversary of issue 55: a router whose answer makes the harness's own code raise must not escape its verdict.

On main at c7e47c9 the router below (the oracle's answer, its weights a nested
tensor) made the in-process comparison raise: the run ended with a
traceback, the router's FAIL was never written, the candidate after it was
never checked and no index was written. It must end ERROR (``harness_error``)
or FAIL, never PASS; the run goes on and the command exits non-zero.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.reports.schema import HARNESS_ERROR, Status
from contracts.run.checks import run_checks

ROOT = Path(__file__).resolve().parents[2]
ADV = "tests.adversarial.harness_faults"
SMALL = dict(families=["random_fp32"], rows=20, max_batch=1, progress=False)


def _never_passes(s) -> None:
    assert s.status in (Status.ERROR, Status.FAIL), s
    if s.status is Status.ERROR:
        assert s.error.kind == HARNESS_ERROR and s.error.replay, s.error


def test_an_answer_that_makes_the_comparison_raise_in_process_is_no_pass_and_the_run_goes_on(tmp_path):
    run = run_checks([f"{ADV}:nested_weights", "oracle"], isolate=False, out=tmp_path / "run", **SMALL)
    first, second = run.summaries
    _never_passes(first)
    assert second.status is Status.PASS and second.rows_checked > 0, second
    assert run.failed
    index = json.loads((tmp_path / "run" / "index.json").read_text())
    assert index["candidates"][0]["status"] in ("error", "fail") and index["candidates"][1]["status"] == "pass", index


def test_the_command_exits_1_for_it(tmp_path, capsys):
    from contracts.commands.check import main

    code = main(["--candidate", f"{ADV}:nested_weights,oracle", "--families", "random_fp32", "--rows", "20", "--max-batch", "1",
                 "--no-isolate", "--out", str(tmp_path / "cli"), "--quiet"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    assert (Path(tmp_path) / "cli" / "index.json").exists()


@pytest.mark.slow  # the command as a user runs it, supervised in a child process: ~10 s on the 2-core machine
def test_the_command_as_run_survives_it(tmp_path):
    out = tmp_path / "sub"
    done = subprocess.run(
        [sys.executable, "-m", "contracts", "check", "--candidate", f"{ADV}:nested_weights,oracle", "--families", "random_fp32",
         "--rows", "20", "--max-batch", "1", "--no-isolate", "--out", str(out), "--quiet"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == 1 and "Traceback" not in text, text
    index = json.loads((out / "index.json").read_text())
    assert [c["status"] for c in index["candidates"]][1] == "pass" and index["candidates"][0]["status"] in ("error", "fail"), index


@pytest.mark.slow  # the conformance suite under pytest in a subprocess, its check a supervised command: ~15 s
def test_the_pytest_plugin_fails_it_naming_the_harness_error(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "contracts.pytest_plugin", "--pyargs", "contracts.conformance",
         "--candidate", f"{ADV}:nested_weights", "--rows", "16", "--max-batch", "1", "--no-isolate", "-q", "-rf", "-k", "verdict"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    text = done.stdout + done.stderr
    assert done.returncode == 1, text
    if "ended FAIL" in text:  # once the comparison reads such an answer: its validity mismatches
        assert "validity" in text, text
    else:  # until then: the harness's fault, named, with the line that replays it (never "the check ended without a bundle")
        assert "ended ERROR: harness_error: " in text, text
        assert "replay: " in text and "python -m contracts.check --candidate tests.adversarial.harness_faults:nested_weights" in text, text
