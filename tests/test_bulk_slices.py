"""Bulk cases larger than a candidate's batches reach it in slices (``contracts.candidates.calling.in_slices``).

The harness generates, routes and compares a bulk case (16,384 rows on a CPU)
at once; a candidate with ``max_rows`` 1,000 must see calls of at most 1,000
rows, every row checked, and a bulk case's replay line must rerun it.
"""

import dataclasses

import pandas as pd
import pytest
import torch

from contracts.cases.plan import pinned_rows
from contracts.reports.schema import Status
from contracts.run.checks import run_checks
from contracts.run.options import OptionError, parse_replay

ROWS = 40_000  # random_fp32's coverage cases, then bulk cases of 16,384 rows


# random_fp32's pinned dtype cases (contracts.cases.pins.pinned_specs); its budget (all ROWS) holds its max-batch case
PINNED = pinned_rows("random_fp32", 1025, experts=896, topk=16, contract="aiter", budget=ROWS)


def _check(name, tmp_path, family="random_fp32", **kw):
    done = run_checks([f"tests.standins.small_batches:{name}"], families=[family], rows=ROWS, device="cpu",
                      out=tmp_path / name, progress=False, **kw)  # fmt: skip
    return done.results[0].summary


@pytest.mark.slow  # a check of a capped candidate over its bulk cases (5-9 s each)
@pytest.mark.parametrize("isolate", [False, True])
def test_a_capped_candidate_gets_bulk_cases_in_slices_and_every_row_is_checked(tmp_path, isolate):
    s = _check("capped", tmp_path, isolate=isolate)
    assert s.status is Status.PASS, s.error
    assert s.rows_checked == ROWS + PINNED and s.mismatched_rows == 0
    assert s.options["bulk_rows"] == 16_384 and s.options["call_rows"] == 1000
    assert any(f.rows > 16_000 for f in s.families.values())


@pytest.mark.slow  # a failing check of bulk cases and its replay: ~8 s
def test_mismatches_at_slice_ends_are_found_and_their_bulk_replay_line_reruns_the_case(tmp_path):
    s = _check("wrong_last_row", tmp_path)
    assert s.status is Status.FAIL and s.mismatched_rows > 0
    cells = pd.read_csv(tmp_path / "wrong_last_row" / "mismatches.csv")
    bulk = cells[cells["case"].str.endswith(":bulk")]
    assert len(bulk), "no bulk-case cell in mismatches.csv"
    last_of_case = bulk["case"].str.split(":").str[2].astype(int) - 1
    assert ((bulk["row"] % 1000 == 999) | (bulk["row"] == last_of_case)).all()  # the last row of each call
    case = bulk["case"].iloc[0]
    again = run_checks(["tests.standins.small_batches:wrong_last_row"], replay=case, device="cpu",
                       out=tmp_path / "replay", progress=False).results[0].summary  # fmt: skip
    assert again.rows_checked == int(case.split(":")[2]) == 16_384
    assert again.status is Status.FAIL and again.mismatched_rows == 17  # rows 999, 1999, ..., 15999 and 16383


@pytest.mark.slow  # a failing check of bulk cases: ~5 s
def test_a_malformed_slice_is_a_validity_mismatch_naming_the_slice(tmp_path):
    s = _check("ragged", tmp_path, family="inf_logits")  # its pinned cases (one of each launch class) are malformed too
    assert s.status is Status.FAIL and s.clauses.get("validity", 0) > 0
    cells = pd.read_csv(tmp_path / "ragged" / "mismatches.csv")  # every case's validity reason (details keep 5 a clause)
    reasons = cells.loc[(cells["clause"] == "validity") & cells["case"].str.endswith(":bulk"), "reason"].tolist()
    assert reasons and all("one call of 1,000 rows" in r and "expected 1000 rows" in r for r in reasons), reasons[:3]


def test_bulk_replay_ids_parse_and_bad_ones_name_the_form():
    spec = parse_replay("random_fp32:7:65536:bulk", 896, 16)
    assert spec.bulk and spec.rows == 65_536 and spec.replay_id == "random_fp32:7:65536:bulk"
    assert not parse_replay("random_fp32:7:100", 896, 16).bulk
    with pytest.raises(OptionError, match="FAMILY:SEED:ROWS:bulk"):
        parse_replay("random_fp32:7:100:big", 896, 16)


