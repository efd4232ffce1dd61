"""Exit codes that lie, and the design card's own commands (issue 55): ``bench``, ``diff`` and ``nightly``.

Each test is an attack that passed on the main of 2026-12-07 (exit 0, or "No regression", for a broken router
or a worse night) and must be refused now. The routers are ``tests/adversarial/exit_routers.py``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contracts.commands import bench as bench_command
from contracts.commands import diff as diff_command
from contracts.commands import nightly as nightly_command

ROOT = Path(__file__).resolve().parents[2]
R = "tests.adversarial.exit_routers"


def _in_process(main, argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue()


def _cli(*args, timeout=300) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "contracts", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


def _bench_args(out: Path, *routers: str, m: str = "1,8") -> list[str]:
    return ["--candidate", ",".join(f"{R}:{r}" for r in ("right", *routers)), "--m", m, "--repeats", "1", "--device", "cpu",
            "--out", str(out)]  # fmt: skip


def _points(out: Path, router: str) -> list[dict]:
    report = json.loads((out / "bench.json").read_text())
    return next(c for c in report["candidates"] if c["name"] == f"{R}:{router}")["results"]


# ---------------------------------------------------------------- bench: an error point is an error, and bench.json is always written


@pytest.mark.parametrize(
    "router, words",
    [
        ("calls_sys_exit", "SystemExit"),
        ("returns_none", "returned NoneType, not a (weights, ids) pair"),
        ("returns_wrong_dtypes", "dtypes weights torch.float16, ids torch.int64"),
        ("returns_one_column_short", "shapes weights (4, 15)"),
        ("none_after_warmup", "returned NoneType"),
        ("none_every_other_call", "returned NoneType"),
        ("returns_column_major", "not contiguous"),
    ],
)
def test_bench_a_candidate_whose_answer_is_malformed_or_that_exits_is_an_error_point_and_exit_1(router, words, tmp_path):
    code, out = _in_process(bench_command.main, _bench_args(tmp_path, router, m="4"))  # 4 rows: a transposed [1, k] is contiguous
    assert code == 1, out
    (point,) = _points(tmp_path, router)
    assert point["status"] == "error" and words in point["reason"] and point["median_us"] is None, point
    assert f"error: {R}:{router} M=4" in out
    report = json.loads((tmp_path / "bench.json").read_text())
    assert report["status"] == "error" and [(e["candidate"], e["m"]) for e in report["errors"]] == [(f"{R}:{router}", 4)]
    assert all(p["status"] == "timed" for p in _points(tmp_path, "right"))  # the healthy candidate is still timed


def test_bench_a_candidate_that_raises_at_one_m_exits_1_and_keeps_its_other_points(tmp_path):
    code, out = _in_process(bench_command.main, _bench_args(tmp_path, "raises_at_8_rows", m="1,8,16"))
    assert code == 1, out
    assert [p["status"] for p in _points(tmp_path, "raises_at_8_rows")] == ["timed", "error", "timed"]
    assert "planted failure at M=8" in _points(tmp_path, "raises_at_8_rows")[1]["reason"]


@pytest.mark.slow  # three benches as commands in subprocesses (torch imported in each, under a supervisor): ~15 s
@pytest.mark.parametrize("router, recorded", [("calls_os_exit", True), ("exits_at_64_rows", True), ("calls_libc_exit", False)])
def test_bench_a_candidate_that_ends_the_process_exits_1_and_bench_json_says_so(router, recorded, tmp_path):
    code, out = _cli("bench", *_bench_args(tmp_path, router, m="1,64"))
    assert code == 1, out
    report = json.loads((tmp_path / "bench.json").read_text())
    if recorded:  # os._exit inside the call is caught: an error point, and the run goes on
        assert report["status"] == "error" and any(e["candidate"] == f"{R}:{router}" for e in report["errors"]), report
        assert all(p["status"] == "timed" for p in _points(tmp_path, "right"))
    else:  # libc _exit ends the process: the last bench.json says where it was, the supervisor says it did not finish
        assert report["status"] == "incomplete" and report["in_progress"]["candidate"] == f"{R}:{router}", report
        assert "ended without finishing" in out


# ---------------------------------------------------------------- diff: one ordering of statuses


def _summary(candidate="radix4", status="pass", families=None, contract="aiter", seed=0, rows=1000, logits=None, **extra):
    families = families or {"all_equal": {}, "random_bf16": {}}
    fams = {name: {"rows": 100, "rows_skipped": 0, "mismatched_rows": sum(c.values()), "near_tie_rows": 0, "expected_rows": 0,
                   "clauses": dict(c)} for name, c in families.items()}  # fmt: skip
    options = {"rows": rows, "families": sorted(fams), "experts": 896, "topk": 16, "repeat": 1, "exact": False}
    if logits:
        options["logits"] = {"path": "/tmp/x.safetensors", "sha256": logits}
    return {"schema_version": 2, "candidate": candidate, "contract": contract, "against": None, "device": "cpu", "status": status,
            "rows_checked": 100 * len(fams), "mismatched_rows": sum(f["mismatched_rows"] for f in fams.values()), "seed": seed,
            "options": options, "families": fams, "error": None, **extra}  # fmt: skip


def _bundle(folder: Path, *summaries, bench=None) -> Path:
    """A nightly-shaped bundle of hand-made summaries (and a bench.json)."""
    folder.mkdir(parents=True)
    record = {}
    for i, s in enumerate(summaries):
        sub = folder / "candidates" / f"c{i}"
        sub.mkdir(parents=True)
        (sub / "summary.json").write_text(json.dumps(s))
        record[s["candidate"]] = {"status": s["status"], "bundle": f"candidates/c{i}"}
    (folder / "nightly.json").write_text(json.dumps({"schema_version": 1, "candidates": record, "pairs": {}}))
    if bench is not None:
        (folder / "bench").mkdir()
        (folder / "bench" / "bench.json").write_text(json.dumps(bench))
    return folder


def _diff(tmp_path, old: list, new: list, old_bench=None, new_bench=None) -> tuple[int, str]:
    a = _bundle(tmp_path / "old", *old, bench=old_bench)
    b = _bundle(tmp_path / "new", *new, bench=new_bench)
    return _in_process(diff_command.main, [str(a), str(b)])


NOT_COVERED = dict(status="not_covered", reason="no row of family random_bf16 was checked")
ERROR = dict(status="error", error={"kind": "exception", "case": "all_equal:1:8", "message": "boom"})


@pytest.mark.parametrize(
    "old, new",
    [
        ({}, NOT_COVERED),
        (NOT_COVERED, dict(status="fail", families={"all_equal": {"selection": 3}, "random_bf16": {}})),
        ({}, ERROR),
        (dict(status="fail", families={"all_equal": {"selection": 3}, "random_bf16": {}}), ERROR),
        ({}, dict(status="interrupted", interrupted="SIGTERM")),
    ],
    ids=["pass-not_covered", "not_covered-fail", "pass-error", "fail-error", "pass-interrupted"],
)
def test_diff_a_worse_status_is_a_regression(old, new, tmp_path):
    code, out = _diff(tmp_path, [_summary(**old)], [_summary(**new)])
    assert code == 1, out
    assert f"status {_summary(**old)['status']} -> {_summary(**new)['status']}" in out.split("Other changes")[0]


def test_diff_an_error_on_both_nights_is_listed(tmp_path):
    code, out = _diff(tmp_path, [_summary(**ERROR)], [_summary(**ERROR)])
    assert "radix4" in out and "error" in out and "still error" in out, out


def test_diff_a_family_whose_rows_are_gone_is_a_regression(tmp_path):
    new = _summary(families={"all_equal": {}, "random_bf16": {}})
    new["families"]["random_bf16"]["rows"] = 0
    code, out = _diff(tmp_path, [_summary()], [new])
    assert code == 1 and "family random_bf16 had 100 rows checked, now none" in out, out


def test_diff_a_check_that_passed_and_is_gone_is_a_regression(tmp_path):
    code, out = _diff(tmp_path, [_summary(), _summary("serial")], [_summary()])
    assert code == 1 and "serial" in out.split("Other changes")[0] and "missing" in out, out


def _bench(*points, name="radix4"):
    return {"kind": "bench", "method": {"contract": "aiter", "experts": 896, "topk": 16, "dtype": "bf16", "bias_dtype": "bf16", "seed": 0},
            "candidates": [{"name": name, "status": "ok", "results": list(points)}]}  # fmt: skip


def _timed(m, us=10.0):
    return {"m": m, "status": "timed", "timer": "cuda-graph", "median_us": us, "spread": {"min": us, "p90": us}}


def test_diff_a_bench_point_that_was_timed_and_now_errors_or_is_gone_is_a_regression(tmp_path):
    old = _bench(_timed(1), _timed(8), _timed(64))
    new = _bench(_timed(1), {"m": 8, "status": "error", "reason": "route raised RuntimeError: boom", "median_us": None})
    code, out = _diff(tmp_path, [_summary()], [_summary()], old, new)
    regressions = out.split("Other changes")[0]
    assert code == 1, out
    assert "radix4 M=8" in regressions and "boom" in regressions
    assert "radix4 M=64" in regressions and "gone" in regressions


# ---------------------------------------------------------------- diff: pair what was checked, not names


def test_diff_pass_then_fail_under_a_new_name_is_not_no_regression(tmp_path):
    failing = _summary("radix4-renamed", status="fail", families={"all_equal": {"selection": 100}, "random_bf16": {}})
    code, out = _diff(tmp_path, [_summary()], [failing])
    assert code == 1, out
    assert "No regression" not in out
    assert "radix4-renamed" in out and "unpaired" in out and "nothing pairs" in out.lower(), out


@pytest.mark.parametrize(
    "changed",
    [dict(contract="serial"), dict(seed=1), dict(rows=50), dict(families={"all_equal": {}}), dict(logits="ab" * 32)],
    ids=["contract", "seed", "rows", "families", "logits"],
)
def test_diff_the_same_name_over_other_inputs_does_not_pair(changed, tmp_path):
    fam = changed.pop("families", {"all_equal": {"selection": 100}})
    code, out = _diff(tmp_path, [_summary()], [_summary(status="fail", families=fam, **changed)])
    assert code == 1 and "nothing pairs" in out.lower(), out


def test_diff_the_same_check_under_the_same_inputs_pairs(tmp_path):
    code, out = _diff(tmp_path, [_summary(logits="cd" * 32)], [_summary(logits="cd" * 32)])
    assert code == 0 and "No regression." in out, out


def test_nightly_compare_previous_says_when_nothing_pairs_and_fails(tmp_path):
    from contracts.run import nightly as nightly_lib

    target = {"backend": "cpu", "device_model": "x"}
    old = _bundle(tmp_path / "nightly-20260101T000000Z-cpu", _summary())
    new = _bundle(tmp_path / "nightly-20260102T000000Z-cpu", _summary("renamed", status="fail",
                                                                       families={"all_equal": {"selection": 100}, "random_bf16": {}}))  # fmt: skip
    for b in (old, new):
        doc = json.loads((b / "nightly.json").read_text())
        (b / "nightly.json").write_text(json.dumps({**doc, "execution_target": target}))
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        comparison = nightly_lib._compare(new, target, None, 0.1)
    assert comparison["status"] == "regression", comparison
    assert "nothing pairs" in printed.getvalue().lower()


# ---------------------------------------------------------------- nightly: --contract, and a first night that failed


def test_nightly_contract_is_refused_in_one_line_when_unknown(tmp_path):
    code, out = _in_process(nightly_command.main, ["--out", str(tmp_path), "--contract", "aitre", "--candidates", f"{R}:right"])
    assert code == 2 and len(out.strip().splitlines()) == 1 and "--contract" in out, out


# Slow: a nightly of one check (50 rows, the pinned cases of mixtral: ~12,000 rows) of a router that fails every row, and
# its diagnosis: 15-30 s on the shared 2-core machine.
@pytest.mark.slow
def test_a_first_nightly_whose_check_failed_exits_1_and_every_line_names_the_contract(tmp_path):
    router = f"{R}:wrong_under_any_contract"
    code, out = _in_process(nightly_command.main, ["--out", str(tmp_path), "--rows", "50", "--no-probe", "--contract", "mixtral",
                                                   "--candidates", router])  # fmt: skip
    assert code == 1, out
    (bundle,) = tmp_path.glob("nightly-*")
    env = json.loads((bundle / "nightly.json").read_text())
    assert env["options"]["contract"] == "mixtral"
    assert env["candidates"][router]["status"] == "fail" and env["candidates"][router]["summary"]["contract"] == "mixtral"
    lines = [ln for ln in out.splitlines() if ln.startswith(("nightly", "check ", "compare", "error:", "==", router))]  # the check's progress too
    assert len(lines) >= 5 and all("contract mixtral" in ln for ln in lines), lines
    (gate,) = [ln for ln in lines if "nothing to compare against" in ln]
    assert router in gate and "fail" in gate


def _night(candidates: dict, comparison=None, bench=None, probe=None, contract=None):
    from contracts.reports.schema import NightlyEnvelope
    from contracts.run.nightly import NightlyRun, _not_passed

    envelope = NightlyEnvelope(name="n", candidates=candidates, pairs={"a vs b": {"status": "skipped", "reason": "rocm"}},
                               bench=bench or {"status": "skipped"}, probe=probe or {"status": "skipped"},
                               comparison=comparison, options={"contract": contract})  # fmt: skip
    return NightlyRun(Path("n"), envelope, regressed=(comparison or {}).get("status") == "regression",
                      failed=bool(_not_passed(envelope)), interrupted=None)  # fmt: skip


@pytest.mark.parametrize(
    "candidates, comparison, bench, probe, fails",
    [
        ({"x": {"status": "fail"}}, None, None, None, True),  # first night, nothing compared: its own verdict gates it
        ({"x": {"status": "not_covered"}}, {"status": "no previous", "reason": "no earlier bundle"}, None, None, True),
        ({"x": {"status": "error"}}, {"status": "error", "reason": "could not read a bundle"}, None, None, True),
        ({"x": {"status": "pass"}}, None, {"status": "error", "errors": [{"candidate": "x", "m": 8, "reason": "raised"}]}, None, True),
        ({"x": {"status": "pass"}}, None, None, {"status": "ok", "runs": {"x": {"status": "error"}}}, True),
        ({"x": {"status": "fail"}}, {"status": "no regression"}, None, None, False),  # failing every night: no regression
        ({"x": {"status": "pass"}}, {"status": "regression", "regressions": ["nothing pairs"]}, None, None, True),
        ({"x": {"status": "pass"}, "y": {"status": "unavailable"}}, None, None, None, False),
    ],
)
def test_the_nightly_gate_with_and_without_something_to_compare_against(candidates, comparison, bench, probe, fails):
    from contracts.run.nightly import nightly_gate

    failed, line = nightly_gate(_night(candidates, comparison, bench, probe, contract="serial"), "regression")
    assert failed is fails, line
    if fails:
        assert line.startswith("error:") and "contract serial" in line and len(line.splitlines()) == 1
    assert nightly_gate(_night(candidates, comparison, bench, probe), "never") == (False, None)


def test_nightly_contract_file_that_does_not_exist_is_one_line(tmp_path):
    code, out = _in_process(nightly_command.main, ["--out", str(tmp_path), "--contract", str(tmp_path / "no.toml"), "--candidates", f"{R}:right"])
    assert code == 2 and len(out.strip().splitlines()) == 1 and "--contract" in out and "no.toml" in out, out
    assert not list(tmp_path.glob("nightly-*"))
