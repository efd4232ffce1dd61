"""contracts.nightly: one dated bundle, its envelope and JUnit file, upload, compare-previous; tiny row counts."""

import datetime as dt
import json
import xml.etree.ElementTree as ET

import pytest

from contracts.commands import diff, nightly
from contracts.run import nightly as nightly_lib

ROWS = "300"


def _run(out, *extra, candidates="oracle,radix4"):
    return nightly.main(["--out", str(out), "--rows", ROWS, "--candidates", candidates, *extra])


def _bundles(out):
    return sorted(p for p in out.iterdir() if p.name.startswith("nightly-"))


def _parse_utc(text):
    assert text.endswith("Z")
    return dt.datetime.fromisoformat(text[:-1] + "+00:00")


@pytest.mark.slow  # a nightly run with its upload: ~7 s
def test_nightly_writes_uploads_and_compares(tmp_path, capsys):
    out, store = tmp_path / "n", tmp_path / "store"
    assert _run(out, "--upload", f"file://{store}") == 0
    assert _run(out, "--upload", f"file://{store}", "--compare-previous") == 0
    first, second = _bundles(out)
    assert first.name.endswith("-cpu") or first.name.endswith("-cuda") or first.name.endswith("-rocm")

    env = json.loads((second / "nightly.json").read_text())
    assert env["schema_version"] == nightly_lib.NIGHTLY_SCHEMA_VERSION and env["kind"] == "router-contracts-nightly"
    assert env["suite"]["name"] == "router-contracts" and "version" in env["suite"] and "git_commit" in env["suite"]
    assert _parse_utc(env["started"]) <= _parse_utc(env["finished"])
    target = env["execution_target"]
    assert {"backend", "device_model", "runtime", "driver", "torch"} <= set(target)
    oracle = env["candidates"]["oracle"]
    assert oracle["status"] == "pass" and oracle["summary"]["rows_checked"] > 0
    assert (second / oracle["bundle"] / "summary.json").exists()
    if target["backend"] == "cpu":
        assert env["candidates"]["radix4"]["status"] == "unavailable" and env["candidates"]["radix4"]["reason"]
        assert all(p["status"] == "skipped" and p["reason"] for p in env["pairs"].values())
        assert env["bench"]["status"] == "skipped"
    assert set(env["pairs"]) == {p.label for p in nightly_lib.PAIRS}
    assert env["probe"]["runs"]["oracle"]["status"] == "done" and env["probe"]["runs"]["oracle"]["matches"] == "aiter"
    assert env["comparison"]["previous"].endswith(first.name) and env["comparison"]["status"] == "no regression"
    day = f"{_parse_utc(env['started']):%Y/%m/%d}"
    assert env["upload"]["destination"] == f"file://{store}/{day}/{second.name}"

    for bundle in (first, second):
        uploaded = store / day / bundle.name
        assert sorted(p.relative_to(uploaded) for p in uploaded.rglob("*") if p.is_file()) == sorted(
            p.relative_to(bundle) for p in bundle.rglob("*") if p.is_file()
        )

    root = ET.parse(second / "junit.xml").getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert ("contracts.oracle.all_equal", "tie_order") in cases
    assert ("contracts.probe", "oracle") in cases
    if target["backend"] == "cpu":
        assert cases[("contracts.radix4", "available")].find("skipped") is not None
        assert cases[("contracts.serial-vs-block-argmax", "available")].find("skipped") is not None
    assert int(root.get("failures")) == 0

    capsys.readouterr()
    assert diff.main([str(first), str(second)]) == 0
    assert diff.main([f"file://{store}/{day}/{first.name}", f"file://{store}/{day}/{second.name}"]) == 0
    assert "No regression." in capsys.readouterr().out


@pytest.mark.slow  # two nightly runs: ~10 s
def test_a_regression_against_the_previous_bundle_sets_the_exit_code(tmp_path):
    out = tmp_path / "n"
    assert _run(out, candidates="oracle") == 0
    (first,) = _bundles(out)
    probe = first / "probe" / "oracle" / "probe.json"
    doc = json.loads(probe.read_text())
    doc["permutation"][0], doc["permutation"][1] = doc["permutation"][1], doc["permutation"][0]
    probe.write_text(json.dumps(doc))

    assert _run(out, "--compare-previous", candidates="oracle") == 1
    second = _bundles(out)[-1]
    comparison = json.loads((second / "nightly.json").read_text())["comparison"]
    assert comparison["status"] == "regression"
    assert any("tie order changed" in r for r in comparison["regressions"])
    assert "REGRESSIONS" in (second / "diff.md").read_text()
    assert _run(out, "--compare-previous", "--fail-on", "never", candidates="oracle") == 0


