"""bench contains its own errors (issue 55): a fault of the harness's own code at one point, in the curves or in the plot
ends as an error the report lists, bench.json is written, the other points are still timed, and the exit is 1."""

import json

import pytest

import contracts.run.bench as bench
from tests.test_bench import run_bench

ARGS = ["--candidate", "torch-native,oracle", "--m", "1,4", "--repeats", "1", "--device", "cpu"]


def _boom(*_args, **_kwargs):
    raise RuntimeError("planted fault of the harness")


def test_a_fault_of_the_harness_at_one_point_is_an_error_point_and_the_run_goes_on(tmp_path, monkeypatch):
    real = bench.bench_point  # run_bench calls the name bound in contracts.run.bench

    def faulty(candidate, route, M, *args, **kwargs):
        if candidate.name == "oracle" and M == 4:
            raise RuntimeError("planted fault of the harness")
        return real(candidate, route, M, *args, **kwargs)

    monkeypatch.setattr(bench, "bench_point", faulty)
    code, _, stderr = run_bench([*ARGS, "--out", str(tmp_path)])
    assert code == 1, stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    points = {(c["name"], p["m"]): p for c in report["candidates"] for p in c["results"]}
    assert points[("oracle", 4)]["status"] == "error" and points[("oracle", 4)]["kind"] == "harness_error"
    assert "planted fault of the harness" in points[("oracle", 4)]["reason"] and points[("oracle", 4)]["traceback"]
    assert points[("oracle", 1)]["status"] == points[("torch-native", 4)]["status"] == "timed", "the other points are timed"
    assert report["status"] == "error" and any(e["candidate"] == "oracle" and e["m"] == 4 for e in report["errors"])


@pytest.mark.parametrize("stage", ["curve", "crossovers", "write_plot", "make_inputs"])
def test_a_fault_of_the_harness_outside_a_point_is_listed_and_bench_json_written(tmp_path, monkeypatch, stage):
    monkeypatch.setattr(bench, stage, _boom)
    code, _, stderr = run_bench([*ARGS, "--out", str(tmp_path)])
    assert code == 1, stderr
    assert "Traceback" not in stderr and "planted fault of the harness" in stderr, stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["status"] == "error" and report["errors"], report["errors"]