def test_every_pinned_case_replays_from_its_id_and_builds_its_dtypes():
    from contracts.cases import build_case, iter_plan
    from contracts.cases.pins import CALL_CONTEXTS

    names = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    pinned = [s for s in iter_plan(["random_bf16", "random_fp32", "strided"], 10, 0, 64, 4, max_batch=9) if s.tags]
    # each at 1 and 2 rows and at max_batch (64 capped at 9); the column-strided logits of both families and the
    # strided bias of random_bf16 too, and the transposed logits of both at 2 and 9 rows (one row is contiguous)
    # (random_bf16: 3 bias dtypes, each at offsets 1 and 256, logits at offsets 1 and 256, a zero bias; random_fp32: 3
    # bias dtypes, 3 with fp16 logits, fp32 and fp16 logits at offsets 1 and 256, 8 call contexts; strided at offset 0
    # and with a zero bias); then the other call contexts with fp32 logits, and every one with fp16 and bf16 logits
    # (bf16 logits never under autocast to fp16)
    fp16_autocast = sum(c.get("autocast") == "fp16" for c in CALL_CONTEXTS)
    assert len(pinned) == 3 * (12 + 18 + 2) + 3 * 3 + 2 * 2 + 3 * (len(CALL_CONTEXTS) - 8 + 2 * len(CALL_CONTEXTS) - fp16_autocast)
    for spec in pinned:
        assert parse_replay(spec.replay_id, 64, 4) == spec, spec.replay_id
        case = build_case(spec)
        if spec.logits_dtype:
            assert case.scores.dtype == names[spec.logits_dtype]
        if spec.bias_dtype:
            assert case.bias.dtype == names[spec.bias_dtype]
        assert case.bias.stride() == (spec.bias_stride,) and case.bias.storage_offset() == spec.bias_offset
        assert bool(case.bias.any()) != spec.zero_bias, spec.replay_id
        if spec.logits_offset:  # contiguous, one element into the buffer (not on 16 bytes) or 256 (on 16 bytes)
            assert case.scores.is_contiguous() and case.scores.storage_offset() == spec.logits_offset
            assert bool(case.scores.data_ptr() % 16) == (spec.logits_offset == 1), spec.replay_id
        if spec.column_stride != 1:  # every other column of a [M, 2E] buffer, from its second
            assert case.scores.stride() == (2 * 64, 2) and case.scores.storage_offset() == 1
        if spec.transposed:  # an [E, M] buffer transposed
            assert spec.rows > 1 and case.scores.stride() == (1, spec.rows) and case.scores.storage_offset() == 0
        assert torch.equal(case.scores.contiguous(), build_case(dataclasses.replace(spec, column_stride=1, transposed=False,
                                                                                    bias_stride=1)).scores)  # fmt: skip
    with pytest.raises(OptionError, match="logits-fp16"):
        parse_replay("random_fp32:7:64:logits-fp8", 64, 4)


def test_a_gate_that_takes_renormalize_is_told_it_and_an_older_gate_is_not():
    from contracts.candidates import Candidate

    asked = []

    def new_gate(*, rows, experts, topk, dtype, bias_dtype, renormalize=True):
        asked.append(renormalize)
        return renormalize

    def old_gate(*, rows, experts, topk, dtype, bias_dtype):  # would raise TypeError on an unknown keyword
        return True

    shape = dict(rows=4, experts=896, topk=16, dtype=None, bias_dtype=None, renormalize=False, num_expert_group=8, topk_group=4)
    assert Candidate(name="new", route=None, covered=new_gate).covers(**shape) is False and asked == [False]
    assert Candidate(name="old", route=None, covered=old_gate).covers(**shape) is True
    assert Candidate(name="any", route=None, covered=lambda **kw: kw["topk_group"] == 4).covers(**shape) is True


def test_a_lazy_wrapper_around_an_older_gate_still_gets_only_the_basics():
    """The built-in kernels' gates are imported lazily through a ``**kwargs`` wrapper: on the H200 every
    radix4 check ended in 'covered() got an unexpected keyword argument renormalize' before this."""
    from contracts.candidates import Candidate, get_candidate

    def old_gate(*, rows, experts, topk, dtype, bias_dtype):
        return rows <= 10

    def wrapper(**kwargs):
        return old_gate(**kwargs)

    cand = Candidate(name="wrapped", route=None, covered=wrapper)
    shape = dict(rows=4, experts=896, topk=16, dtype=None, bias_dtype=None, renormalize=False)
    assert cand.covers(**shape) is True and cand.covers(**{**shape, "rows": 11}) is False
    import torch

    radix4 = get_candidate("radix4")  # the module's covered() takes no renormalize
    assert radix4.covers(rows=8, experts=896, topk=16, dtype=torch.bfloat16, bias_dtype=torch.float32, renormalize=False)


def test_every_pinned_call_option_case_replays_from_its_id_and_is_called_so():
    from contracts.cases import build_case, iter_plan

    pinned = [s for s in iter_plan(["batch_sizes"], 10, 0, 64, 4, max_batch=2) if s.renormalize is not None]
    assert len(pinned) == 2 * 2 * 5  # 1 and 2 rows (max_batch 2), renormalize on / off, scaling 1, 2.5, 2.827, 0.375, 16
    for spec in pinned:
        assert parse_replay(spec.replay_id, 64, 4) == spec, spec.replay_id
        case = build_case(spec)
        assert (case.renormalize, case.routed_scaling_factor) == (spec.renormalize, spec.scaling), spec.replay_id
    with pytest.raises(OptionError, match="renormalize-on"):
        parse_replay("batch_sizes:7:2:scaling-3", 64, 4)