@pytest.mark.slow  # a nightly run (5 s)
def test_missing_probe_and_bench_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(nightly_lib, "_tool", lambda module, attr: None)
    assert _run(tmp_path, "--bench", candidates="oracle") == 0
    env = json.loads((_bundles(tmp_path)[0] / "nightly.json").read_text())
    assert env["probe"] == {"status": "not available", "reason": "probe not available (contracts.probe is not in this checkout)"}
    assert env["bench"]["status"] == "not available"
    root = ET.parse(_bundles(tmp_path)[0] / "junit.xml").getroot()
    assert [s.get("skipped") for s in root.findall("testsuite") if s.get("name") in ("contracts.probe", "contracts.bench")] == ["1", "1"]


@pytest.mark.slow  # two nightly runs (5 s)
def test_an_upload_that_would_overwrite_fails_with_exit_4(tmp_path, monkeypatch, capsys):
    from contracts.reports import upload

    def refuse(*args, **kwargs):
        raise upload.UploadExistsError("file:///x already exists; refusing to overwrite it")

    monkeypatch.setattr(upload, "upload_bundle", refuse)
    assert _run(tmp_path, "--upload", f"file://{tmp_path}/store", "--no-probe", candidates="oracle") == 4
    assert "refusing to overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--candidates", "no-such-router"], ["--rows", "0"], ["--fail-on", "sometimes"]])
def test_usage_errors_exit_2(tmp_path, args):
    assert nightly.main(["--out", str(tmp_path), *args]) == 2


def test_junit_failures_crashes_and_declared_deviations(tmp_path):
    from contracts.reports.junit import entries_for_bundle, write_junit

    bundle = tmp_path / "nightly-x"
    check_dir = bundle / "candidates" / "mine"
    check_dir.mkdir(parents=True)
    summary = {"candidate": "my.pkg:route", "contract": "aiter", "against": None, "device": "cpu", "status": "fail", "duration_s": 1.5,
               "clauses": {"tie_order": 3, "nan_last": 0}, "expected_deviations": {"nan_last": {"reason": "NaN first", "rows": 2, "observed": True}},
               "families": {"all_equal": {"rows": 8, "rows_skipped": 0, "clauses": {"tie_order": 3}},
                            "nan_dense": {"rows": 4, "rows_skipped": 0, "clauses": {}},
                            "strided": {"rows": 0, "rows_skipped": 64, "clauses": {}}}}  # fmt: skip
    (check_dir / "summary.json").write_text(json.dumps(summary))
    detail = {"family": "all_equal", "case": "all_equal:1:8", "row": 2, "clause": "tie_order", "verdict": "mismatch", "reason": "other priority <&>",
              "expected_ids": [252, 253], "actual_ids": [0, 1], "replay": "python -m contracts.check --candidate my.pkg:route --replay all_equal:1:8 --row 2"}  # fmt: skip
    (check_dir / "details.json").write_text(json.dumps([detail]))
    (check_dir / "mismatches.csv").write_text("family,case,row,col,clause,verdict,reason\nnan_dense,nan_dense:5:4,0,3,nan_last,expected,x\n")
    crash = "Traceback (most recent call last):\n  ...\nRuntimeError: boom \x00"
    (bundle / "nightly.json").write_text(json.dumps({"candidates": {
        "my.pkg:route": {"status": "fail", "bundle": "candidates/mine"},
        "other": {"status": "error", "reason": "contracts.check raised RuntimeError: boom", "traceback": crash}},
        "pairs": {"a vs b": {"status": "skipped", "reason": "only on rocm hosts"}},
        "probe": {"status": "not available", "reason": "probe not available"}, "bench": {"status": "skipped", "reason": "no GPU"}}))  # fmt: skip
    entries, tools = entries_for_bundle(bundle)
    root = ET.parse(write_junit(tmp_path / "junit.xml", entries, tools)).getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    failure = cases[("contracts.my_pkg_route.all_equal", "tie_order")].find("failure")
    assert failure.get("message") == "3 of 8 rows of family all_equal break clause tie_order"
    assert "other priority <&>" in failure.text and "replay: python -m contracts.check --candidate my.pkg:route" in failure.text
    assert "declared deviation: NaN first" in cases[("contracts.my_pkg_route.nan_dense", "nan_last")].find("system-out").text
    assert cases[("contracts.my_pkg_route.nan_dense", "tie_order")].find("failure") is None
    assert "not covered" in cases[("contracts.my_pkg_route.strided", "tie_order")].find("skipped").get("message")
    assert "RuntimeError: boom" in cases[("contracts.other", "run")].find("error").text
    assert cases[("contracts.a-vs-b", "available")].find("skipped").get("message") == "only on rocm hosts"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("10", "1", "1")  # 3 families x 2 clauses, a crash, a pair, probe, bench


