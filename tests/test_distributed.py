"""torchrun on the CPU (gloo): one bundle with a one-process run's counts; a dead, raising or interrupted rank is reported.

The torchrun runs are real (``python -m torch.distributed.run --standalone``,
two ranks); the planted ``tests.planted.rank_fails`` misbehaves on one rank
only. Rows are few and the candidates run in-process (``--no-isolate``): the
split, the gather and the failure paths are the same as with workers.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

from contracts import check
from contracts.cases import iter_plan, shard
from contracts.cases.launch_points import switch_points
from contracts.cases.max_batch import default_max_batch
from contracts.reports.schema import CheckResult, ErrorRecord, FamilyCounts, Status, Summary
from contracts.run.distributed import LOST_AFTER_S
from contracts.run.world import World, WorldError
from contracts.run.rank_merge import Part, combine_checks

REPO = Path(__file__).resolve().parent.parent
FAMILIES = "all_equal,nan_dense,tie_pool_straddle,random_bf16"  # ties and NaN: torch-native's declared deviations show
ROWS, SEED = 3000, 5
torchrun = pytest.mark.slow  # each starts two ranks (seconds of start-up on a small CPU)
COUNTS = ("status", "rows_checked", "rows_skipped", "mismatched_rows", "near_tie_rows", "expected_deviation_rows", "exact_rows",
          "within_tolerance_rows", "max_weight_ulp", "clauses", "clauses_broken", "families", "expected_deviations", "cells_total",
          "cells_recorded", "notes")  # fmt: skip


def _torchrun(args, cwd, *, env=None, wait=True):
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", *args]
    environment = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **(env or {})}  # this checkout first
    proc = subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if not wait:
        return proc
    output, _ = proc.communicate(timeout=300)
    return proc.returncode, output


def _summary(folder):
    return json.loads((folder / "summary.json").read_text())


@pytest.fixture
def cwd(tmp_path, request):
    folder = tmp_path / "cwd"
    folder.mkdir()
    yield folder
    # A search's rank 0 keeps Hypothesis's cache in .hypothesis/, as a one-process search does; the other ranks use a private one.
    allowed = {".hypothesis"} if "search" in request.node.name else set()
    assert {p.name for p in folder.iterdir()} <= allowed, "a rank wrote into its working directory"


# ---------------------------------------------------------------- the split and the records, without torchrun


def test_world_comes_from_torchruns_variables():
    assert World.from_env({}) is None and World.from_env({"WORLD_SIZE": "1"}) is None
    env = {"WORLD_SIZE": "4", "RANK": "3", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "1",
           "MASTER_ADDR": "node0", "MASTER_PORT": "29500", "TORCHELASTIC_USE_AGENT_STORE": "True",
           "TORCHELASTIC_RUN_ID": "job", "TORCHELASTIC_RESTART_COUNT": "0"}  # fmt: skip
    world = World.from_env(env)
    assert (world.rank, world.world_size, world.local_rank, world.node_rank, world.agent_store) == (3, 4, 1, 1, True)
    with pytest.raises(WorldError, match="LOCAL_RANK is not set"):
        World.from_env({k: v for k, v in env.items() if k != "LOCAL_RANK"})
    with pytest.raises(WorldError, match="RANK=4 is outside WORLD_SIZE=4"):
        World.from_env({**env, "RANK": "4"})


def test_an_incomplete_torchrun_environment_is_one_line_and_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    assert check.main(["--candidate", "oracle", "--rows", "10", "--out", str(tmp_path / "b"), "--quiet"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: WORLD_SIZE=2 but LOCAL_RANK is not set")
    assert not (tmp_path / "b").exists()


@pytest.mark.parametrize("user", [None, (1, 1), (2, 3)])
def test_the_ranks_shards_partition_the_users_shard(user):
    specs = list(iter_plan(["batch_sizes", "all_equal"], 20_000, 1, 896, 16))
    world = World.from_env({"WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "x", "MASTER_PORT": "1"})
    per_rank = [list(shard(specs, *world.shard_of(r, user))) for r in range(4)]
    wanted = list(shard(specs, *user)) if user else specs
    assert sorted((s.family, s.case_seed) for part in per_rank for s in part) == sorted((s.family, s.case_seed) for s in wanted)
    assert all(per_rank)


def _result(rows, status=Status.PASS, mismatched=0, **fields):
    summary = Summary(candidate="c", status=status, contract="aiter", device="cpu", rows_checked=rows, mismatched_rows=mismatched,
                      clauses={"selection": mismatched}, families={"random_bf16": FamilyCounts(rows=rows)}, duration_s=2.0, **fields)  # fmt: skip
    return CheckResult(summary, pd.DataFrame(), [])


def test_a_lost_rank_is_an_error_naming_it_even_when_torchrun_stopped_the_others():
    lost = ErrorRecord("rank_lost", "rank 1", "rank 1 (host b, pid 7) was lost")
    combined = combine_checks([Part(0, "a", "cpu", _result(100, Status.INTERRUPTED, interrupted="SIGTERM")),
                               Part(1, "b", "cpu", missing="lost", error=lost)]).summary  # fmt: skip
    assert combined.status is Status.ERROR and combined.error.case == "rank 1" and combined.rows_checked == 100
    assert [(r["rank"], r["status"], r["rows_checked"]) for r in combined.ranks] == [(0, "interrupted", 100), (1, "error", 0)]


def test_a_rank_that_could_not_run_the_candidate_is_an_error_not_a_pass():
    unavailable = _result(0, Status.UNAVAILABLE, reason="no GPU")
    combined = combine_checks([Part(0, "a", "cpu", _result(100)), Part(1, "b", "cpu", unavailable)]).summary
    assert combined.status is Status.ERROR and combined.error.kind == "rank_unavailable" and "no GPU" in combined.error.message
    everywhere = combine_checks([Part(0, "a", "cpu", unavailable), Part(1, "b", "cpu", unavailable)]).summary
    assert everywhere.status is Status.UNAVAILABLE and everywhere.reason == "no GPU"


def test_ranks_that_planned_differently_are_an_error_not_a_sum():
    a, b = _result(100, options={"rows": 200, "bulk_rows": 65_536}), _result(100, options={"rows": 200, "bulk_rows": 16_384})
    combined = combine_checks([Part(0, "a", "cuda:0", a), Part(1, "b", "cpu", b)]).summary
    assert combined.status is Status.ERROR and combined.error.kind == "rank_plan_differs" and "bulk_rows=16384" in combined.error.message


def test_the_verdict_options_are_every_option_but_where_results_go(tmp_path):
    from contracts.commands._common import verdict_options
    from contracts.commands.check import build_parser

    def options(*extra):
        return verdict_options(build_parser().parse_args(["--candidate", "oracle", *extra]))

    assert options("--out", str(tmp_path / "a"), "--quiet") == options("--out", str(tmp_path / "b"), "--force")
    base = options()
    for extra, flag in ((["--seed", "9"], "--seed"), (["--contract", "serial"], "--contract"), (["--exact"], "--exact"),
                        (["--rows", "7"], "--rows"), (["--no-isolate"], "--isolate")):  # fmt: skip
        changed = options(*extra)
        assert [k for k in base if base[k] != changed[k]] == [flag], extra


class _Beating:  # a heartbeat whose peers are never silent
    store_gone = None

    def silent_for(self, rank):
        return 0.0


def _group_with(options_by_rank):
    """Rank 0's RankGroup over an in-memory store holding each rank's published info, as after the join."""
    import torch.distributed as dist

    from contracts.run.distributed import RankGroup
    from contracts.run.rank_store import put

    store = dist.HashStore()
    for rank, options in enumerate(options_by_rank):
        put(store, f"info/{rank}", {"host": f"h{rank}", "pid": rank, "gpu": None, "options": options})
    world = World.from_env({"WORLD_SIZE": str(len(options_by_rank)), "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "x", "MASTER_PORT": "1"})
    return RankGroup(world, store, _Beating(), stop=lambda: None, gpu=None)


def test_ranks_whose_verdict_options_differ_are_named_each_option_and_rank():
    same = {"--seed": 0, "--contract": None, "--exact": False}
    assert _group_with([same, dict(same), dict(same)]).differing_options() is None
    message = _group_with([same, dict(same), {**same, "--seed": 9, "--exact": True}]).differing_options()
    assert "--seed is 9 on rank 2 (host h2) but 0 on rank 0" in message and "--exact is True on rank 2" in message
    assert "rank 1" not in message and "nothing was checked" in message
    assert "--contract is not given on rank 1" in _group_with([same, {"--seed": 0, "--exact": False}]).differing_options()


def test_counts_sum_and_the_slowest_rank_sets_the_rate():
    combined = combine_checks([Part(0, "a", "cpu", _result(100)), Part(1, "b", "cpu", _result(300, Status.FAIL, mismatched=2))]).summary
    assert (combined.status, combined.rows_checked, combined.mismatched_rows, combined.clauses) == (Status.FAIL, 400, 2, {"selection": 2})
    assert combined.duration_s == 2.0 and combined.rows_per_s == 200.0 and combined.world_size == 2


def _load(rows, oracle, diff):
    return {"captured.L0": {"rows": rows, "oracle": oracle, "candidate_minus_oracle": diff}}


def test_the_ranks_expert_loads_add_up_to_one_histogram_per_layer():
    a = _result(100, expert_load={**_load(50, [60, 40, 0], [0, -5, 5]), "captured.L1": {"rows": 50, "oracle": [1, 2, 97], "candidate_minus_oracle": [0, 0, 0]}})
    b = _result(300, expert_load={"captured.L1": {"rows": 100, "oracle": [100, 50, 50], "candidate_minus_oracle": [3, -3, 0]},
                                  **_load(200, [100, 100, 200], [0, 0, 0])})  # fmt: skip
    load = combine_checks([Part(0, "a", "cpu", a), Part(1, "b", "cpu", b)]).summary.expert_load
    assert list(load) == ["captured.L0", "captured.L1"]  # the plan's order, whichever rank saw a layer first
    l0, l1 = load["captured.L0"], load["captured.L1"]
    assert (l0["rows"], l0["oracle"], l0["candidate_minus_oracle"]) == (250, [160, 140, 200], [0, -5, 5])
    assert (l1["rows"], l1["oracle"], l1["candidate_minus_oracle"]) == (150, [101, 52, 147], [3, -3, 0])
    # the figures a reader scans are the whole file's, not one rank's: 200 / (500 / 3), 205 / (500 / 3)
    assert (l0["oracle_max_over_mean"], l0["candidate_max_over_mean"], l0["max_abs_difference"], l0["experts_differing"]) == (1.2, 1.23, 5, 2)
    assert combine_checks([Part(0, "a", "cpu", _result(100)), Part(1, "b", "cpu", _result(300))]).summary.expert_load is None


def test_the_cells_of_captured_shards_go_back_in_the_files_order():
    from contracts.reports.merge import _cells_in_plan_order

    def cells(*cases):
        return pd.DataFrame({"case": [c for c, _ in cases], "row": [r for _, r in cases], "col": 0})

    merged = _result(0, options={"logits": {"tokens": 5000}, "rows": 0, "families": ["captured.L0"], "experts": 64, "topk": 8}).summary
    rank0 = cells(("captured.L1:0:1", 0), ("captured.L0:4096:904:bulk", 3))
    rank1 = cells(("captured.L0:2:3", 1), ("captured.L0:2:3", 0), ("captured.L1:1:2", 0))
    parts = _cells_in_plan_order([rank0, rank1], merged)  # a synthetic plan's order would be a KeyError on these families
    assert [(p["case"].iloc[0], list(p["row"])) for p in parts] == [
        ("captured.L0:2:3", [0, 1]), ("captured.L0:4096:904:bulk", [3]), ("captured.L1:0:1", [0]), ("captured.L1:1:2", [0])]


def _logits_file(path, tokens):
    """Two layers of bf16 logits over 64 experts, with a correction bias of two values (0.25 on the first 32 experts):
    many ties at the cutoff, which torch-native breaks its own declared way, so its expert load differs from the
    oracle's while it passes (no diagnosis to wait for). A bias that varies, since a file without one (or with one
    value everywhere) leaves aiter's bias unexercised: NOT COVERED (issue 55)."""
    from contracts.run.capture_file import save_trace

    return save_trace(path, logits=(torch.randn(2, tokens, 64, generator=torch.Generator().manual_seed(3)) * 2).bfloat16(),
                      bias=torch.cat([torch.full((2, 32), 0.25), torch.zeros(2, 32)], dim=1))


