"""Robustness of a run: bounded memory, determinism findings, interrupted runs that keep what ran."""

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import oracle
from contracts import cases as families
from contracts.candidates import Candidate, get_candidate
from contracts.candidates.worker import Worker
from contracts.cases import iter_plan, planned_rows
from contracts.check import main
from contracts.reports.json_records import to_json
from contracts.run.candidate_check import check_candidate
from contracts.run.checks import bundle_dirname
from contracts.run.tally import DETAILS_PER_CLAUSE

REPO = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------- bounded memory


@pytest.mark.parametrize(
    "names, rows, seed",
    [
        (list(families.FAMILIES), 50_000, 0),
        (list(families.FAMILIES), 7, 3),
        (["batch_sizes"], 200_000, 11),
        (["all_equal", "random_fp32"], 1, 5),
    ],
)
def test_lazy_plan_is_the_plan(names, rows, seed):
    lazy = iter_plan(names, rows, seed, 896, 16)
    assert iter(lazy) is lazy  # a generator, not a list
    specs = list(lazy)
    assert specs == families.plan(names, rows, seed, 896, 16)
    assert sum(s.rows for s in specs) == planned_rows(names, rows)


def test_hundred_million_rows_plan_without_building_the_plan():
    lazy = iter_plan(list(families.FAMILIES), 100_000_000, 0, 896, 16)
    first = [next(lazy) for _ in range(5)]
    assert [s.rows for s in first] == [1, 64, 1024, 4096, 1]
    assert planned_rows(list(families.FAMILIES), 100_000_000) == 100_000_000


def _spec_stream(pulled):
    """An endless stream of small cases that counts how many were pulled."""
    for spec in iter_plan(["all_equal"], 10**12, 0, 64, 4):
        pulled.append(spec)
        yield spec


def test_runner_consumes_specs_one_at_a_time_and_stops_when_asked():
    pulled = []
    stop_after = 6
    result = check_candidate(
        get_candidate("oracle"), _spec_stream(pulled), contract="aiter", device="cpu",
        should_stop=lambda: "SIGINT" if len(pulled) >= stop_after else None,
    )  # fmt: skip
    s = to_json(result.summary)
    assert len(pulled) == stop_after  # an endless plan is never materialized
    assert s["status"] == "interrupted" and s["interrupted"] == "SIGINT"
    assert s["rows_checked"] == sum(p.rows for p in pulled) and s["mismatched_rows"] == 0


def test_a_stop_keeps_an_answer_the_worker_already_sent():
    # A stop that comes while the parent is still busy with the case before must not throw away the next case's
    # answer, already in the pipe: "stop after the current case" counts every case the candidate answered.
    stop = []
    spec = next(iter_plan(["random_fp32"], 64, 0, 64, 4))
    with Worker("oracle", should_stop=lambda: "SIGINT" if stop else None) as worker:
        assert worker.load(contract="aiter", device="cpu")[0]
        worker.submit(spec)
        assert worker._from.poll(60), "the worker never answered"
        stop.append(True)
        answered, outcome = worker.collect()
        assert answered == spec and outcome is not None  # (a stop with no answer sent: the hung-candidate test below)


def _reversed_ids(scores, bias, topk, renormalize, rsf):
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf)
    return w.flip(1), ids.flip(1)


def test_records_are_capped_while_counts_stay_exact():
    specs = list(iter_plan(["random_fp32"], 3000, 0, 64, 8))
    cand = Candidate(name="reversed", route=_reversed_ids)
    result = check_candidate(cand, iter(specs), contract="aiter", device="cpu", max_cells=25)
    s = to_json(result.summary)
    assert s["rows_checked"] == s["mismatched_rows"] == sum(x.rows for x in specs)
    assert len(result.cells) == s["cells_recorded"] == 25
    per_clause = pd.Series([d.clause for d in result.details]).value_counts()
    assert (per_clause <= DETAILS_PER_CLAUSE).all()


# ---------------------------------------------------------------- determinism


def test_a_candidate_that_breaks_ties_differently_each_call_fails_on_determinism(tmp_path):
    out = tmp_path / "flaky"
    code = main(["--candidate", "tests.planted.flaky_ties:route", "--families", "all_equal", "--rows", "40", "--repeat", "3", "--out", str(out), "--quiet"])
    s = json.loads((out / "summary.json").read_text())
    det = s["determinism"]
    assert code == 1 and s["status"] == "fail" and s["isolated"]
    assert det["repeat"] == 3 and det["rows_differing"] > 0 and det["cases"] > 0
    example = det["examples"][0]
    assert example["rows"] and set(example["calls"]) <= {"call 2", "call 3"}
    assert "--repeat 3" in example["replay"] and "--replay all_equal:" in example["replay"]
    details = json.loads((out / "details.json").read_text())
    assert any(d["clause"] == "determinism" and d["expected_ids"] != d["actual_ids"] for d in details)
    assert "`determinism`" in (out / "report.md").read_text()


