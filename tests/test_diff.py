"""contracts.diff: regressions (exit 1) versus mere changes (exit 0), on hand-made bundles."""

import copy
import json

import pytest

from contracts.commands import diff


def _summary(candidate="radix4", status="pass", families=None, deviations=None, against=None):
    families = families or {"all_equal": {}, "random_bf16": {}}
    fams = {}
    for name, clauses in families.items():
        bad = sum(clauses.values())
        fams[name] = {"rows": 100, "rows_skipped": 0, "mismatched_rows": bad, "near_tie_rows": 0, "expected_rows": 0, "clauses": dict(clauses)}
    totals = {}
    for f in fams.values():
        for clause, n in f["clauses"].items():
            totals[clause] = totals.get(clause, 0) + n
    return {
        "schema_version": 1, "candidate": candidate, "contract": "aiter", "against": against, "device": "cuda",
        "status": status, "rows_checked": 100 * len(fams), "mismatched_rows": sum(f["mismatched_rows"] for f in fams.values()),
        "clauses": {"selection": 0, "tie_order": 0, "nan_last": 0, **totals}, "families": fams,
        "expected_deviations": deviations or {}, "error": None,
    }  # fmt: skip


def _write(folder, summary):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary))
    return folder


def _run(tmp_path, old, new, *extra):
    a, b = _write(tmp_path / "old", old), _write(tmp_path / "new", new)
    return diff.main([str(a), str(b), *extra])


def test_identical_bundles_have_no_regression(tmp_path, capsys):
    assert _run(tmp_path, _summary(), _summary()) == 0
    assert "No regression." in capsys.readouterr().out


def test_a_family_that_turns_red_is_a_regression(tmp_path, capsys):
    new = _summary(status="fail", families={"all_equal": {"tie_order": 7}, "random_bf16": {}})
    assert _run(tmp_path, _summary(), new) == 1
    out = capsys.readouterr().out
    assert "radix4: status pass -> fail" in out
    assert "radix4: family all_equal turned red: tie_order 7 rows" in out


def test_a_new_clause_in_an_already_red_family_is_a_regression_a_changed_count_is_not(tmp_path, capsys):
    old = _summary(status="fail", families={"all_equal": {"tie_order": 7}, "random_bf16": {}})
    new = _summary(status="fail", families={"all_equal": {"tie_order": 9, "nan_last": 1}, "random_bf16": {}})
    assert _run(tmp_path, old, new) == 1
    out = capsys.readouterr().out
    assert "new violation of clause nan_last in family all_equal: 1 rows (was 0)" in out
    assert "clause tie_order in family all_equal: 7 -> 9 rows" in out.split("Other changes")[1]


def test_fixes_and_declared_deviations_are_changes_not_regressions(tmp_path, capsys):
    declared = {"renorm_guard": {"reason": "no guard", "rows": 0, "observed": False}, "nan_last": {"reason": "x", "rows": 4, "observed": True}}
    old = _summary(status="fail", families={"all_equal": {"tie_order": 7}, "random_bf16": {}}, deviations=declared)
    flipped = copy.deepcopy(declared)
    flipped["renorm_guard"].update(rows=3, observed=True)
    flipped["nan_last"].update(rows=0, observed=False)
    assert _run(tmp_path, old, _summary(deviations=flipped)) == 0
    out = capsys.readouterr().out
    assert "status fail -> pass" in out
    assert "clause tie_order in family all_equal no longer violated" in out
    assert "declared deviation renorm_guard appeared (3 rows)" in out
    assert "declared deviation nan_last vanished" in out


def test_a_check_that_becomes_unavailable_is_a_regression(tmp_path, capsys):
    gone = {**_summary(), "status": "unavailable", "reason": "build failed: BuildError: nvcc not found"}
    assert _run(tmp_path, _summary(), gone) == 1
    assert "was checked (pass), now unavailable: build failed" in capsys.readouterr().out
    assert _run(tmp_path, gone, _summary()) == 0