# ---------------------------------------------------------------- issue 22: a stopped nightly


@pytest.mark.slow  # a nightly in a subprocess, signalled mid-run: ~12 s
def test_sigterm_to_a_running_nightly_exits_143_and_every_record_says_interrupted(tmp_path):
    """Before: a nightly stopped with SIGTERM exited 0 (even with --fail-on failure), the interrupted check
    was missing from the totals, JUnit showed 0 failures and diff said pass -> interrupted was no regression."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    repo = Path(__file__).resolve().parent.parent
    out = tmp_path / "n"
    assert _run(out, "--no-probe", candidates="oracle") == 0
    (passed,) = _bundles(out)
    proc = subprocess.Popen(
        [sys.executable, "-m", "contracts", "nightly", "--out", str(out), "--rows", "20000000", "--candidates", "oracle", "--no-probe",
         "--fail-on", "failure"],
        cwd=repo, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(repo)},
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not any(p.glob("candidates/oracle") for p in _bundles(out) if p != passed):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.2)
        time.sleep(3)  # well into the check: its bundle folder exists once it started
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, stderr
    stopped = _bundles(out)[-1]
    env = json.loads((stopped / "nightly.json").read_text())
    assert env["interrupted"] == "SIGTERM" and env["candidates"]["oracle"]["status"] == "interrupted"
    assert env["totals"]["interrupted"] == 1 and env["totals"]["pass"] == 0
    root = ET.parse(stopped / "junit.xml").getroot()
    assert int(root.get("failures")) + int(root.get("errors")) > 0
    assert diff.main([str(passed), str(stopped)]) == 1


# ---------------------------------------------------------------- issue 22: interrupted uploads


class _CutOff:
    """A filesystem whose writes fail for good after the first ``after`` (a network that goes away)."""

    def __init__(self, fs, after):
        self._fs, self.after = fs, after

    def __getattr__(self, name):
        return getattr(self._fs, name)

    def pipe_file(self, path, data, **kw):
        if self.after <= 0:
            raise PermissionError("the network went away")
        self.after -= 1
        return self._fs.pipe_file(path, data, **kw)


@pytest.mark.slow  # two nightly runs: ~5 s
def test_the_next_nightly_resumes_an_interrupted_upload_and_lists_the_ones_it_cannot(tmp_path, monkeypatch, capsys):
    """Before: an upload cut off half-way was never listed, and a retry was refused as "exists"."""
    from contracts.reports import upload
    from contracts.reports.upload import list_bundles, list_incomplete_uploads

    out, store = tmp_path / "n", tmp_path / "store"
    real = upload._fs
    monkeypatch.setattr(upload, "_fs", lambda url, options: (lambda fs, path: (_CutOff(fs, 2), path))(*real(url, options)))
    assert _run(out, "--upload", f"file://{store}", "--no-probe", candidates="oracle") == 4
    monkeypatch.undo()
    (first,) = _bundles(out)
    (cut,) = list_incomplete_uploads(f"file://{store}")
    assert cut.name == first.name
    orphan = store / "2025" / "12" / "31" / "nightly-20251231T000000Z-cpu"  # interrupted on another host: no local bundle
    orphan.mkdir(parents=True)
    (orphan / "junit.xml").write_text("<testsuites/>")

    assert _run(out, "--upload", f"file://{store}", "--no-probe", candidates="oracle") == 0
    second = _bundles(out)[-1]
    env = json.loads((second / "nightly.json").read_text())
    assert env["upload"]["resumed"] == [cut.url]
    assert env["upload"]["incomplete"] == [f"file://{orphan}"]
    assert [b.name for b in list_bundles(f"file://{store}")] == [first.name, second.name]
    assert [b.name for b in list_incomplete_uploads(f"file://{store}")] == [orphan.name]
    assert f"file://{orphan}" in capsys.readouterr().out