def test_determinism_in_process_and_declared_nondeterminism_passes():
    import tests.planted.flaky_ties as flaky

    specs = list(iter_plan(["all_equal"], 20, 0, 896, 16))
    undeclared = check_candidate(Candidate(name="flaky", route=flaky.route), specs, contract="aiter", device="cpu", repeat=2)
    undeclared.summary = to_json(undeclared.summary)
    assert undeclared.summary["status"] == "fail" and undeclared.summary["determinism"]["rows_differing"] > 0
    declared = check_candidate(flaky.declared, specs, contract="aiter", device="cpu", repeat=2).summary
    declared = to_json(declared)
    assert declared["status"] == "pass" and declared["mismatched_rows"] == 0
    assert declared["determinism"]["declared"] and declared["determinism"]["rows_differing"] > 0
    assert declared["expected_deviations"]["determinism"]["observed"]


def test_a_deterministic_candidate_passes_repeats():
    specs = list(iter_plan(["all_equal", "nan_dense"], 300, 0, 896, 16))
    s = to_json(check_candidate(get_candidate("oracle"), specs, contract="aiter", device="cpu", repeat=3).summary)
    assert s["status"] == "pass" and s["determinism"]["rows_differing"] == 0 and s["determinism"]["repeat"] == 3


# ---------------------------------------------------------------- interrupted runs


def _start(argv, **env):
    return subprocess.Popen(
        [sys.executable, "-m", "contracts.check", *argv, "--quiet"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO), **env},
    )  # fmt: skip


def _wait_for(condition, proc, what, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        assert proc.poll() is None, f"exited early ({proc.returncode}) while waiting for {what}: {proc.stderr.read().decode()}"
        time.sleep(0.1)
    proc.kill()
    pytest.fail(f"timed out waiting for {what}")


def _stdout_line(proc, text):
    buf = b""

    def seen():
        nonlocal buf
        while select.select([proc.stdout], [], [], 0)[0]:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                break
            buf += chunk
        return text.encode() in buf

    return seen


def _assert_complete_interrupted_bundle(out):
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "interrupted"
    assert (out / "report.md").read_text().startswith("# INTERRUPTED")
    pd.read_csv(out / "mismatches.csv")
    json.loads((out / "details.json").read_text())
    assert not list(out.glob(".*.tmp"))  # no half-written file left behind
    return s


@pytest.mark.slow  # a check in a subprocess, signalled mid-run: ~6 s each
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_leaves_an_interrupted_bundle_with_what_ran(tmp_path, sig, code):
    out = tmp_path / "bundle"
    proc = _start(["--candidate", "tests.planted.healthy:route", "--no-isolate", "--families", "random_fp32", "--rows", "10000000", "--out", str(out)])
    _wait_for(_stdout_line(proc, "healthy candidate"), proc, "the first call")
    time.sleep(0.5)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == code, stderr.decode()
    s = _assert_complete_interrupted_bundle(out)
    assert s["rows_checked"] >= 1 and s["mismatched_rows"] == 0 and s["interrupted"] == sig.name
    assert b"INTERRUPTED" in stdout


@pytest.mark.slow  # waits out a hung worker (3-7 s)
def test_interrupting_a_hung_isolated_candidate_kills_its_worker_and_keeps_the_rows(tmp_path):
    out, marker = tmp_path / "bundle", tmp_path / "hanging"
    proc = _start(
        ["--candidate", "tests.planted.hang:route,oracle", "--families", "random_bf16", "--rows", "300", "--timeout", "600", "--out", str(out)],
        PLANTED_MARKER=str(marker),
    )
    _wait_for(marker.exists, proc, "the planted hang")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr.decode()
    s = _assert_complete_interrupted_bundle(out / bundle_dirname("tests.planted.hang:route"))
    assert s["rows_checked"] == 65  # the two cases answered before the hang
    index = json.loads((out / "index.json").read_text())
    assert index["interrupted"] == "SIGINT"
    assert {c["candidate"]: c["status"] for c in index["candidates"]}["oracle"] == "interrupted"  # never started
    for pid in children:
        assert not Path(f"/proc/{pid}").exists(), "the worker outlived the run"