def _nightly(folder, summaries, probe=None, bench=None):
    folder.mkdir(parents=True)
    record = {}
    for s in summaries:
        label = s["candidate"] + (f" vs {s['against']}" if s.get("against") else "")
        sub = f"candidates/{label.replace(' ', '_')}"
        _write(folder / sub, s)
        record[label] = {"status": s["status"], "bundle": sub}
    (folder / "nightly.json").write_text(json.dumps({"schema_version": 1, "candidates": record, "pairs": {}}))
    if probe is not None:
        (folder / "probe" / "radix4").mkdir(parents=True)
        (folder / "probe" / "radix4" / "probe.json").write_text(json.dumps(probe))
    if bench is not None:
        (folder / "bench").mkdir()
        (folder / "bench" / "bench.json").write_text(json.dumps(bench))
    return folder


def _probe(perm, consistent=True):
    return {"status": "done", "candidate": "radix4", "permutation": perm, "matches": "aiter" if perm[0] == 252 else None,
            "consistent": consistent, "dependence": "" if consistent else "the order depends on the batch size"}  # fmt: skip


def _bench(us):
    return {"kind": "bench", "candidates": [{"name": "radix4", "results": [
        {"m": 1, "status": "timed", "timer": "cuda-graph", "median_us": us, "spread": {"min": us / 2, "p90": us * 9}},
        {"m": 4096, "status": "skipped", "median_us": None}]}]}  # fmt: skip


def test_nightly_bundles_probe_and_bench(tmp_path, capsys):
    perm = [252, 253, 254, 255, 508, 509, 510, 511]
    old = _nightly(tmp_path / "old", [_summary(), _summary("serial", against="block-argmax")], _probe(perm), _bench(10.0))
    same = _nightly(tmp_path / "same", [_summary(), _summary("serial", against="block-argmax")], _probe(perm), _bench(10.5))
    assert diff.main([str(old), f"file://{same}"]) == 0
    assert "No regression." in capsys.readouterr().out

    swapped = perm[:3] + [perm[4], perm[3]] + perm[5:]
    new = _nightly(tmp_path / "new", [_summary(), _summary("serial", against="block-argmax")], _probe(swapped), _bench(12.5))
    report = tmp_path / "diff.json"
    assert diff.main([str(old), str(new), "--json", str(report)]) == 1
    out = capsys.readouterr().out
    assert "tie order changed (rule aiter -> aiter); first difference at position 3" in out
    assert "latency bench/bench.json radix4 M=1 (cuda-graph): 10 -> 12.5 us (+25.0%, threshold 10%)" in out
    assert json.loads(report.read_text())["regressed"] is True
    assert diff.main([str(old), str(new), "--latency-threshold", "30%"]) == 1  # the tie order still regressed
    assert "latency" not in capsys.readouterr().out.split("Other changes")[0]


def test_an_inconsistent_tie_order_redrawn_is_not_a_regression(tmp_path, capsys):
    old = _nightly(tmp_path / "old", [_summary()], _probe([5, 1, 2, 3], consistent=False))
    new = _nightly(tmp_path / "new", [_summary()], _probe([1, 5, 2, 3], consistent=False))
    assert diff.main([str(old), str(new)]) == 0
    assert "tie order changed" in capsys.readouterr().out
    worse = _nightly(tmp_path / "worse", [_summary()], _probe([5, 1, 2, 3], consistent=False))
    steady = _nightly(tmp_path / "steady", [_summary()], _probe([5, 1, 2, 3], consistent=True))
    assert diff.main([str(steady), str(worse)]) == 1
    assert "no longer consistent" in capsys.readouterr().out


@pytest.mark.parametrize("args", [["/nonexistent/a", "/nonexistent/b"], ["OLD_EMPTY", "OLD_EMPTY"], ["--latency-threshold", "fast", "a", "b"], []])
def test_usage_errors_exit_2(tmp_path, args, capsys):
    (tmp_path / "empty").mkdir()
    args = [str(tmp_path / "empty") if a == "OLD_EMPTY" else a for a in args]
    assert diff.main(args) == 2
