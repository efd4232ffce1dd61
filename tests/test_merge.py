"""contracts.merge: n shard bundles of a check merge to the counts of one unsharded run."""

import json

import pandas as pd
import pytest

from contracts import check
from contracts.commands import merge

ROWS, SEED = 900, 3
COUNTS = ("status", "rows_checked", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_deviation_rows",
          "exact_rows", "within_tolerance_rows", "max_weight_ulp", "clauses", "families", "expected_deviations", "cells_recorded", "by_option")  # fmt: skip


def _check(out, *extra, candidate="torch-native"):
    code = check.main(["--candidate", candidate, "--rows", str(ROWS), "--seed", str(SEED), "--out", str(out), "--quiet", *extra])
    assert code in (0, 1, 3), f"contracts.check exited {code}"
    return out


def _summary(folder):
    return json.loads((folder / "summary.json").read_text())


def _cells(folder):
    frame = pd.read_csv(folder / "mismatches.csv")
    return frame.sort_values(list(frame.columns)).reset_index(drop=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("merge")
    full = _check(root / "full")
    shards = [_check(root / f"shard{i}", "--shard", f"{i}/3") for i in (1, 2, 3)]
    return root, full, shards


@pytest.mark.slow  # three checks (two shards and the whole) and the merge: ~13 s
def test_merged_shards_match_one_unsharded_run(runs, capsys):
    root, full, shards = runs
    assert merge.main([str(root / "merged"), *map(str, shards)]) == 0
    merged, whole = _summary(root / "merged"), _summary(full)
    assert whole["expected_deviation_rows"] > 0  # torch-native declares deviations: the counts are not all zero
    assert {k: merged[k] for k in COUNTS} == {k: whole[k] for k in COUNTS}
    assert merged["merged_shards"] == ["1/3", "2/3", "3/3"] and merged["shard"] is None
    assert "--shard" not in merged["command"]
    # Mismatch cells are all kept (up to a per-group cap): the same. Declared deviations and near ties keep a sample of
    # 200 cells a family, and the merge samples the shards' cells, not the whole run's first cases: the same numbers,
    # not always the same cells (the families' pinned cases of every launch class fill the sample of several families).
    merged_cells, whole_cells = _cells(root / "merged"), _cells(full)
    pd.testing.assert_frame_equal(*[frame[frame["verdict"] == "mismatch"].reset_index(drop=True) for frame in (merged_cells, whole_cells)])
    assert merged_cells.groupby(["family", "verdict"]).size().to_dict() == whole_cells.groupby(["family", "verdict"]).size().to_dict()
    report = (root / "merged" / "report.md").read_text()
    assert report.startswith(f"# {merged['status'].upper()}: `torch-native`")
    details = json.loads((root / "merged" / "details.json").read_text())
    assert details and all("replay" in d for d in details)
    assert "shards 1/3, 2/3, 3/3" in capsys.readouterr().out


@pytest.mark.slow  # reads the module's three sharded checks and the whole: ~14 s, paid by the first
def test_shards_that_do_not_belong_together_are_refused(runs, tmp_path, capsys):
    root, full, shards = runs
    assert merge.main([str(tmp_path / "m1"), str(shards[0]), str(shards[1])]) == 2
    assert "missing shard(s) 3/3" in capsys.readouterr().err
    assert merge.main([str(tmp_path / "m2"), str(shards[0]), str(shards[1]), "--allow-partial"]) == 0
    partial = _summary(tmp_path / "m2")
    assert partial["rows_checked"] == _summary(shards[0])["rows_checked"] + _summary(shards[1])["rows_checked"]
    assert merge.main([str(tmp_path / "m3"), str(shards[0]), str(shards[0]), str(shards[1]), str(shards[2])]) == 2
    assert "given more than once" in capsys.readouterr().err
    assert merge.main([str(tmp_path / "m4"), str(full), str(shards[1])]) == 2
    assert "is not a shard" in capsys.readouterr().err
    other_seed = _check(tmp_path / "seed9", "--shard", "3/3", "--seed", "9")
    assert merge.main([str(tmp_path / "m5"), str(shards[0]), str(shards[1]), str(other_seed)]) == 2
    assert "seed=9" in capsys.readouterr().err
    assert merge.main([str(tmp_path / "m6"), str(tmp_path / "nothing")]) == 2


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("rows_checked", 10**400, "field rows_checked: 100000000000... (401 digits) is out of range"),
        ("rows_checked", -5, "rows_checked=-5 is negative"),
        ("mismatched_rows", 2**63, "field mismatched_rows: 9223372036854775808 is out of range"),
        ("clauses", {"selection": -1}, "clauses.selection=-1 is negative"),
        ("max_weight_ulp", 10**400, "field max_weight_ulp: 100000000000... (401 digits) is out of range for a number"),
    ],
)
@pytest.mark.slow  # sharded checks for each field: ~11 s
def test_counts_out_of_range_get_one_line_naming_the_field(runs, tmp_path, capsys, field, value, says):
    # Issue 32 item 13: a summary with rows_checked = 10**400 ended merge in an OverflowError traceback.
    import shutil

    root, full, shards = runs
    bad = tmp_path / "bad"
    shutil.copytree(shards[0], bad)
    data = _summary(bad)
    data[field] = value
    (bad / "summary.json").write_text(json.dumps(data))
    assert merge.main([str(tmp_path / "m"), str(bad), str(shards[1]), str(shards[2])]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.slow  # two sharded checks and their merge: ~13 s
def test_shards_whose_sum_leaves_the_range_are_refused(runs, tmp_path, capsys):
    import shutil

    root, full, shards = runs
    copies = []
    for i, shard in enumerate(shards):
        copies.append(tmp_path / f"s{i}")
        shutil.copytree(shard, copies[-1])
        data = _summary(copies[-1])
        data["rows_checked"] = 2**62
        (copies[-1] / "summary.json").write_text(json.dumps(data))
    assert merge.main([str(tmp_path / "m"), *map(str, copies)]) == 2
    err = capsys.readouterr().err
    assert "rows_checked add up to" in err and "Traceback" not in err


@pytest.mark.slow  # sharded checks of two candidates: ~6 s
def test_multi_candidate_shards_merge_per_candidate(tmp_path):
    shards = [_check(tmp_path / f"s{i}", "--shard", f"{i}/2", candidate="oracle,radix4") for i in (1, 2)]
    assert merge.main([str(tmp_path / "merged"), *map(str, shards)]) == 0
    index = json.loads((tmp_path / "merged" / "index.json").read_text())
    by_name = {c["candidate"]: c for c in index["candidates"]}
    assert by_name["oracle"]["status"] == "pass"
    assert by_name["oracle"]["rows_checked"] == sum(_summary(s / "oracle")["rows_checked"] for s in shards)
    assert by_name["radix4"]["status"] in ("unavailable", "pass")  # unavailable without a GPU
    assert (tmp_path / "merged" / "oracle" / "report.md").exists()


def test_the_merged_command_drops_shard_and_out_in_either_spelling_and_keeps_the_rest():
    from contracts.reports.merge import unsharded_command

    line = "python -m contracts check --candidate a --shard 1/4 --out 'my dir' --rows 900 --shard=2/4 --out=x --quiet"
    assert unsharded_command(line) == "python -m contracts check --candidate a --rows 900 --quiet"
    assert unsharded_command("check --candidate 'unclosed") == "check --candidate 'unclosed"  # not a shell line: as recorded
