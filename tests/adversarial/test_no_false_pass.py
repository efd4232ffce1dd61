"""The standing adversary corpus of issue 32: routers that must never earn a PASS or an exit 0.

Each class is a router in ``tests/adversarial/evidence.py`` that is right
wherever the old harness looked; each test here failed on e67c3a4 (PASS and
exit 0) and must keep failing loudly: FAIL, ERROR or NOT COVERED, non-zero.
"""

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from contracts.cases.batch_sizes import sweep_sizes
from contracts.cases.coverage import coverage_of
from contracts.cases.families import FAMILIES
from contracts.cases.pins import CALL_CONTEXTS, GRAD_MODES
from contracts.cases.plan import iter_plan
from contracts.run.checks import run_checks
from contracts.run.options import parse_replay
from tests.adversarial import call_contexts as call_contexts_module
from tests.adversarial import evidence
from tests.planted._common import correct

ROOT = Path(__file__).resolve().parents[2]
ADV = "tests.adversarial.evidence"


def _cli(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "contracts", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode, done.stdout + done.stderr


# ---------------------------------------------------------------- PASS needs evidence


@pytest.mark.slow  # two checks as commands in subprocesses, each with a worker: ~12 s
def test_a_check_of_zero_rows_is_not_covered_and_exits_5(tmp_path):
    code, out = _cli("check", "--candidate", f"{ADV}:serves_nothing", "--families", "random_fp32,strided", "--rows", "40",
                     "--max-batch", "2", "--out", str(tmp_path / "a"), "--quiet")  # fmt: skip
    assert code == 5, out
    assert "NOT COVERED" in out and "0 rows checked of families random_fp32, strided" in out, out
    code, out = _cli("check", "--candidate", f"{ADV}:serves_nothing", "--families", "random_fp32", "--rows", "40", "--max-batch", "2",
                     "--allow-not-covered", "--out", str(tmp_path / "b"), "--quiet")  # fmt: skip
    assert code == 0 and "NOT COVERED" in out, out  # accepted on request; the status still says it


def test_a_family_with_no_row_checked_is_not_covered(tmp_path):
    run = run_checks([f"{ADV}:serves_only_fp32"], families=["random_fp32", "random_bf16"], rows=60, max_batch=2, isolate=False,
                     out=tmp_path / "c", progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "not_covered" and s.rows_checked > 0, s
    assert s.families["random_bf16"].rows == 0 and s.families["random_fp32"].rows > 0
    assert "random_bf16" in s.reason and "random_fp32" not in s.reason.split(";")[0]
    assert run.not_covered and not run.failed


# ---------------------------------------------------------------- coverage by construction


@pytest.mark.parametrize("rows", [1, 300, 2_000, 9_999, 250_000])
def test_every_batch_class_dtype_pair_and_layout_runs_at_every_rows(rows):
    names = list(FAMILIES)[:2] + ["strided", "batch_sizes"]
    specs = list(iter_plan(names, rows, 0, 896, 16, max_batch=16_385, points=(3000,)))
    sizes = {s.rows for s in specs}
    for low, high in [(1, 1), (2, 2), (1025, 2048), (2049, 3072), (16_385, 16_385)]:
        assert any(low <= n <= high for n in sizes), (low, high, sorted(sizes))
    assert {2999, 3000} <= sizes  # each side of a published switch point
    covered = coverage_of(specs)
    assert {"bf16/bf16", "bf16/fp32", "fp32/fp32", "fp32/bf16"} <= set(covered["dtype_pairs"])
    assert "strided at offset 0" in covered["layouts"]


def test_the_sweep_reaches_max_batch_and_reads_switch_points():
    assert sweep_sizes(65_536)[-1] == 65_536 and 32_769 in sweep_sizes(65_536)
    assert {4096, 4097} <= set(sweep_sizes(16_385, (4097,)))


@pytest.mark.usefixtures("default_sweep")
def test_check_plan_prints_what_a_run_covers_without_running():
    code, out = _cli("check", "--candidate", f"{ADV}:calls_os_exit", "--plan", "--rows", "100")
    assert code == 0, out
    assert "16,385" in out and "fp32/bf16" in out and "strided at offset 0" in out, out
    assert "from ROUTER_CONTRACTS_MAX_BATCH" not in out, out


@pytest.mark.slow  # three commands in subprocesses: ~9 s
def test_the_environment_sets_the_default_sweep_and_says_so(monkeypatch):
    from contracts.cases.max_batch import MAX_BATCH_ENV

    monkeypatch.setenv(MAX_BATCH_ENV, "513")
    code, out = _cli("check", "--candidate", f"{ADV}:calls_os_exit", "--plan", "--rows", "100")
    assert code == 0 and "max batch 513, from ROUTER_CONTRACTS_MAX_BATCH" in out and "1,025" not in out, out
    code, out = _cli("check", "--candidate", f"{ADV}:calls_os_exit", "--plan", "--rows", "100", "--max-batch", "2")
    assert code == 0 and "max batch 2;" in out, out  # an explicit --max-batch wins
    monkeypatch.setenv(MAX_BATCH_ENV, "lots")
    code, out = _cli("check", "--candidate", "serial", "--rows", "10", "--quiet")
    assert code == 2 and "ROUTER_CONTRACTS_MAX_BATCH='lots' is not a batch size" in out and "Traceback" not in out, out


@pytest.mark.slow  # routes the pinned sweep (about 33,000 rows, one case of 16,385) once per router: about 10 s each
@pytest.mark.usefixtures("default_sweep")
@pytest.mark.parametrize("router", ["wrong_from_2049_rows", "wrong_above_16384_rows", "wrong_in_1025_to_2048_rows",
                                    "wrong_on_fp32_logits_bf16_bias", "wrong_on_strided_offset_0"])  # fmt: skip
def test_a_router_wrong_only_where_the_old_plan_never_looked_fails(router, tmp_path):
    run = run_checks([f"{ADV}:{router}"], families=["random_fp32", "strided", "batch_sizes"], rows=200, isolate=False,
                     out=tmp_path / router, progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s
    assert s.clauses_broken.get("output_order") or s.clauses.get("output_order"), s.clauses


@pytest.mark.slow  # a check per dtype pair at the default sweep (6-21 s each)
@pytest.mark.parametrize("router", ["wrong_on_fp16_logits", "wrong_on_fp16_bias", "reads_fp16_logits_as_bf16",
                                    "reads_a_misaligned_bias_from_below", "reads_a_misaligned_bf16_bias_from_below",
                                    "reads_misaligned_contiguous_logits_from_below"])  # fmt: skip
def test_a_router_wrong_only_on_a_dtype_pair_or_bias_layout_no_family_makes_fails(router, tmp_path):
    # Every (logits, bias) pair of bf16 / fp16 / fp32 is made by the pinned cases (no family draws fp16), and a bias
    # that does not start where an allocation would.
    run = run_checks([f"{ADV}:{router}"], families=["random_bf16", "random_fp32"], rows=200, isolate=False,
                     out=tmp_path / router, progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s


# Each names the batch the plan must reach: 1,025 is the suite's sweep; the dense launches start at 1,585.
@pytest.mark.slow  # a check per launch class at the default sweep (4-14 s each)
@pytest.mark.parametrize("router, max_batch", [("wrong_on_fp16_logits_in_block_launches", 1025),
                                               ("wrong_on_fp16_logits_in_block_launches_of_2_rows_or_more", 1025),
                                               ("wrong_on_strided_offset_0_in_one_row_calls", 1025),
                                               ("wrong_on_fp16_bias_from_1585_rows", 1585),
                                               ("reads_a_misaligned_bias_from_below_from_1585_rows", 1585)])  # fmt: skip
def test_a_router_wrong_on_a_pinned_dtype_or_layout_in_one_launch_class_fails(router, max_batch, tmp_path):
    # The pinned dtype pairs and layouts run at one batch of every launch class radix4 has at the shape (896/16 under
    # aiter: 1, 7 and 1,585 rows), at 2 (one row is often a decode path of its own) and at 64: a kernel whose loader
    # for a pair is wrong in one launch shape only.
    run = run_checks([f"{ADV}:{router}"], families=["random_bf16", "random_fp32", "strided"], rows=200, max_batch=max_batch,
                     isolate=False, out=tmp_path / router, progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s


@pytest.mark.parametrize("router, family, max_batch", [("wrong_on_tied_rows_in_block_launches_of_2_rows_or_more", "tie_pool_straddle", 1025),
                                                       ("wrong_on_infinite_logits_in_block_launches_of_2_rows_or_more", "inf_logits", 1025),
                                                       ("wrong_on_nan_rows_in_dense_launches", "nan_sparse", 1585)])  # fmt: skip
def test_a_router_wrong_on_a_familys_rows_in_one_launch_class_fails(router, family, max_batch, tmp_path):
    # Each family's own rows run in every launch class, at every --rows: each passed the default check at --rows 20000
    # on 3221a05 (its sizes never met the class).
    run = run_checks([f"{ADV}:{router}"], families=[family], rows=50, max_batch=max_batch, isolate=False, out=tmp_path / router,
                     progress=False)  # fmt: skip
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s
    assert details and all(d.case.startswith(f"{family}:") for d in details), {d.case for d in details}


@pytest.mark.parametrize("router", ["wrong_on_a_tail_of_3_rows_in_8_row_tiles_in_dense_launches",
                                    "wrong_on_a_tail_of_13_rows_in_16_row_tiles_in_dense_launches"])  # fmt: skip
def test_a_router_wrong_on_one_tail_of_a_row_tile_fails(router, tmp_path):
    # Both passed the default check at --rows 20000 on 3221a05 (no batch of 1,585 rows or more was 3 mod 8 or 13 mod 16).
    run = run_checks([f"{ADV}:{router}"], families=["batch_sizes"], rows=20, max_batch=1600, isolate=False, out=tmp_path / router,
                     progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1 and set(s.clauses_broken) == {"output_order"}, s


def test_every_remainder_of_a_16_row_tile_runs_in_every_launch_class():
    from contracts.cases.batch_sizes import ROW_TILE
    from contracts.cases.launch_points import launch_points

    points = launch_points(896, 16, "aiter")
    sizes = {s.rows for s in iter_plan(["batch_sizes"], 1, 0, 896, 16, max_batch=16_385, contract="aiter")}
    starts = [2, *points]
    for start, end in zip(starts, [*starts[1:], 16_386]):
        inside = {n for n in sizes if start <= n < end}
        for tile in (t for t in (2, 4, 8, ROW_TILE) if t <= end - start):  # the block class, 2..6 rows, holds 5 sizes
            assert {n % tile for n in inside} == set(range(tile)), (start, tile, sorted(inside)[:40])


@pytest.mark.parametrize("family", ["nan_sparse", "inf_logits"])
def test_a_router_wrong_only_with_a_zero_bias_fails(family, tmp_path):
    # The only all-zero biases were all_zero's (all-zero logits): it passed the default check at --rows 20000 on 3221a05.
    router = "wrong_on_nan_or_infinite_rows_with_a_zero_bias"
    run = run_checks([f"{ADV}:{router}"], families=[family], rows=50, isolate=False, out=tmp_path / router, progress=False)
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s
    assert details and all(d.case.split(":")[3:] == ["zero_bias"] for d in details), {d.case for d in details}
    assert parse_replay(details[0].case, 896, 16).zero_bias


@pytest.mark.parametrize("rows", [1, 2_000, 250_000])
def test_every_familys_rows_run_in_every_launch_class_at_every_rows(rows):
    from contracts.cases.batch_sizes import launch_class_sizes
    from contracts.cases.launch_points import launch_points
    from contracts.cases.pins import FAMILY_DATA_PINNED_ELSEWHERE, ZERO_BIAS_FAMILIES

    classes = set(launch_class_sizes(4096, launch_points(896, 16, "aiter")))
    assert {1, 2, 7, 64, 1585} <= classes, classes
    names = list(FAMILIES)
    sizes: dict = {}
    for spec in iter_plan(names, rows, 0, 896, 16, max_batch=4096, contract="aiter"):
        if not spec.tags:
            sizes.setdefault(spec.family, set()).add(spec.rows)
    zero: dict = {}
    for spec in iter_plan(names, rows, 0, 896, 16, max_batch=4096, contract="aiter"):
        if spec.zero_bias:
            zero.setdefault(spec.family, set()).add(spec.rows)
    for name in names:
        if name not in FAMILY_DATA_PINNED_ELSEWHERE:
            assert classes <= sizes.get(name, set()), (name, sorted(sizes.get(name, ())))
        if name in ZERO_BIAS_FAMILIES:
            assert zero.get(name) == classes, (name, zero.get(name))


def test_the_pinned_pairs_and_layouts_run_in_every_launch_class_of_the_contract():
    from kernels.radix4 import BATCH_SWITCH_POINTS, MODEL_BATCH_SWITCH_POINTS

    for contract, (experts, topk), points in [("aiter", (896, 16), BATCH_SWITCH_POINTS[(896, 16)]),
                                              ("kimi-k2", (384, 8), (MODEL_BATCH_SWITCH_POINTS[(384, 8)],))]:  # fmt: skip
        specs = iter_plan(["random_bf16", "random_fp32", "strided"], 200, 0, experts, topk, max_batch=4096, contract=contract)
        pinned = coverage_of(specs)["pinned_batch_sizes"]
        # 9 dtype pairs' pins, the misaligned and the aligned-offset bias of each dtype, contiguous logits at an offset
        # and at an aligned offset (bf16, fp32, fp16), the 8 call contexts (random_fp32),
        # strided at offset 0, logits of column stride 2 and transposed (bf16, fp32), a bias of stride 2
        # and an all-zero bias (random_bf16, strided); the other call contexts with fp32 logits, and every one with fp16
        # (random_fp32) and bf16 logits (random_bf16; never under autocast to fp16)
        contexts = len(CALL_CONTEXTS)
        fp16_autocast = sum(c.get("autocast") == "fp16" for c in CALL_CONTEXTS)
        assert len(pinned) == 9 + 3 + 3 + 3 + 3 + 8 + 1 + 2 + 2 + 1 + 2 + (contexts - 8) + 2 * contexts - fp16_autocast, pinned
        every = sorted({1, 2, 64, *points})
        assert all(rows == (every[1:] if tag.endswith(":transposed") else every) for tag, rows in pinned.items()), (contract, pinned)
    # a model contract's point is not aiter's: 896/16 switches at 768 under kimi-k2 only
    assert 768 not in coverage_of(iter_plan(["random_fp32"], 10, 0, 896, 16, max_batch=4096, contract="aiter"))["batch_sizes"]
    assert 768 in coverage_of(iter_plan(["random_fp32"], 10, 0, 896, 16, max_batch=4096, contract="kimi-k2"))["batch_sizes"]


@pytest.mark.parametrize("router", ["raises_on_an_empty_batch", "one_row_for_an_empty_batch", "int64_ids_for_an_empty_batch"])
def test_a_router_wrong_only_on_an_empty_batch_is_an_error(router, tmp_path):
    run = run_checks([f"{ADV}:{router}"], families=["batch_sizes"], rows=20, max_batch=2, isolate=False, out=tmp_path / router,
                     progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "error" and s.mismatched_rows == 0 and s.rows_checked > 0, s
    assert "batch_sizes:" in s.error.case and s.error.case.split(":")[2] == "0", s.error  # its replay id: 0 rows
    if router != "raises_on_an_empty_batch":
        assert s.error.kind == "empty_batch" and "on an empty batch (0 rows)" in s.error.message, s.error


def test_a_correct_router_answers_the_empty_batch_and_passes(tmp_path):
    from oracle import route

    specs = [s for s in iter_plan(["batch_sizes"], 10, 0, 896, 16, max_batch=2)]
    assert specs[0].rows == 0 or any(s.rows == 0 for s in specs)
    run = run_checks(["oracle", "serial"], families=["batch_sizes"], rows=20, max_batch=2, isolate=False, out=tmp_path / "ok",
                     progress=False)  # fmt: skip
    assert [s.status.value for s in run.summaries] == ["pass", "pass"], [s.error for s in run.summaries]
    weights, ids = route(torch.zeros(0, 896), torch.zeros(896), 16)
    assert tuple(weights.shape) == tuple(ids.shape) == (0, 16)


@pytest.mark.parametrize("router, max_batch", [("wrong_unnormalized_unscaled_in_block_launches", 1025),
                                               ("wrong_renormalized_scaled_2827_in_the_first_warp_launches", 1025),
                                               ("wrong_unnormalized_scaled_in_dense_launches", 1585)])  # fmt: skip
def test_a_router_wrong_with_one_pair_of_call_options_in_one_launch_class_fails(router, max_batch, tmp_path):
    # batch_sizes pins every pair of call options the contract admits (renormalize on/off, scaling 1.0 / 2.5 / 2.827)
    # in every launch class; drawn per case, the last two met their pair in no case of this plan before.
    run = run_checks([f"{ADV}:{router}"], families=["batch_sizes"], rows=200, max_batch=max_batch, isolate=False,
                     out=tmp_path / router, progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s


@pytest.mark.parametrize("router", ["ignores_a_scaling_factor_below_1", "clamps_the_scaling_factor_at_8"])
def test_a_router_wrong_only_for_a_scaling_factor_no_case_draws_fails(router, tmp_path):
    # Cases draw routed_scaling_factor 1.0, 2.5 or 2.827; both PASSed the default check (207,078 rows, exit 0) before
    # batch_sizes pinned 0.375 and 16.0 with every renormalize option in every launch class.
    run = run_checks([f"{ADV}:{router}"], families=["batch_sizes"], rows=100, max_batch=64, isolate=False,
                     out=tmp_path / router, progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and set(s.clauses_broken) == {"scaling"}, (s.status, s.clauses_broken)


def test_the_pinned_call_options_are_only_those_the_contract_admits():
    import oracle

    for name in ("aiter", "qwen3-moe", "mixtral"):
        c = oracle.get_contract(name)
        admitted = c.admitted_options()
        specs = [s for s in iter_plan(["batch_sizes"], 10, 0, c.experts, c.topk, max_batch=64, contract=name, admitted=admitted)
                 if s.renormalize is not None]  # fmt: skip
        pairs = {(s.renormalize, s.scaling) for s in specs}
        # a contract that admits any factor: the three a case draws and the two pinned only (below 1, and 16)
        factors = admitted["routed_scaling_factor"] or (1.0, 2.5, 2.827, 0.375, 16.0)
        wanted = {(r, f) for r in admitted["renormalize"] for f in factors}
        assert pairs == (wanted if len(wanted) > 1 else set()), (name, pairs)
        from contracts.cases.batch_sizes import launch_class_sizes
        from contracts.cases.launch_points import launch_points

        classes = set(launch_class_sizes(64, launch_points(c.experts, c.topk, name)))  # aiter at 896/16: 1, 2, 7, 64
        assert {s.rows for s in specs} == (classes if pairs else set()) and all(
            sum((s.rows, s.renormalize, s.scaling) == (n, r, f) for s in specs) == 1 for n in classes for r, f in pairs)


@pytest.mark.slow  # two checks at the default sweep (5-8 s each)
@pytest.mark.parametrize("isolate", [False, True])
def test_a_user_kernel_that_publishes_its_switch_points_gets_its_launch_classes_pinned(isolate, tmp_path):
    # tests/standins/published_points.py: BATCH_SWITCH_POINTS = (100,), wrong on fp16 logits from 100 rows only.
    # The plan read only the known kernel packages' points: its fp16 pins ran at 1, 2, 61 and 64 rows, and it passed.
    run = run_checks(["tests.standins.published_points:route"], families=["random_fp32"], rows=100, isolate=isolate,
                     out=tmp_path / "p", progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s
    assert s.options["candidate_switch_points"] == [100]
    assert 100 in s.options["coverage"]["pinned_batch_sizes"]["random_fp32:logits-fp16:bias-fp32"]


def test_the_plan_makes_all_nine_dtype_pairs():
    specs = iter_plan(["random_bf16", "random_fp32"], 200, 0, 896, 16, max_batch=1025)
    pairs = set(coverage_of(specs)["dtype_pairs"])
    assert pairs == {f"{logits}/{bias}" for logits in ("bf16", "fp16", "fp32") for bias in ("bf16", "fp16", "fp32")}


# ---------------------------------------------------------------- logits and bias layouts with a stride other than 1

_LAYOUT_FAMILIES = ["random_bf16", "random_fp32"]  # the families whose pinned cases make them


@pytest.mark.parametrize("router, tag", [("ignores_the_logits_column_stride", "column_stride-2"),
                                         ("reads_dense_logits_as_row_major", "transposed"),
                                         ("reads_the_bias_at_stride_1", "bias_stride-2")])  # fmt: skip
def test_a_router_wrong_only_on_a_column_strided_transposed_or_strided_bias_layout_fails(router, tag, tmp_path):
    # No case had logits of column stride != 1 or a bias of stride != 1: each passed on 280751f (the default check,
    # every family, exit 0).
    run = run_checks([f"{ADV}:{router}"], families=_LAYOUT_FAMILIES, rows=200, isolate=False, out=tmp_path / router, progress=False)
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and s.mismatched_rows >= 1 and s.rows_skipped == 0, s
    assert s.clauses_broken.get("selection"), s.clauses_broken  # other experts chosen: the clause of wrong ids
    assert details and all(d.case.split(":")[3:] == [tag] for d in details), {d.case for d in details}
    assert f"--replay {details[0].case}" in details[0].replay  # the replay line names the layout, and rebuilds it


@pytest.mark.slow  # a check in a worker process (4 s)
def test_a_router_wrong_only_on_transposed_logits_fails_in_a_worker(tmp_path):
    # The worker rebuilds each case from its spec: the layout must travel with it.
    run = run_checks([f"{ADV}:reads_dense_logits_as_row_major"], families=["random_fp32"], rows=50, out=tmp_path / "w",
                     progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.isolated and s.status.value == "fail" and s.mismatched_rows >= 1, s


def test_correct_routers_pass_on_every_layout(tmp_path):
    run = run_checks(["tests.broken_candidates:correct_argsort", "oracle"], families=_LAYOUT_FAMILIES, rows=200, isolate=False,
                     out=tmp_path / "ok", progress=False)  # fmt: skip
    for s in run.summaries:
        assert s.status.value == "pass" and s.rows_skipped == 0, (s.candidate, s.status, s.error)
        layouts = set(s.options["coverage"]["layouts"])
        assert {"logits at column stride 2", "transposed logits", "bias at stride 2", "contiguous logits at an aligned offset",
                "bias at an aligned offset"} <= layouts, layouts
        assert any(":grad-inference" in tag for tag in s.options["coverage"]["pinned_batch_sizes"])  # every call context ran


@pytest.mark.slow  # two checks, isolated and not (3-5 s each)
@pytest.mark.parametrize("isolate", [False, True])
def test_a_gate_that_declines_column_strides_skips_them_and_counts_them(isolate, tmp_path):
    # Its route raises on logits of column stride != 1, as our kernels' do; its gate says so: never an error.
    run = run_checks([f"{ADV}:declines_logits_column_strides"], families=["random_fp32"], rows=50, isolate=isolate,
                     out=tmp_path / "d", progress=False)  # fmt: skip
    s = run.summaries[0]
    pinned = s.options["coverage"]["pinned_batch_sizes"]
    declined = sum(sum(pinned[f"random_fp32:{tag}"]) for tag in ("column_stride-2", "transposed"))
    assert s.status.value == "pass" and s.rows_checked > 0, (s.status, s.error)
    assert s.rows_skipped == declined == s.families["random_fp32"].rows_skipped, (s.rows_skipped, declined)
    assert s.families["random_fp32"].skip_reasons == {"not covered: logits of column stride 1 only": declined}


def test_a_gate_that_does_not_take_the_layouts_is_checked_on_them(tmp_path):
    run = run_checks([f"{ADV}:undeclared_column_strides"], families=["random_fp32"], rows=50, isolate=False, out=tmp_path / "u",
                     progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1 and s.rows_skipped == 0, s


# ---------------------------------------------------------------- the autograd context, aligned offsets, the answer's layout

CTX = "tests.adversarial.call_contexts"


@pytest.mark.slow  # a check per call context at the default sweep (6-10 s each)
@pytest.mark.parametrize("router, tags", [("wrong_under_inference_mode", {"grad-inference"}), ("wrong_under_no_grad", {"grad-off"}),
                                          ("wrong_when_the_bias_is_a_parameter", {"bias_parameter-frozen", "bias_parameter-trainable"}),
                                          ("wrong_when_the_bias_requires_grad", {"bias_parameter-trainable"}),
                                          ("wrong_when_the_logits_require_grad", {"logits_grad"}), ("wrong_under_autocast", {"autocast"}),
                                          ("wrong_under_a_bf16_default_dtype", {"default_dtype-bf16"}),
                                          ("wrong_under_fp16_autocast", {"autocast-fp16"}),
                                          ("wrong_under_fp16_autocast_in_inference_mode", {"autocast-fp16"}),
                                          ("wrong_under_deterministic_algorithms", {"deterministic"}),
                                          ("wrong_under_deterministic_algorithms_without_grad", {"deterministic"})])  # fmt: skip
def test_a_router_wrong_only_in_one_autograd_context_fails(router, tags, tmp_path):
    # Every case was called with grad enabled and a plain bias tensor: each of the first four passed the default check
    # on 3221a05; the logits never required grad, no call ran under autocast or a bf16 default dtype: the next three
    # passed on 75b5150; every autocast was bf16 and deterministic algorithms were never on: the last four passed on
    # 7834d12.
    run = run_checks([f"{CTX}:{router}"], families=["random_fp32"], rows=100, isolate=False, out=tmp_path / router, progress=False)
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s
    assert set(s.clauses_broken) == {"output_order"}, s.clauses_broken
    assert details and all(tags & set(d.case.split(":")[3:]) for d in details), {d.case for d in details}
    spec = parse_replay(details[0].case, 896, 16)  # the replay line rebuilds the context
    assert spec.replay_id == details[0].case and (spec.grad_mode or spec.bias_parameter)


def test_weights_made_in_the_default_dtype_fail_validity_under_a_bf16_default(tmp_path):
    # torch.empty(M, k) with no dtype: fp32 in every case before, so the router passed on 75b5150.
    run = run_checks([f"{CTX}:weights_in_the_default_dtype"], families=["random_bf16"], rows=20, isolate=False, out=tmp_path / "d",
                     progress=False)  # fmt: skip
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and set(s.clauses_broken) == {"validity"}, (s.status, s.clauses_broken)
    assert details and all("default_dtype-bf16" in d.case.split(":") for d in details), {d.case for d in details}
    assert torch.get_default_dtype() == torch.float32  # restored after every call


@pytest.mark.slow  # a check per context and dtype (3-5 s each)
@pytest.mark.parametrize("router, family, tags", [
    ("wrong_under_inference_mode_on_bf16_logits", "random_bf16", {"grad-inference"}),
    ("wrong_under_no_grad_on_fp16_logits", "random_fp32", {"grad-off", "logits-fp16"}),
    # (under autocast to bf16 or to fp16: the router looks only at whether autocast is on)
    ("wrong_when_bf16_logits_require_grad_under_autocast", "random_bf16", {"logits_grad", "bias_parameter-trainable"})])  # fmt: skip
def test_a_router_wrong_only_in_a_context_on_one_logits_dtype_fails(router, family, tags, tmp_path):
    # The call contexts were pinned with fp32 logits only, and one at a time: each passed the default check on 75b5150.
    run = run_checks([f"{CTX}:{router}"], families=[family], rows=20, isolate=False, out=tmp_path / router, progress=False)
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and set(s.clauses_broken) == {"output_order"}, (s.status, s.clauses_broken)
    assert details and all(tags <= set(d.case.split(":")[3:]) for d in details), {d.case for d in details}
    if "autocast" in router:
        assert all({"autocast", "autocast-fp16"} & set(d.case.split(":")[3:]) for d in details), {d.case for d in details}


@pytest.mark.slow  # a check in a worker process (4-6 s)
def test_a_router_wrong_only_under_inference_mode_fails_in_a_worker(tmp_path):
    # The worker rebuilds each case from its spec and calls it: the context must travel with it.
    run = run_checks([f"{CTX}:wrong_under_inference_mode"], families=["random_fp32"], rows=50, out=tmp_path / "w", progress=False)
    s = run.summaries[0]
    assert s.isolated and s.status.value == "fail" and s.mismatched_rows >= 1, s


def test_every_call_context_is_pinned_in_every_launch_class_and_called_so():
    from contracts.candidates.fenced_call import CallInputs
    from contracts.cases import build_case

    def context(c) -> tuple:
        return (c.get("grad_mode"), c.get("bias_parameter"), c.get("logits_grad", False), c.get("autocast"), c.get("default_dtype"),
                c.get("deterministic", False))  # fmt: skip

    # grad mode x bias as a tensor or a frozen or trainable Parameter x logits requiring grad (grad on only) x autocast,
    # but the default: every conjunction, so a path chosen by any function of them is met; a bf16 default dtype and
    # autocast to fp16 in each grad mode and in a training step; deterministic algorithms in each grad mode
    assert len(CALL_CONTEXTS) == 3 * 2 * 2 + 2 * 3 * 2 - 1 + (3 + 1) * 2 + 3 == len({context(c) for c in CALL_CONTEXTS})
    assert {c.get("default_dtype") for c in CALL_CONTEXTS} == {None, "bf16"}
    assert {c.get("autocast") for c in CALL_CONTEXTS} == {None, "bf16", "fp16"}
    assert {c.get("grad_mode") for c in CALL_CONTEXTS if c.get("deterministic")} == set(GRAD_MODES)
    dtypes = {"random_fp32": {None, "fp16"}, "random_bf16": {None}}  # fp32 / fp16 logits there, bf16 here
    for family in ("random_fp32", "random_bf16"):
        specs = [s for s in iter_plan([family], 10, 0, 64, 4, max_batch=9) if s.grad_mode]
        pinned = {(s.logits_dtype, s.rows, context(dataclasses.asdict(s))) for s in specs}
        want = {(d, rows, context(c)) for d in dtypes[family] for rows in (1, 2, 9) for c in CALL_CONTEXTS
                if family == "random_fp32" or c.get("autocast") != "fp16"}  # no bf16 logits under fp16 autocast
        assert pinned == want, (family, want - pinned)
    seen = []

    def route(scores, bias, topk, renormalize, rsf):
        seen.append((torch.is_grad_enabled(), torch.is_inference_mode_enabled(), type(bias), bias.requires_grad, scores.requires_grad,
                     scores.is_leaf, torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu"), torch.get_default_dtype(),
                     torch.are_deterministic_algorithms_enabled()))  # fmt: skip
        return correct(scores, bias, topk, renormalize, rsf)

    from contracts.candidates.fenced_call import call_fenced

    for spec in specs + [s for s in iter_plan(["random_fp32"], 10, 0, 64, 4, max_batch=9) if s.grad_mode][:40]:
        answer, error = call_fenced(route, CallInputs(build_case(spec)))
        assert error is None and not answer[0].requires_grad, spec.replay_id
        grad, inference, kind, requires_grad, logits_grad, leaf, autocast, default_dtype, deterministic = seen[-1]
        assert autocast == {None: False, "bf16": torch.bfloat16, "fp16": torch.float16}[spec.autocast], spec.replay_id
        assert deterministic == spec.deterministic and not torch.are_deterministic_algorithms_enabled(), spec.replay_id
        assert default_dtype == (torch.bfloat16 if spec.default_dtype else torch.float32), spec.replay_id
        assert torch.get_default_dtype() == torch.float32  # restored
        assert grad == (spec.grad_mode == "on") and inference == (spec.grad_mode == "inference"), spec.replay_id
        assert (kind is torch.nn.Parameter) == (spec.bias_parameter is not None), spec.replay_id
        assert requires_grad == (spec.bias_parameter == "trainable"), spec.replay_id
        assert logits_grad == spec.logits_grad and leaf == (not spec.logits_grad), spec.replay_id
    no_bias = [s for s in iter_plan(["random_fp32"], 10, 0, 64, 4, max_batch=9, bias=False) if s.grad_mode]
    assert not any(s.bias_parameter for s in no_bias)
    assert {context(dataclasses.asdict(s)) for s in no_bias} == {context(c) for c in CALL_CONTEXTS if c["bias_parameter"] is None}


@pytest.mark.parametrize("router, tag", [("reads_aligned_logits_from_the_storage_start", "logits_offset-256"),
                                         ("reads_an_aligned_bias_from_the_storage_start", "bias_offset-256")])  # fmt: skip
def test_a_router_that_reads_an_aligned_input_from_its_storage_start_fails(router, tag, tmp_path):
    # The only inputs not at their storage's start were one element in: misaligned, so a vector path never saw one.
    run = run_checks([f"{CTX}:{router}"], families=_LAYOUT_FAMILIES, rows=200, isolate=False, out=tmp_path / router, progress=False)
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and s.mismatched_rows >= 1, s
    assert s.clauses_broken.get("selection"), s.clauses_broken  # values read from elsewhere: other experts chosen
    assert details and all(tag in d.case.split(":")[3:] for d in details), {d.case for d in details}


# Each in process, and the first in a worker too (it reads the layout before the pipe makes the answer contiguous).
@pytest.mark.slow  # a check per answer layout (3-6 s each)
@pytest.mark.parametrize("router, name, isolate", [("returns_column_major_ids", "ids", False), ("returns_column_major_ids", "ids", True),
                                                   ("returns_column_major_weights", "weights", False),
                                                   ("returns_ids_sliced_from_a_wider_buffer", "ids", False)])  # fmt: skip
def test_an_answer_that_is_not_row_major_is_a_validity_failure(router, name, isolate, tmp_path):
    # The right values in another layout: an engine reads ids and weights by data pointer. They passed on 3221a05.
    run = run_checks([f"{CTX}:{router}"], families=["random_fp32"], rows=100, isolate=isolate, out=tmp_path / router, progress=False)
    s, details = run.summaries[0], run.results[0].details
    assert s.status.value == "fail" and set(s.clauses_broken) == {"validity"}, (s.status, s.clauses_broken, s.error)
    reasons = {d.reason for d in details}
    assert all(f"{name} of shape" in r and "not a contiguous row-major" in r and f"return {name}.contiguous()" in r for r in reasons), reasons


_NONE = ("returns_what_an_in_place_api_returns", "returned NoneType, not a (weights, ids) pair")


# Each in process; None in a worker too (it crossed the pipe as "no --against").
@pytest.mark.parametrize("router, said, isolate", [(*_NONE, False), (*_NONE, True),
                                                   ("returns_three_tensors", "returned tuple, not a (weights, ids) pair", False),
                                                   ("returns_column_major_ids", "not a contiguous row-major", False)])  # fmt: skip
def test_an_unusable_against_answer_is_an_error_not_a_comparison_with_the_oracle(router, said, isolate, tmp_path):
    # `oracle --against X` with X returning None passed on 3221a05 (the rows were compared with the oracle); a malformed
    # answer ended an in-process check with a traceback.
    run = run_checks(["oracle"], against=f"{CTX}:{router}", families=["random_fp32"], rows=20, max_batch=2, isolate=isolate,
                     out=tmp_path / router, progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "error" and s.error.kind == "against_failed", (s.status, s.error)
    assert f"--against {CTX}:{router} answer unusable: " in s.error.message and said in s.error.message, s.error.message
    assert "\n" not in s.error.message, s.error.message


@pytest.mark.slow  # two checks, isolated and not (7-8 s each)
@pytest.mark.parametrize("isolate", [False, True])
def test_an_answer_is_read_from_its_memory_not_through_its_subclass(isolate, tmp_path):
    # A __torch_dispatch__ subclass answered the harness's clone() with the right ids while its memory held others:
    # PASS on 3221a05.
    router = "returns_an_answer_whose_memory_differs_from_what_torch_ops_see"
    run = run_checks([f"{CTX}:{router}"], families=["random_fp32"], rows=50, max_batch=2, isolate=isolate, out=tmp_path / "m",
                     progress=False)  # fmt: skip
    s = run.summaries[0]
    assert s.status.value == "fail" and s.mismatched_rows >= 1 and set(s.clauses_broken) == {"output_order"}, (s.status, s.clauses_broken)


# Slow: Hypothesis shrinks the finding, about 9 s on the 2-core machine. One router: search reads answers through
# fenced_call.call_once, the call check makes, so the subclass whose memory differs from what torch ops
# see (which search also missed on 3221a05) is caught there as in check (its check test above; its search took 60 s,
# every torch op of a __torch_dispatch__ subclass running in Python).
@pytest.mark.slow
@pytest.mark.parametrize("router, said", [("returns_column_major_ids", "not a contiguous row-major")])
def test_search_reads_an_answer_as_check_does(router, said):
    # search called the route itself and compared what it returned: it found nothing on 3221a05. The router is
    # offered at (E, k) = (16, 4) only (the search draws the shapes a candidate covers): a 16-expert finding shrinks in
    # seconds, an 896-expert one in tens of seconds, and the way an answer is read does not depend on the shape.
    from contracts.run.search import search
    from tests.adversarial import call_contexts

    result = search(evidence.offered_at_16_4(getattr(call_contexts, router), router), contract="aiter", examples=5, database=None)
    assert result.findings, result.hypothesis_log[-3:]
    assert said in " ".join(str(f) for f in result.findings), result.findings[0]


def test_an_answer_that_is_not_row_major_in_one_slice_of_a_bulk_case_names_the_slice():
    from contracts.candidates.calling import in_slices

    def route(scores, bias, topk, renormalize, rsf):  # column-major from the second call on
        w, ids = correct(scores, bias, topk, renormalize, rsf)
        return (w, ids) if scores.storage_offset() == 0 else (w, ids.t().contiguous().t())

    scores, bias = torch.randn(10, 64), torch.zeros(64)
    message = in_slices(route, 4)(scores, bias, 4, True, 1.0)
    assert isinstance(message, str) and message.startswith("rows 4..7 (one call of 4 rows) ids of shape (4, 4) with strides (1, 4)"), message


# ---------------------------------------------------------------- the split view keeps the layout


def test_the_split_view_sees_a_strided_only_defect(tmp_path):
    from contracts.run.matrix import run_matrix

    report = run_matrix([], split=("oracle", f"{ADV}:wrong_on_strided", 1024), families=["strided"], rows=100, isolate=False,
                        out=tmp_path / "m", progress=False, max_batch=2)  # fmt: skip
    assert report.report.split.pair.rows_differing > 0, report.report.split.pair


def test_the_split_view_sees_a_transposed_only_defect(tmp_path):
    from contracts.run.matrix import run_matrix

    report = run_matrix([], split=("oracle", f"{ADV}:reads_dense_logits_as_row_major", 64), families=["random_fp32"], rows=10,
                        isolate=False, out=tmp_path / "m", progress=False, max_batch=2)  # fmt: skip
    assert report.report.split.pair.rows_differing > 0, report.report.split.pair


# ---------------------------------------------------------------- process exits, in every command that calls a candidate

EXITS = list(evidence.PROCESS_EXITS)
_SMALL = ["--families", "random_fp32", "--rows", "20", "--max-batch", "2"]


def _check(router, tmp_path, *extra):
    return _cli("check", "--candidate", f"{ADV}:{router}", *_SMALL, "--out", str(tmp_path / "b"), "--quiet", *extra)


def _plugin(router, tmp_path, *extra):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "contracts.pytest_plugin",
                           "--pyargs", "contracts.conformance", "--candidate", f"{ADV}:{router}", "--rows", "20", "--max-batch", "2",
                           "-q", "-k", "verdict or tie_order", *extra],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    return done.returncode, done.stdout + done.stderr


RUNNERS = {
    "check": _check,
    "check --no-isolate": lambda router, tmp_path: _check(router, tmp_path, "--no-isolate"),
    "matrix": lambda router, tmp_path: _cli("matrix", "--candidate", f"{ADV}:{router},oracle", *_SMALL, "--out", str(tmp_path / "m")),
    "probe": lambda router, tmp_path: _cli("probe", "--candidate", f"{ADV}:{router}", "--no-verify", "--out", str(tmp_path / "p")),
    "search": lambda router, tmp_path: _cli("search", "--candidate", f"{ADV}:{router}", "--examples", "3", "--no-database",
                                            "--out", str(tmp_path / "s")),  # fmt: skip
    "nightly": lambda router, tmp_path: _cli("nightly", "--candidate", f"{ADV}:{router}", "--rows", "20", "--fail-on", "failure",
                                             "--out", str(tmp_path / "n")),  # fmt: skip
    "pytest plugin": _plugin,
    "pytest plugin --no-isolate": lambda router, tmp_path: _plugin(router, tmp_path, "--no-isolate"),
    # bench times candidates in its own process: fenced calls and a supervisor (tests/adversarial/test_exit_codes.py)
    "bench": lambda router, tmp_path: _cli("bench", "--candidate", f"{ADV}:{router}", "--m", "1", "--repeats", "1", "--device", "cpu",
                                           "--out", str(tmp_path / "b")),  # fmt: skip
}
# Every command that calls a candidate.
COMMANDS_CALLING_A_CANDIDATE = {"check", "matrix", "probe", "search", "nightly", "pytest plugin", "bench"}
NOT_YET: set[str] = set()


def test_every_command_that_calls_a_candidate_has_its_process_exit_cases():
    from contracts.commands import COMMANDS

    calling = {"check", "matrix", "probe", "search", "nightly", "bench"}
    assert calling <= set(COMMANDS), "a command was renamed: update this list"
    assert {c.split()[0] if c != "pytest plugin" else c for c in COMMANDS_CALLING_A_CANDIDATE} >= calling
    covered = {name.replace(" --no-isolate", "") for name in RUNNERS}
    assert covered | NOT_YET == COMMANDS_CALLING_A_CANDIDATE, covered
    assert set(EXITS) == {"sys.exit(0)", "os._exit(0)", "posix._exit(0)", "libc _exit(0)", "raise", "segfault"}


# Four ways a process can end, each run through every command: a Python exception, SystemExit, the exit system call
# with no Python clean-up, and a signal. posix._exit is os._exit (the same function object), and libc's _exit is the
# C call os._exit makes: those two spellings run through the two process set-ups that differ (the worker of `check`
# and the supervised `check --no-isolate`), not through every command again (8 commands x 2 = 16 fresh processes of
# ~8 s of CPU each, for code paths the os._exit cases already take).
EXIT_MECHANISMS = ["raise", "sys.exit(0)", "os._exit(0)", "segfault"]
EXIT_ALIASES = [("posix._exit(0)", "check"), ("posix._exit(0)", "check --no-isolate"), ("libc _exit(0)", "check"),
                ("libc _exit(0)", "check --no-isolate")]  # fmt: skip
EXIT_CASES = [(command, kind) for command in RUNNERS for kind in EXIT_MECHANISMS] + [(c, k) for k, c in EXIT_ALIASES]


def test_the_exit_cases_cover_every_exit_and_command():
    import posix

    assert os._exit is posix._exit  # why posix._exit needs no run of its own through every command
    assert {kind for _, kind in EXIT_CASES} == set(EXITS)
    assert {command for command, _ in EXIT_CASES} == set(RUNNERS)


@pytest.mark.slow  # one command per (command, exit): a fresh process each, 5-20 s
@pytest.mark.parametrize("command, exit_kind", EXIT_CASES)
def test_a_candidate_that_ends_the_process_never_passes(command, exit_kind, tmp_path):
    code, out = RUNNERS[command](evidence.PROCESS_EXITS[exit_kind], tmp_path)
    assert code != 0, f"{command} with a router that does {exit_kind}: exit 0\n{out[-3000:]}"


def test_search_draws_every_kind_of_call_context():
    # Every call context can be drawn (the default too), and an example calls in the one it drew.
    from hypothesis import find, settings

    from contracts.cases import strategies as strat

    for index in range(len(CALL_CONTEXTS) + 1):
        assert find(strat._CALL_CONTEXT_INDICES, lambda drawn, i=index: drawn == i, settings=settings(max_examples=2000, database=None)) == index
    example = find(strat.routing_examples(shapes=((16, 4),)), lambda e: e.call_context > 0, settings=settings(max_examples=500, database=None))
    assert example.context == CALL_CONTEXTS[example.call_context - 1]


# Slow: Hypothesis shrinks the finding (a few seconds at (E, k) = (16, 4) on the 2-core machine).
@pytest.mark.slow
@pytest.mark.parametrize("router", ["wrong_under_inference_mode"])
def test_search_calls_in_every_call_context_and_replays_it(router, tmp_path, capsys):
    # search called the route itself, in the default context: it found nothing on 75b5150. It now draws the call
    # context with the input (the default for about half the examples) and the minimal input keeps it on replay.
    from contracts.commands.search import main as search_main

    spec = f"tests.adversarial.test_no_false_pass:{router}_at_16_4"
    code = search_main(["--candidate", spec, "--examples", "40", "--seed", "0", "--database", str(tmp_path / "db"), "--out", str(tmp_path / "b")])
    assert code == 1, capsys.readouterr().out
    minimal = torch.load(tmp_path / "b" / "minimal.pt", weights_only=True)
    assert minimal["context"] and minimal["example"]["call_context"] > 0, minimal.get("context")
    assert "called under" in (tmp_path / "b" / "search.md").read_text()
    assert search_main(["--replay", str(tmp_path / "b" / "minimal.pt"), "--candidate", spec]) == 1
    assert search_main(["--replay", str(tmp_path / "b" / "minimal.pt"), "--candidate", "oracle"]) == 0


wrong_under_inference_mode_at_16_4 = evidence.offered_at_16_4(call_contexts_module.wrong_under_inference_mode, "wrong_under_inference_mode")
