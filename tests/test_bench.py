"""contracts.bench on the CPU: the files it writes, its table, its gates and its usage errors."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import pytest
import torch

from contracts.commands.bench import main as bench_main
from contracts.commands._common import ExitCode
from contracts.run import bench, bench_options, bench_results
from contracts.run import bench_point as points
from contracts.candidates import Candidate, all_candidates, register
from kernels import timing
from kernels.timing import time_cuda

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _torch_native(scores, bias, topk, renormalize, routed_scaling_factor):
    from kernels.adapters import torch_native

    return torch_native.route(scores, bias, topk, renormalize, routed_scaling_factor)


def _raises(scores, bias, topk, renormalize, routed_scaling_factor):
    raise RuntimeError("planted failure <in the route>")


def _register_once(candidate: Candidate) -> None:
    if candidate.name not in all_candidates():
        register(candidate)


_register_once(Candidate(name="test-bench-up-to-4-rows", route=_torch_native, covered=lambda *, rows, **_: rows <= 4))
_register_once(Candidate(name="test-bench-raises", route=_raises))


def run_bench(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = bench_main(argv)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    argv = ["--candidate", "oracle,torch-native,radix4,test-bench-up-to-4-rows", "--m", "1,8,64", "--out", str(out),
            "--repeats", "2", "--device", "cpu"]  # fmt: skip
    code, stdout, stderr = run_bench(argv)
    return code, stdout, stderr, out, json.loads((out / "bench.json").read_text())


def _entry(report: dict, name: str) -> dict:
    return next(c for c in report["candidates"] if c["name"] == name)


def test_cpu_run_writes_versioned_json_with_environment_and_method(cpu_run):
    code, _, stderr, _, report = cpu_run
    assert code == 0, stderr
    assert report["schema_version"] == bench.BENCH_SCHEMA_VERSION
    assert report["environment"]["device"] == "cpu" and report["environment"]["torch"] == torch.__version__
    assert report["method"]["timer"] == "cpu wall-clock"
    assert "not rotated" in report["method"]["inputs"]
    assert report["m"] == [1, 8, 64] and report["baseline"] == "oracle"


def test_every_timed_point_has_median_spread_and_samples(cpu_run):
    report = cpu_run[4]
    for name in ("oracle", "torch-native"):
        points = _entry(report, name)["results"]
        assert [p["m"] for p in points] == [1, 8, 64]
        for p in points:
            assert p["status"] == "timed" and p["timer"] == "cpu-wall-clock"
            assert len(p["samples"]) == 2 and p["median_us"] > 0
            assert p["spread"]["min"] <= p["median_us"] <= p["spread"]["max"]


def test_unavailable_candidate_is_listed_with_its_reason(cpu_run):
    _, stdout, _, _, report = cpu_run
    radix4 = _entry(report, "radix4")
    assert radix4["status"] == "unavailable" and radix4["results"] == []
    assert "cpu" in radix4["reason"]
    assert f"unavailable: radix4: {radix4['reason']}" in stdout


def test_uncovered_m_is_recorded_as_skipped_not_timed(cpu_run):
    _, stdout, _, _, report = cpu_run
    points = {p["m"]: p for p in _entry(report, "test-bench-up-to-4-rows")["results"]}
    assert points[1]["status"] == "timed"
    for m in (8, 64):
        assert points[m]["status"] == "skipped" and points[m]["median_us"] is None
        assert "not covered" in points[m]["reason"] and f"rows={m}" in points[m]["reason"]
    assert "skipped: test-bench-up-to-4-rows M=8: not covered" in stdout


def test_table_prints_ratios_against_the_first_candidate(cpu_run):
    _, stdout, _, _, report = cpu_run
    assert "cpu wall-clock" in stdout and "= candidate / oracle" in stdout
    row_m1 = next(line for line in stdout.splitlines() if line.split()[:1] == ["1"])
    base = _entry(report, "oracle")["results"][0]["median_us"]
    other = _entry(report, "torch-native")["results"][0]["median_us"]
    assert f"({other / base:.2f}x)" in row_m1


def test_plot_is_a_png_labelled_with_the_timer(cpu_run):
    data = (cpu_run[3] / "bench.png").read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert b"cpu wall-clock" in data  # the title, in the PNG's text chunk


def test_a_route_that_raises_is_recorded_as_an_error_and_the_run_goes_on(tmp_path):
    code, stdout, _ = run_bench(["--candidate", "torch-native,test-bench-raises", "--m", "1", "--repeats", "1",
                                 "--out", str(tmp_path), "--device", "cpu"])  # fmt: skip
    assert code == ExitCode.FAILED  # an error point is an error of the run (issue 55), the other candidate still timed
    report = json.loads((tmp_path / "bench.json").read_text())
    point = _entry(report, "test-bench-raises")["results"][0]
    assert point["status"] == "error" and "planted failure" in point["reason"]
    assert _entry(report, "torch-native")["results"][0]["status"] == "timed"
    assert "error: test-bench-raises M=1: before timing: route raised RuntimeError" in stdout


def test_nothing_timed_exits_3(tmp_path):
    code, _, stderr = run_bench(["--candidate", "radix4", "--m", "1", "--out", str(tmp_path), "--device", "cpu"])
    assert code == ExitCode.UNAVAILABLE and "no candidate could be timed" in stderr
    assert (tmp_path / "bench.json").is_file()


def test_default_out_is_under_reports(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, _ = run_bench(["--candidate", "torch-native", "--m", "1", "--repeats", "1", "--device", "cpu"])
    assert code == 0
    (made,) = (tmp_path / "reports").glob("*-bench")
    assert (made / "bench.json").is_file() and (made / "bench.png").is_file()


@pytest.mark.parametrize(
    "args, names",
    [
        (["--candidate", "no-such-router"], "no-such-router"),
        (["--candidate", "oracle", "--m", "0"], "--m"),
        (["--candidate", "oracle", "--m", "-8"], "--m"),
        (["--candidate", "oracle", "--m", "1,eight"], "--m"),
        (["--candidate", "oracle", "--m", "1.5"], "--m"),
        (["--candidate", "oracle", "--dtype", "fp16"], "--dtype"),
        (["--candidate", "oracle", "--device", "tpu"], "--device"),
        (["--candidate", "oracle", "--repeats", "0"], "--repeats"),
        (["--candidate", "oracle,oracle"], "--candidate"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_argument(args, names, tmp_path):
    code, stdout, stderr = run_bench([*args, "--out", str(tmp_path / "out")])
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and names in lines[0]
    assert not (tmp_path / "out" / "bench.json").exists()


def test_unwritable_out_exits_2(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, stderr = run_bench(["--candidate", "oracle", "--m", "1", "--out", str(blocker / "sub")])
    assert code == 2
    assert stderr.count("\n") == 1 and "--out" in stderr and "choose another directory" in stderr


def _curve(name, points):
    return {"name": name, "results": [{"m": m, "status": "timed", "median_us": us} for m, us in points]}


def test_crossover_is_interpolated_in_log_log_space():
    base = _curve("a", [(1, 10.0), (10, 10.0), (100, 10.0)])
    other = _curve("b", [(1, 5.0), (10, 20.0), (100, 40.0)])
    (x,) = bench_results.crossovers(base, other)
    assert x["between_m"] == [1, 10] and x["faster_above"] == "a"
    assert math.isclose(x["m"], math.sqrt(10), rel_tol=0.02) and math.isclose(x["latency_us"], 10.0, rel_tol=1e-3)
    assert bench_results.crossovers(base, _curve("c", [(1, 5.0), (10, 6.0), (100, 7.0)])) == []


def test_inputs_of_a_batch_are_the_first_rows_of_every_larger_batch():
    # A curve over M must not rise and fall with where a kernel's slow rows happen to fall in each M's data.
    def make(M, rotate=2, seed=0):
        return points.make_inputs(M, experts=224, dtype=torch.float32, bias_dtype=torch.float32, device="cpu", seed=seed, rotate=rotate)

    (small, small2), bias = make(5)
    (large, large2), bias_large = make(200)
    assert torch.equal(bias, bias_large) and torch.equal(large[:5], small) and torch.equal(large2[:5], small2)
    assert not torch.equal(small, small2) and not torch.equal(large[64:128], large[:64])  # buffers and blocks differ
    (other,), other_bias = make(5, rotate=1, seed=1)
    assert not torch.equal(other, small) and not torch.equal(other_bias, bias)


def test_curve_reports_the_largest_fall_below_a_smaller_batch_and_the_time_above_the_floor():
    # 2.9 at M=256 then 2.6 at M=320: a launch shape switched too late (issue 37's 896/16 curve), a 10.3 % fall
    entry = _curve("r", [(1, 2.0), (64, 2.8), (256, 2.9), (320, 2.6), (1024, 3.1), (4096, 3.0)])
    c = bench_results.curve(entry, 0.9)
    assert (c["at_m"], c["below_m"]) == (320, 256) and c["largest_fall_pct"] == pytest.approx(100 * 0.3 / 2.9, abs=0.01)
    assert c["above_floor_us"] == {"1": 1.1, "64": 1.9, "256": 2.0, "320": 1.7, "1024": 2.2, "4096": 2.1}
    rising = bench_results.curve(_curve("s", [(1, 1.0), (8, 1.0), (64, 1.5)]), None)
    assert rising["at_m"] is None and rising["largest_fall_pct"] == 0.0 and "above_floor_us" not in rising
    assert bench_results.curve({"name": "u", "results": [{"m": 1, "status": "error"}]}, 0.9) is None


def test_the_summary_prints_each_curve(cpu_run):
    _, stdout, _, _, report = cpu_run
    names = [c["candidate"] for c in report["curves"]]
    assert names and set(names) <= {c["name"] for c in report["candidates"] if c["status"] == "ok"}
    for name in names:
        assert f"curve: {name}: " in stdout


class _FakeCuda:
    """Just enough of torch.cuda to walk kernels.timing.time_cuda's control flow on a CPU-only host."""

    def __init__(self, elapsed_ms: float):
        self.capturing = False
        self.elapsed_ms = elapsed_ms
        self.replays = 0
        self.stream_log: list[str] = []  # what the timer put on the stream outside capture, in order
        fake = self

        class Event:
            def __init__(self, enable_timing=False):
                pass

            def record(self):
                fake.stream_log.append("event")

            def synchronize(self):
                pass

            def elapsed_time(self, other):
                return fake.elapsed_ms

        class Graph:
            def replay(self):
                fake.replays += 1
                fake.stream_log.append("replay")

        @contextlib.contextmanager
        def graph(g):
            fake.capturing = True
            try:
                yield
            finally:
                fake.capturing = False

        class Stream:
            def wait_stream(self, other):
                pass

        self.Event, self.CUDAGraph, self.graph, self.Stream = Event, Graph, graph, Stream

    def install(self, monkeypatch):
        for name in ("Event", "CUDAGraph", "graph", "Stream"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
        monkeypatch.setattr(torch.cuda, "current_stream", lambda *a: self.Stream())
        monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
        monkeypatch.setattr(torch.cuda, "_sleep", self.sleep)

    def sleep(self, cycles):
        if not self.capturing:
            self.stream_log.append(f"sleep {cycles}")


def test_cuda_timer_replays_a_graph_and_divides_by_launches(monkeypatch):
    fake = _FakeCuda(elapsed_ms=0.2)
    fake.install(monkeypatch)
    calls = []
    timing = time_cuda(lambda: calls.append(fake.capturing), launches=20, replays=5, warmup=3)
    assert timing.timer == "cuda-graph" and timing.calls_per_sample == 20 and not timing.note
    assert timing.samples_us == pytest.approx([10.0] * 5)  # 0.2 ms / 20 launches
    assert calls.count(True) == 20 and calls.count(False) == 3  # 20 captured, 3 eager warm-up calls
    assert fake.replays == 3 + 5


def test_each_sample_starts_behind_a_spin_so_the_hosts_submission_is_not_timed(monkeypatch):
    # Without the spin the device reaches the start event at once and idles until the host has submitted the
    # replay, and the sample counts that idle time. The spin must come before the start event (else it is timed).
    fake = _FakeCuda(elapsed_ms=0.2)
    fake.install(monkeypatch)
    time_cuda(lambda: None, launches=20, replays=4, warmup=2)
    hold = f"sleep {timing.HOLD_CYCLES}"
    assert fake.stream_log == ["replay"] * 2 + [hold, "event", "replay", "event"] * 4
    assert timing.HOLD_CYCLES >= 100_000  # tens of microseconds at least: a host's submission of a replay
    fake.stream_log.clear()

    def syncs_inside():
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    time_cuda(syncs_inside, launches=5, replays=3, warmup=1)  # eager: the same spin ahead of each sample
    assert fake.stream_log == [hold, "event", "event"] * 3


def test_cuda_timer_falls_back_to_eager_when_capture_fails(monkeypatch):
    fake = _FakeCuda(elapsed_ms=0.5)
    fake.install(monkeypatch)

    def syncs_inside():
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    timing = time_cuda(syncs_inside, launches=10, replays=4, warmup=1)
    assert timing.timer == "cuda-eager" and "graph capture failed" in timing.note and "not permitted" in timing.note
    assert timing.samples_us == pytest.approx([50.0] * 4)
    assert fake.replays == 0
    with pytest.raises(RuntimeError, match="not permitted"):  # a caller that publishes graph replays only
        time_cuda(syncs_inside, launches=10, replays=4, warmup=1, eager_fallback=False)


def test_bench_and_the_shape_sweep_share_the_one_cuda_timer(monkeypatch):
    """contracts bench times with kernels.timing's timer, not a copy; the sweep's points go through it too, with
    one warm-up call and one untimed replay, and a launch that cannot be captured stops the sweep."""
    from kernels.radix4 import shape_sweep

    assert bench.time_cuda is points.time_cuda is time_cuda
    fake = _FakeCuda(elapsed_ms=0.06)
    fake.install(monkeypatch)
    calls = []
    assert shape_sweep._time_point(lambda: calls.append(fake.capturing), launches=20, replays=7) == pytest.approx(3.0)
    assert calls.count(True) == 20 and calls.count(False) == 1 and fake.replays == 1 + 7

    def syncs_inside():
        if fake.capturing:
            raise RuntimeError("operation not permitted when stream is capturing")

    with pytest.raises(RuntimeError, match="not permitted"):
        shape_sweep._time_point(syncs_inside, launches=20, replays=7)
    seen = []
    monkeypatch.setattr(timing, "time_cuda", lambda *a, **k: seen.append(k) or timing.Timing("cuda-graph", [1.0, 2.0, 9.0], 20))
    assert shape_sweep._time_point(lambda: None, launches=20, replays=3) == 2.0 and seen  # the helper's, not a copy


def test_cuda_points_carry_the_timer_and_its_reason(monkeypatch):
    fake = _FakeCuda(elapsed_ms=0.1)
    fake.install(monkeypatch)
    args = bench_options.BenchOptions(launches=10, replays=3, warmup=1)
    candidate = all_candidates()["torch-native"]
    inputs = points.make_inputs(4, experts=896, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cpu", seed=0, rotate=2)
    point = points.bench_point(candidate, candidate.route, 4, inputs, args, "cuda")
    assert point["status"] == "timed" and point["timer"] == "cuda-graph" and point["median_us"] == pytest.approx(10.0)

    def host_sync(scores, *rest):
        if fake.capturing:
            raise RuntimeError("cudaErrorStreamCaptureUnsupported")
        return candidate.route(scores, *rest)

    point = points.bench_point(candidate, host_sync, 4, inputs, args, "cuda")
    assert point["timer"] == "cuda-eager" and "graph capture failed" in point["reason"]
    report = {"m": [4], "baseline": "a", "candidates": [{"name": "a", "status": "ok", "results": [point]}]}
    assert "*" in bench_results.results_table(report).iloc[0]["a"]


def test_the_launch_floor_is_an_empty_kernel_timed_like_the_candidates(monkeypatch):
    fake = _FakeCuda(elapsed_ms=0.018)
    fake.install(monkeypatch)
    sleeps = []
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: sleeps.append((cycles, fake.capturing)))
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    args = bench_options.BenchOptions(launches=20, replays=5, warmup=2)
    assert bench.launch_floor(args, "cuda") == pytest.approx(0.9)  # 0.018 ms / 20 launches
    assert sleeps.count((0, True)) == 20 and sleeps.count((0, False)) == 3  # captured in a graph, after warm-up calls
    assert bench.launch_floor(args, "cpu") is None


def test_the_floor_is_timed_again_before_each_ms_candidates_and_points_read_above_it(monkeypatch, tmp_path, capsys):
    # An empty kernel timed after other kernels takes longer than first in a run (H200: 0.83-0.85 against 0.66-0.68 us),
    # so each M's points are also read above a floor timed in the state they run in: just before them.
    fake = _FakeCuda(elapsed_ms=0.1)  # 5 us per launch for every candidate call
    fake.install(monkeypatch)
    order, floors = [], iter([0.6, 0.8, 0.9])
    monkeypatch.setattr(bench, "launch_floor", lambda args, device: order.append("floor") or next(floors))
    monkeypatch.setattr(bench, "count_launched", lambda launchers: None)  # torch.profiler has no fake
    make = bench.make_inputs
    monkeypatch.setattr(bench, "make_inputs", lambda M, **kw: make(M, **{**kw, "device": "cpu"}))
    def route(scores, *rest):
        order.append(f"route {scores.shape[0]}")
        return torch.zeros(scores.shape[0], 8), torch.zeros(scores.shape[0], 8, dtype=torch.int32)  # an answer of the right form

    cand = Candidate(name="test-bench-floors", route=route, devices=("cuda",))
    options = bench_options.BenchOptions(m=(1, 4), launches=20, replays=2, warmup=1, experts=224, topk=8)
    report = bench.run_bench([cand], options, device="cuda", log=lambda _: None)
    assert report["method"]["launch_floor_us"] == 0.6 and report["method"]["launch_floor_by_m_us"] == {"1": 0.8, "4": 0.9}
    firsts = [order.index("floor"), order.index("route 1"), order.index("route 4")]
    assert order[:2] == ["floor", "floor"] and order[firsts[1] - 1] == "floor" and "floor" in order[firsts[1]:firsts[2]]
    (c,) = report["curves"]
    assert c["above_floor_us"] == {"1": 4.4, "4": 4.4} and c["above_floor_of_m_us"] == {"1": 4.2, "4": 4.1}
    from contracts.commands.bench import print_summary

    print_summary(report, tmp_path)
    out = capsys.readouterr().out
    assert "0.60 us per launch on this host at the start of the run; 0.80-0.90 timed again before each M" in out
    assert "above the floor of each M: M=1 4.20, M=4 4.10 us" in out


def test_the_summary_prints_the_launch_floor_when_there_is_one(cpu_run, tmp_path, capsys):
    _, stdout, _, _, report = cpu_run
    assert report["method"]["launch_floor_us"] is None and "launch floor" not in stdout  # the CPU timer has no launch
    from contracts.commands.bench import print_summary

    print_summary({**report, "method": {**report["method"], "launch_floor_us": 0.894}}, tmp_path)
    assert "launch floor: an empty kernel takes 0.89 us per launch" in capsys.readouterr().out


def test_plot_draws_crossovers_eager_points_and_unavailable_candidates(tmp_path):
    def curve(name, points, timer="cuda-graph"):
        results = [{"m": m, "status": "timed", "timer": timer, "median_us": us,
                    "spread": {"min": us * 0.9, "p90": us * 1.1}} for m, us in points]  # fmt: skip
        return {"name": name, "status": "ok", "results": results}

    base = curve("a", [(1, 10.0), (64, 12.0), (4096, 80.0)])
    other = curve("b", [(1, 30.0), (64, 20.0), (4096, 40.0)], timer="cuda-eager")
    report = {
        "device": "cuda", "environment": {"device_name": "a GPU"}, "m": [1, 64, 4096], "baseline": "a",
        "method": {"timer": bench.GRAPH_LABEL, "description": "d", "experts": 896, "topk": 16, "dtype": "bf16", "bias_dtype": "bf16"},
        "candidates": [base, other, {"name": "c", "status": "unavailable", "reason": "no GPU", "results": []}],
        "crossovers": bench_results.crossovers(base, other),
    }  # fmt: skip
    assert len(report["crossovers"]) == 1 and report["crossovers"][0]["faster_above"] == "b"
    data = bench_results.write_plot(tmp_path / "bench.png", report).read_bytes()
    assert data.startswith(PNG_SIGNATURE) and bench.GRAPH_LABEL.encode() in data


def test_on_cuda_a_kernel_with_a_pdl_launch_gets_its_pdl_column_next_to_it():
    from contracts.candidates import get_candidate
    from contracts.run.bench import pdl_note, with_pdl_columns

    chosen = [get_candidate(n) for n in ("radix4", "torch-native", "radix4-serial")]
    names = [c.name for c in with_pdl_columns(chosen, "cuda")]
    assert names == ["radix4", "radix4-pdl", "torch-native", "radix4-serial", "radix4-serial-pdl"]
    assert [c.name for c in with_pdl_columns(chosen + [get_candidate("radix4-pdl")], "cuda")].count("radix4-pdl") == 1
    assert [c.name for c in with_pdl_columns(chosen, "cpu")] == ["radix4", "torch-native", "radix4-serial"]
    note = pdl_note(with_pdl_columns(chosen, "cuda"), "cuda")
    assert "radix4-pdl, radix4-serial-pdl" in note and "timed without PDL, having no PDL launch: torch-native" in note
    assert pdl_note(chosen, "cpu") is None


def test_an_engine_is_timed_through_its_bench_path_prepared_outside_the_timed_region(monkeypatch):
    """What the engine does at load (here: the bias widened) happens once per buffer, before any capture, replay or
    event; the graph captures only the launch, never the adapter's route (which would redo the preparation)."""
    fake = _FakeCuda(elapsed_ms=0.1)
    fake.install(monkeypatch)
    log = []

    def route(scores, bias, topk, renormalize, routed_scaling_factor):  # the adapter's route: prepares on every call
        raise AssertionError("the bench path must not call route")

    def prepare(scores, bias, topk, renormalize, routed_scaling_factor):
        log.append(("prepare", fake.capturing, fake.replays))
        widened = bias.float()
        answer = (torch.zeros(scores.shape[0], topk, dtype=torch.bfloat16), torch.zeros(scores.shape[0], topk, dtype=torch.int64))
        return lambda: log.append(("launch", fake.capturing, widened.dtype)) or answer  # an engine's own dtypes

    cand = Candidate(name="test-bench-engine", route=route, prepare_launch=prepare)
    args = bench_options.BenchOptions(launches=10, replays=3, warmup=2, rotate=2)
    inputs = points.make_inputs(4, experts=896, dtype=torch.bfloat16, bias_dtype=torch.bfloat16, device="cpu", seed=0, rotate=2)
    event_samples = timing._event_samples  # the shared timer's timed region (kernels.timing)
    timed_from = []  # where the log stood when the helper's timed replays began
    monkeypatch.setattr(timing, "_event_samples", lambda *a: timed_from.append(len(log)) or event_samples(*a))
    point = points.bench_point(cand, cand.route, 4, inputs, args, "cuda")
    assert point["status"] == "timed" and point["path"] == "engine launch" and point["timer"] == "cuda-graph"
    prepares = [e for e in log if e[0] == "prepare"]
    assert prepares == [("prepare", False, 0)] * 2  # once per rotated buffer, before any capture or replay
    assert len(timed_from) == 1 and log.index(prepares[-1]) < timed_from[0]  # timed once, by the shared helper
    first_capture = next(i for i, e in enumerate(log) if e[:2] == ("launch", True))
    assert all(e[0] == "launch" for e in log[first_capture:]) and log.index(prepares[-1]) < first_capture
    assert sum(e[:2] == ("launch", True) for e in log) >= args.launches and {e[2] for e in log if e[0] == "launch"} == {torch.float32}
    assert "launched" not in point  # counted by count_launched, after every timing
    launchers = []
    monkeypatch.setattr(bench, "count_kernels", lambda fn, graph: {"kernels": 1, "copies": 0, "graph": graph})
    again = points.bench_point(cand, cand.route, 4, inputs, args, "cuda", launchers)
    assert "launched" not in again and launchers[0][0] is again  # the profiler does not run between timings
    bench.count_launched(launchers)
    assert again["launched"] == {"kernels": 1, "copies": 0, "graph": True}
    # Without a bench path the same candidate is timed through route, and says so.
    plain = points.bench_point(all_candidates()["torch-native"], all_candidates()["torch-native"].route, 4, inputs, args, "cuda")
    assert plain["path"] == "route"


def test_every_engine_candidate_has_a_bench_path():
    from contracts.candidates.engines import ADAPTERS

    for name in ADAPTERS:
        assert all_candidates()[name].prepare_launch is not None, name


def test_the_summary_prints_what_each_timed_call_launched(tmp_path, capsys):
    from contracts.commands.bench import print_summary

    def point(m, kernels, copies=0):
        return {"m": m, "status": "timed", "timer": "cuda-graph", "median_us": 2.0, "path": "engine launch",
                "spread": {"min": 1.9, "p90": 2.1, "max": 2.2}, "launched": {"kernels": kernels, "copies": copies}}  # fmt: skip

    report = {"device": "cuda", "m": [1, 64], "baseline": "a", "crossovers": [], "method": {"timer": bench.GRAPH_LABEL},
              "candidates": [{"name": "a", "status": "ok", "results": [point(1, 1), point(64, 1)]},
                             {"name": "b", "status": "ok", "results": [point(1, 2, 1), point(64, 2, 1)]}]}  # fmt: skip
    print_summary(report, tmp_path)
    out = capsys.readouterr().out
    assert "launched: a: 1 kernel per call (engine launch)" in out
    assert "launched: b: 2 kernels + 1 copies/memsets per call (engine launch)" in out


# ---------------------------------------------------------------- --contract: every candidate timed under one contract


def test_a_contract_sets_the_shape_groups_bias_and_the_call_options_it_admits():
    v3 = bench_options.options_for_contract("deepseek-v3", m=(1,))
    assert (v3.experts, v3.topk, v3.group_args, v3.bias) == (256, 8, {"num_expert_group": 8, "topk_group": 4}, True)
    assert (v3.renormalize, v3.routed_scaling_factor) == (True, 2.5)
    assert bench_options.options_for_contract("deepseek-v3", experts=128, topk=4).experts == 128  # a given shape wins
    mixtral, gpt_oss = bench_options.options_for_contract("mixtral"), bench_options.options_for_contract("gpt-oss")
    assert not mixtral.bias and mixtral.group_args == {} and mixtral.routed_scaling_factor == 1.0  # no scaling admitted
    assert gpt_oss.renormalize is False  # its router never renormalizes: the bench calls it as it is called
    with pytest.raises(ValueError, match="per-expert weight scale"):
        bench_options.options_for_contract("gemma4")


def test_under_a_contract_every_route_gate_and_bench_path_gets_its_groups_and_others_are_unavailable():
    seen = []

    def gate(*, rows, experts, topk, num_expert_group=1, topk_group=1, contract=None, **_):
        seen.append(("gate", experts, topk, num_expert_group, topk_group, contract))
        return True

    def route_for(contract):
        def route(scores, bias, topk, renormalize, routed_scaling_factor, **groups):
            seen.append(("route", contract, scores.shape[1], topk, groups))
            return torch.zeros(scores.shape[0], topk), torch.zeros(scores.shape[0], topk, dtype=torch.int32)

        return route

    def prepare(scores, bias, topk, renormalize, routed_scaling_factor, **groups):
        seen.append(("prepare", scores.shape[1], groups))
        return lambda: None

    follows = Candidate(name="test-bench-follows", route=route_for("own"), covered=gate, contracts=("*",), gate_takes_contract=True,
                        route_for_contract=route_for)  # fmt: skip
    engine = Candidate(name="test-bench-engine-v3", route=route_for("engine"), contracts=("deepseek-v3",), prepare_launch=prepare)
    other = Candidate(name="test-bench-aiter-only", route=route_for("aiter"))
    options = bench_options.options_for_contract("deepseek-v3", m=(1, 4), repeats=1)
    report = bench.run_bench([follows, engine, other], options, device="cpu", log=lambda _: None)
    status = {c["name"]: (c["status"], c["reason"]) for c in report["candidates"]}
    assert status["test-bench-aiter-only"] == ("unavailable", "test-bench-aiter-only follows contract aiter, not deepseek-v3, "
                                                              "whose scoring, bias or groups differ")  # ungrouped: not the same work
    groups = {"num_expert_group": 8, "topk_group": 4}
    assert ("gate", 256, 8, 8, 4, "deepseek-v3") in seen
    assert any(e[0] == "route" for e in seen) and all(e[1:3] == ("deepseek-v3", 256) and e[4] == groups for e in seen if e[0] == "route")  # the contract's route
    assert [e for e in seen if e[0] == "prepare"] == [("prepare", 256, groups)] * 2  # the engine's path, once per M
    assert report["method"]["contract"] == "deepseek-v3" and report["method"]["groups"] == [8, 4]
    assert {c["contract"] for c in report["candidates"]} == {"deepseek-v3"}


def test_under_a_contract_a_kernel_of_another_contract_that_serves_its_shape_is_timed_beside_and_marked(capsys):
    # issue 60: under kimi-k2 the bench listed sglang-triton and FlashInfer's NoAuxTc as unavailable ("follows contract
    # aiter"), though both serve K2's shape in production: the race users read could not be read from the bench
    seen = []

    def gate(*, rows, experts, topk, contract=None, **_):
        seen.append(("gate", experts, topk, contract))
        return True

    def route(scores, bias, topk, renormalize, routed_scaling_factor):
        seen.append(("route", scores.shape[1], topk, bias is not None))
        return torch.zeros(scores.shape[0], topk), torch.zeros(scores.shape[0], topk, dtype=torch.int32)

    aiter_kernel = Candidate(name="test-bench-aiter-kernel", route=route, covered=gate, gate_takes_contract=True)
    softmax = Candidate(name="test-bench-softmax", route=route, contract="mixtral")  # another scoring: no race
    options = bench_options.options_for_contract("kimi-k2", m=(1, 4), repeats=1)
    report = bench.run_bench([all_candidates()["oracle"], aiter_kernel, softmax], options, device="cpu", log=lambda _: None)
    entries = {c["name"]: c for c in report["candidates"]}
    timed = entries["test-bench-aiter-kernel"]
    assert timed["status"] == "ok" and timed["contract"] == "aiter" and "not kimi-k2" in timed["note"], timed
    assert [p["status"] for p in timed["results"]] == ["timed", "timed"], timed["results"]
    assert ("gate", 384, 8, "aiter") in seen and ("route", 384, 8, True) in seen  # K2's shape, its own routing
    assert entries["test-bench-softmax"]["status"] == "unavailable" and "differ" in entries["test-bench-softmax"]["reason"]
    assert entries["oracle"]["contract"] == "kimi-k2" and not entries["oracle"].get("note")
    from contracts.commands.bench import print_summary

    print_summary(report, Path("out"))
    out = capsys.readouterr().out
    assert "test-bench-aiter-kernel [aiter]" in out and "[aiter]: test-bench-aiter-kernel follows contract aiter, not kimi-k2" in out, out


def test_a_contract_without_a_bias_times_every_candidate_with_bias_none(tmp_path):
    code, stdout, stderr = run_bench(["--candidate", "oracle", "--contract", "mixtral", "--m", "1,4", "--repeats", "2",
                                      "--device", "cpu", "--out", str(tmp_path)])  # fmt: skip
    assert code == 0, stderr
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["method"]["bias_dtype"] is None and report["method"]["experts"] == 8 and report["method"]["topk"] == 2
    assert all(p["status"] == "timed" for p in _entry(report, "oracle")["results"])
    assert "contract mixtral" in stdout


@pytest.mark.parametrize("contract, words", [("deepsek-v3", "did you mean 'deepseek-v3'"), ("gemma4", "per-expert weight scale"),
                                             ("mine.toml", "built-in contract's name")])  # fmt: skip
def test_a_contract_bench_cannot_take_is_one_line_naming_the_option(contract, words, tmp_path):
    code, stdout, stderr = run_bench(["--candidate", "oracle", "--contract", contract, "--device", "cpu", "--out", str(tmp_path / "o")])
    lines = stderr.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "--contract" in lines[0] and words in lines[0], stderr
    assert not (tmp_path / "o" / "bench.json").exists()