LOGITS_CHECK = ["--candidate", "torch-native", "--contract", "aiter", "--no-isolate", "--quiet"]


@pytest.mark.slow  # three checks and a merge, each writing a bundle (seconds on a small CPU)
def test_merged_shard_bundles_of_captured_logits_have_the_whole_files_expert_load(tmp_path):
    from contracts.reports.merge import merge_bundles

    logits = _logits_file(tmp_path / "logits.safetensors", tokens=300)
    assert check.main([*LOGITS_CHECK, "--logits", str(logits), "--out", str(tmp_path / "one")]) == 0
    for i in (1, 2):
        assert check.main([*LOGITS_CHECK, "--logits", str(logits), "--shard", f"{i}/2", "--out", str(tmp_path / f"s{i}")]) == 0
    one, shards = _summary(tmp_path / "one"), [_summary(tmp_path / f"s{i}") for i in (1, 2)]
    assert one["expected_deviation_rows"] and any(v["max_abs_difference"] for v in one["expert_load"].values())
    assert all(0 < sum(v["rows"] for v in s["expert_load"].values()) < 600 for s in shards)
    (merged,) = merge_bundles(tmp_path / "merged", [tmp_path / "s1", tmp_path / "s2"])  # the cells too (declared ties)
    assert merged.expert_load == one["expert_load"] == _summary(tmp_path / "merged")["expert_load"]
    assert {k: _summary(tmp_path / "merged")[k] for k in COUNTS} == {k: one[k] for k in COUNTS}


