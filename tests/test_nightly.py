"""contracts.nightly: one dated bundle, its envelope and JUnit file, upload, compare-previous; tiny row counts."""

import datetime as dt
import json
import xml.etree.ElementTree as ET

import pytest

from contracts import diff, nightly

ROWS = "300"


def _run(out, *extra, candidates="oracle,radix4"):
    return nightly.main(["--out", str(out), "--rows", ROWS, "--candidates", candidates, *extra])


def _bundles(out):
    return sorted(p for p in out.iterdir() if p.name.startswith("nightly-"))


def _parse_utc(text):
    assert text.endswith("Z")
    return dt.datetime.fromisoformat(text[:-1] + "+00:00")


def test_nightly_writes_uploads_and_compares(tmp_path, capsys):
    out, store = tmp_path / "n", tmp_path / "store"
    assert _run(out, "--upload", f"file://{store}") == 0
    assert _run(out, "--upload", f"file://{store}", "--compare-previous") == 0
    first, second = _bundles(out)
    assert first.name.endswith("-cpu") or first.name.endswith("-cuda") or first.name.endswith("-rocm")

    env = json.loads((second / "nightly.json").read_text())
    assert env["schema_version"] == nightly.NIGHTLY_SCHEMA_VERSION and env["kind"] == "router-contracts-nightly"
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
    assert set(env["pairs"]) == {p.label for p in nightly.PAIRS}
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


def test_missing_probe_and_bench_are_recorded(tmp_path, monkeypatch):
    monkeypatch.setattr(nightly, "_main_of", lambda module: None)
    assert _run(tmp_path, "--bench", candidates="oracle") == 0
    env = json.loads((_bundles(tmp_path)[0] / "nightly.json").read_text())
    assert env["probe"] == {"status": "not available", "reason": "probe not available (contracts.probe is not in this checkout)"}
    assert env["bench"]["status"] == "not available"
    root = ET.parse(_bundles(tmp_path)[0] / "junit.xml").getroot()
    assert [s.get("skipped") for s in root.findall("testsuite") if s.get("name") in ("contracts.probe", "contracts.bench")] == ["1", "1"]


def test_an_upload_that_would_overwrite_fails_with_exit_4(tmp_path, monkeypatch, capsys):
    from contracts import upload

    def refuse(*args, **kwargs):
        raise upload.UploadExistsError("file:///x already exists; refusing to overwrite it")

    monkeypatch.setattr(upload, "upload_bundle", refuse)
    assert _run(tmp_path, "--upload", f"file://{tmp_path}/store", "--no-probe", candidates="oracle") == 4
    assert "refusing to overwrite" in capsys.readouterr().err


@pytest.mark.parametrize("args", [["--candidates", "no-such-router"], ["--rows", "0"], ["--fail-on", "sometimes"]])
def test_usage_errors_exit_2(tmp_path, args):
    assert nightly.main(["--out", str(tmp_path), *args]) == 2