# ---------------------------------------------------------------- torchrun, two ranks on the CPU



def _plan(families, rows, seed=0):
    """The cases a CPU check of 896/16 runs: the budget's and every family's pinned coverage cases."""
    return list(iter_plan(list(families), rows, seed, 896, 16, max_batch=default_max_batch("cpu", switch_points()), contract="aiter"))


@torchrun
def test_two_ranks_write_one_bundle_with_the_counts_of_one_process(tmp_path, cwd):
    args = ["--candidate", "torch-native", "--contract", "aiter", "--families", FAMILIES, "--rows", str(ROWS), "--seed", str(SEED), "--quiet"]
    assert check.main([*args, "--out", str(tmp_path / "one")]) == 0
    code, output = _torchrun(["contracts.check", *args, "--out", str(tmp_path / "two")], cwd)
    assert code == 0, output
    one, two = _summary(tmp_path / "one"), _summary(tmp_path / "two")
    assert one["expected_deviation_rows"] > 0 and one["clauses"]  # torch-native's declared deviations: not all zeros
    assert {k: two[k] for k in COUNTS} == {k: one[k] for k in COUNTS}
    assert two["world_size"] == 2 and two["shard"] is None
    specs = _plan(FAMILIES.split(","), ROWS, SEED)  # as run_checks plans: the pinned cases too
    assert [(r["rank"], r["shard"], r["rows_checked"], r["status"]) for r in two["ranks"]] == [
        (rank, f"{rank + 1}/2", sum(s.rows for s in shard(specs, rank + 1, 2)), "pass") for rank in (0, 1)
    ]
    assert {r["device"] for r in two["ranks"]} == {"cpu"} and all(r["duration_s"] > 0 for r in two["ranks"])

    def cells(name):
        frame = pd.read_csv(tmp_path / name / "mismatches.csv")
        return frame.sort_values(list(frame.columns)).reset_index(drop=True)

    pd.testing.assert_frame_equal(cells("two"), cells("one"))  # the cell policy of one run, over both ranks' cells
    assert one["cells_recorded"] < one["cells_total"]  # a sample was taken: the policy had a choice to make
    assert set(two["stages"]) >= {"wall"} and all("stages" in r for r in two["ranks"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "one", "two"]  # rank 1 wrote nothing anywhere
    assert output.count("bundle: ") == 1  # and printed nothing
    assert "## Ranks (2 under torchrun" in (tmp_path / "two" / "report.md").read_text()


@torchrun
def test_two_ranks_on_captured_logits_report_one_expert_load_for_the_whole_file(tmp_path, cwd):
    args = [*LOGITS_CHECK, "--logits", str(_logits_file(tmp_path / "logits.safetensors", tokens=600))]
    assert check.main([*args, "--out", str(tmp_path / "one")]) == 0
    code, output = _torchrun(["contracts.check", *args, "--out", str(tmp_path / "two")], cwd)
    assert code == 0, output
    one, two = _summary(tmp_path / "one"), _summary(tmp_path / "two")
    # the file's rows, and the first layer's again in every call context (contracts.cases.captured)
    assert all(r["rows_checked"] for r in two["ranks"]) and two["rows_checked"] == one["rows_checked"] > 2 * 600
    assert list(two["expert_load"]) == ["captured.L0", "captured.L1"] and two["expert_load"] == one["expert_load"]
    for load in two["expert_load"].values():  # every token of the layer, k = 16 experts each, on both sides
        assert load["rows"] == 600 and sum(load["oracle"]) == 600 * 16 and sum(load["candidate_minus_oracle"]) == 0
    assert any(load["max_abs_difference"] for load in two["expert_load"].values())  # ties broken torch's way: a difference
    # The notes as a set: no rank's own cells were capped, so the whole's cells note has no rank's place to take.
    same = [k for k in COUNTS if k != "notes"]
    assert {k: two[k] for k in same} == {k: one[k] for k in same} and sorted(two["notes"]) == sorted(one["notes"])
    assert "## Expert load (captured logits)" in (tmp_path / "two" / "report.md").read_text()


@torchrun
@pytest.mark.parametrize("mode, kind", [("kill", "rank_lost"), ("import", "rank_exception")])
def test_a_rank_that_dies_or_raises_is_an_error_in_rank_0s_bundle_and_rank_0s_rows_are_kept(tmp_path, cwd, mode, kind):
    out = tmp_path / "bundle"
    started = time.monotonic()
    code, output = _torchrun(
        ["contracts.check", "--candidate", "tests.planted.rank_fails:route", "--no-isolate", "--families", "random_bf16",
         "--rows", "3000", "--out", str(out), "--quiet"],
        cwd, env={"PLANTED_FAIL_RANK": "1", "PLANTED_FAIL_MODE": mode, "PLANTED_MARKER": str(tmp_path / "called")},
    )  # fmt: skip
    assert code != 0, output  # torchrun reports the failed rank itself
    s = _summary(out)
    assert s["status"] == "error" and s["error"]["kind"] == kind and s["error"]["case"] == "rank 1", s["error"]
    assert "rank 1 (host " in s["error"]["message"] and "its share of the cases is not in these counts" in s["error"]["message"]
    rank0, rank1 = s["ranks"]
    assert rank0["rows_checked"] == s["rows_checked"] > 0 and rank1["rows_checked"] == 0 and rank1["status"] == "error"
    if mode == "kill":  # torchrun SIGTERMs rank 0 when rank 1 dies (mid-case, or once rank 0 is done and waiting): the bundle is still written
        assert rank0["status"] in ("interrupted", "pass") and time.monotonic() - started < 30 + LOST_AFTER_S + 30
    else:  # rank 1 raised and waited: rank 0 checked all of its share
        share = sum(c.rows for c in shard(_plan(["random_bf16"], 3000), 1, 2))  # rank 0's cases, the pinned ones included
        assert rank0["status"] == "pass" and rank0["rows_checked"] == share
        assert "planted: this module does not import on rank 1" in s["error"]["traceback"]
    assert "First error (" + kind in (out / "report.md").read_text()


@torchrun
def test_interrupting_rank_0_leaves_an_interrupted_bundle_with_both_ranks_rows(tmp_path, cwd):
    out, marker = tmp_path / "bundle", tmp_path / "called"
    proc = _torchrun(
        ["contracts.check", "--candidate", "tests.planted.rank_fails:route", "--no-isolate", "--families", "random_fp32",
         "--rows", "10000000", "--out", str(out), "--quiet"],
        cwd, env={"PLANTED_MARKER": str(marker)}, wait=False,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (Path(f"{marker}.0").exists() and Path(f"{marker}.1").exists()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.1)
    os.kill(int(Path(f"{marker}.0").read_text()), signal.SIGINT)
    output, _ = proc.communicate(timeout=120)
    s = _summary(out)
    assert s["status"] == "interrupted" and s["interrupted"] == "SIGINT", output
    assert [(r["rank"], r["status"]) for r in s["ranks"]] == [(0, "interrupted"), (1, "interrupted")]
    assert s["ranks"][1]["reason"] == "SIGINT on rank 0"
    assert s["rows_checked"] == sum(r["rows_checked"] for r in s["ranks"]) and s["rows_checked"] < 10_000_000
    assert (out / "report.md").read_text().startswith("# INTERRUPTED")


@torchrun
def test_ranks_started_with_a_different_seed_contract_or_exact_stop_with_one_error_and_no_bundle(tmp_path, cwd):
    out = tmp_path / "bundle"
    code, output = _torchrun(
        ["tests.planted.rank_argv", "check", "--candidate", "oracle", "--against", "oracle", "--families", "random_bf16",
         "--rows", "300", "--no-isolate", "--out", str(out), "--quiet"],
        cwd, env={"PLANTED_ARGV_RANK": "1", "PLANTED_ARGV": "--seed 9 --contract serial --exact"},
    )  # fmt: skip
    assert code != 0, output
    errors = [line for line in output.splitlines() if "error:" in line and "Traceback" not in line]
    assert len(errors) == 1 and "the torchrun ranks were started with different options" in errors[0], output
    for named in ("--seed is 9 on rank 1", "--contract is 'serial' on rank 1", "--exact is True on rank 1"):
        assert named in errors[0], errors[0]
    # torchrun prints its own traceback (ChildFailedError) for a rank that exits non-zero; none may come from ours.
    assert not re.search(r'File "[^"]*/(contracts|oracle|kernels)/', output), output
    assert not out.exists()  # nothing was merged, nothing was written


@torchrun
def test_a_nightly_under_torchrun_writes_one_nightly_bundle(tmp_path, cwd):
    code, output = _torchrun(["contracts", "nightly", "--candidates", "oracle", "--rows", "400", "--no-probe", "--out", str(tmp_path / "n")], cwd)
    assert code == 0, output
    (bundle,) = (tmp_path / "n").iterdir()  # rank 1 made no folder of its own
    envelope = json.loads((bundle / "nightly.json").read_text())
    assert envelope["options"]["world_size"] == 2 and envelope["candidates"]["oracle"]["status"] == "pass"
    s = _summary(bundle / "candidates" / "oracle")
    planned = sum(c.rows for c in _plan(s["options"]["families"], 400))  # the 400 rows of the budget and the pinned cases
    assert planned > 400 and s["rows_checked"] == planned and s["world_size"] == 2 and sum(r["rows_checked"] for r in s["ranks"]) == planned


@torchrun
def test_a_search_under_torchrun_splits_the_examples_and_writes_one_bundle(tmp_path, cwd):
    out = tmp_path / "search"
    code, output = _torchrun(["contracts", "search", "--candidate", "tests.broken_candidates:wrong_tie_order", "--examples", "6",
                              "--no-database", "--out", str(out)], cwd)  # fmt: skip
    assert code != 0, output  # a failure was found: exit 1
    doc = json.loads((out / "search.json").read_text())
    assert doc["status"] == "fail" and "tie_order" in doc["clauses"] and (out / "minimal.pt").exists()
    assert doc["world_size"] == 2 and [r["status"] for r in doc["ranks"]] == ["fail", "fail"]
    assert doc["examples_run"] == sum(r["examples_run"] for r in doc["ranks"])
