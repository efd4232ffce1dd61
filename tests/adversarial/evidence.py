"""Routers that try to earn a PASS without evidence, or hide where the plan never looks.

Each is right wherever it answers, so only the harness's coverage can catch it.
"""

import ctypes
import os
import posix
import sys

import torch

import oracle
from contracts.candidates import Candidate
from kernels.radix4 import BATCH_SWITCH_POINTS
from tests.planted._common import correct


def _serves_nothing(**_shape) -> bool:
    return False


def _serves_only_fp32(*, dtype, **_shape) -> bool:
    return dtype == torch.float32


# Serves no shape at all: every case is skipped, 0 rows are checked.
serves_nothing = Candidate(name="serves-nothing", route=correct, covered=_serves_nothing, coverage="serves no shape")
# Serves fp32 logits only: the bf16 families are never checked.
serves_only_fp32 = Candidate(name="serves-only-fp32", route=correct, covered=_serves_only_fp32, coverage="fp32 logits only")


def offered_at_16_4(route, name: str) -> Candidate:
    """``route`` as a candidate covering (E, k) = (16, 4) only, for a search: it draws only the shapes a candidate
    covers, and shrinks a 16-expert input in seconds where an 896-expert one takes a minute or two."""
    return Candidate(name=f"{name}@16/4", route=route, covered=lambda *, experts, topk, **_: (experts, topk) == (16, 4))


def _reverse_first_row(out, where) -> tuple:
    weights, ids = out
    if where:
        weights, ids = weights.clone(), ids.clone()
        ids[0] = ids[0].flip(0)
        weights[0] = weights[0].flip(0)
    return weights, ids


def wrong_from_2049_rows(scores, bias, topk, renormalize, rsf):
    """Wrong output order in calls of 2,049..3,072 rows only (a launch shape the old plan never made)."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), 2049 <= scores.shape[0] <= 3072)


def wrong_above_16384_rows(scores, bias, topk, renormalize, rsf):
    """Wrong output order in calls of more than 16,384 rows only."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), scores.shape[0] > 16_384)


def wrong_in_1025_to_2048_rows(scores, bias, topk, renormalize, rsf):
    """Wrong output order in calls of 1,025..2,048 rows (the old plan made these only from about --rows 10000)."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), 1025 <= scores.shape[0] <= 2048)


def wrong_on_fp32_logits_bf16_bias(scores, bias, topk, renormalize, rsf):
    """Wrong on fp32 logits with a bf16 bias only (a dtype pair the old plan never made)."""
    pair = scores.dtype == torch.float32 and bias is not None and bias.dtype == torch.bfloat16
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), pair)


def wrong_on_fp16_logits(scores, bias, topk, renormalize, rsf):
    """Wrong on fp16 logits only (no plan made them before the pinned dtype cases)."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), scores.dtype == torch.float16)


def wrong_on_fp16_bias(scores, bias, topk, renormalize, rsf):
    """Wrong on an fp16 bias only, whatever the logits."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), bias is not None and bias.dtype == torch.float16)


def reads_fp16_logits_as_bf16(scores, bias, topk, renormalize, rsf):
    """A kernel whose fp16 path rounds the logits to bf16 first (a loader written for bf16 only)."""
    if scores.dtype == torch.float16:
        scores = scores.to(torch.bfloat16)
    return correct(scores, bias, topk, renormalize, rsf)


def reads_a_misaligned_bias_from_below(scores, bias, topk, renormalize, rsf):
    """Vector loads of the bias from the aligned address below it when the bias does not start on 16 bytes (an
    alignment test that looks at the logits only): every expert gets its left neighbour's bias."""
    if bias is not None and bias.data_ptr() % 16:
        bias = torch.cat([bias.new_zeros(1), bias[:-1]])
    return correct(scores, bias, topk, renormalize, rsf)


# Wrong on a pinned dtype pair or layout in one launch class only: radix4 at 896/16 under aiter takes a block per
# token below FIRST_WARP rows, a warp from there and the dense kernel from FIRST_DENSE (the shipped switch points,
# 7 and 1,585 today; 61 and 1,585 when these were written), with loaders written per launch shape. The pinned cases
# used to run at 64 rows only.
FIRST_WARP, FIRST_DENSE = BATCH_SWITCH_POINTS[(896, 16)]


def wrong_on_fp16_logits_in_block_launches(scores, bias, topk, renormalize, rsf):
    """Wrong on fp16 logits in block launches (fewer than FIRST_WARP rows) only."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), scores.dtype == torch.float16 and scores.shape[0] < FIRST_WARP)


def wrong_on_fp16_logits_in_block_launches_of_2_rows_or_more(scores, bias, topk, renormalize, rsf):
    """Wrong on fp16 logits in block launches of more than one row (one row is a decode path of its own)."""
    fp16 = scores.dtype == torch.float16
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), fp16 and 2 <= scores.shape[0] < FIRST_WARP)


def wrong_on_fp16_bias_from_1585_rows(scores, bias, topk, renormalize, rsf):
    """Wrong on an fp16 bias in dense launches (FIRST_DENSE rows and more) only."""
    fp16_bias = bias is not None and bias.dtype == torch.float16
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), fp16_bias and scores.shape[0] >= FIRST_DENSE)


def reads_a_misaligned_bias_from_below_from_1585_rows(scores, bias, topk, renormalize, rsf):
    """The misaligned-bias read of ``reads_a_misaligned_bias_from_below``, in dense launches only."""
    if bias is not None and bias.data_ptr() % 16 and scores.shape[0] >= FIRST_DENSE:
        bias = torch.cat([bias.new_zeros(1), bias[:-1]])
    return correct(scores, bias, topk, renormalize, rsf)


# Wrong on a family's own rows (ties, NaN, infinities) in one launch class only: the families' sizes reach a class by
# chance and with budget only (nan_sparse: 1, 64, 1,024; the tie pools: 1, 16, 128), so at --rows 20,000 no NaN row met
# a dense launch and no tied or infinite row a block launch of 2..6 rows.
def _reverse_rows(out, rows) -> tuple:
    weights, ids = out[0].clone(), out[1].clone()
    ids[rows], weights[rows] = ids[rows].flip(1), weights[rows].flip(1)
    return weights, ids


def _tied_at_the_cutoff(scores, bias, ids):
    _, ranking = oracle.ranking_values(scores, bias, "aiter")
    keys = oracle.rank_keys(ranking)
    return (keys == keys.gather(1, ids[:, -1:].long())).sum(1) > 1


def wrong_on_tied_rows_in_block_launches_of_2_rows_or_more(scores, bias, topk, renormalize, rsf):
    """Output order reversed on rows with an exact tie at the cutoff, in calls of 2..FIRST_WARP-1 rows only."""
    out = correct(scores, bias, topk, renormalize, rsf)
    if not 2 <= scores.shape[0] < FIRST_WARP:
        return out
    return _reverse_rows(out, _tied_at_the_cutoff(scores, bias, out[1]))


def wrong_on_infinite_logits_in_block_launches_of_2_rows_or_more(scores, bias, topk, renormalize, rsf):
    """Output order reversed on rows holding an infinite logit, in calls of 2..FIRST_WARP-1 rows only."""
    out = correct(scores, bias, topk, renormalize, rsf)
    if not 2 <= scores.shape[0] < FIRST_WARP:
        return out
    return _reverse_rows(out, torch.isinf(scores).any(1))


def wrong_on_nan_rows_in_dense_launches(scores, bias, topk, renormalize, rsf):
    """Output order reversed on rows holding a NaN logit, in calls of FIRST_DENSE rows or more only."""
    out = correct(scores, bias, topk, renormalize, rsf)
    if scores.shape[0] < FIRST_DENSE:
        return out
    return _reverse_rows(out, torch.isnan(scores).any(1))


# Wrong for one count of rows in a kernel's last row tile, in dense launches only: the sweep's sizes (2^n + 1, each
# side of a switch point) leave M mod 8 and M mod 16 at one or two values there.
def wrong_on_a_tail_of_3_rows_in_8_row_tiles_in_dense_launches(scores, bias, topk, renormalize, rsf):
    rows = scores.shape[0]
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), rows >= FIRST_DENSE and rows % 8 == 3)


def wrong_on_a_tail_of_13_rows_in_16_row_tiles_in_dense_launches(scores, bias, topk, renormalize, rsf):
    rows = scores.shape[0]
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), rows >= FIRST_DENSE and rows % 16 == 13)


def wrong_on_strided_offset_0_in_one_row_calls(scores, bias, topk, renormalize, rsf):
    """Wrong on one-row calls whose row lies at storage offset 0 of a wider buffer."""
    strided = scores.stride(0) > scores.shape[1] and scores.storage_offset() == 0
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), strided and scores.shape[0] == 1)


def reads_a_misaligned_bf16_bias_from_below(scores, bias, topk, renormalize, rsf):
    """``reads_a_misaligned_bias_from_below`` for a bf16 bias only (its vector loader tests no alignment either)."""
    if bias is not None and bias.dtype == torch.bfloat16 and bias.data_ptr() % 16:
        bias = torch.cat([bias.new_zeros(1), bias[:-1]])
    return correct(scores, bias, topk, renormalize, rsf)


def reads_misaligned_contiguous_logits_from_below(scores, bias, topk, renormalize, rsf):
    """Vector loads of contiguous logits (chosen by is_contiguous() alone) from the aligned address below a start
    that is not on 16 bytes: every value is its left neighbour in the buffer."""
    if scores.is_contiguous() and scores.data_ptr() % 16:
        flat = scores.reshape(-1)
        scores = torch.cat([flat.new_zeros(1), flat[:-1]]).view_as(scores)
    return correct(scores, bias, topk, renormalize, rsf)


# Logits and bias layouts no family made: logits whose column stride is not 1 (every other column of a wider buffer,
# a transposed [E, M] buffer: row stride 1) and a bias whose stride is not 1. Each router is a kernel handed a data
# pointer and some of the strides, right on every layout the old plan made (contiguous, rows further apart than E,
# contiguous at an offset).
def ignores_the_logits_column_stride(scores, bias, topk, renormalize, rsf):
    """Reads the logits at their row stride as if their column stride were 1 (a kernel given data_ptr and stride(0))."""
    if scores.dim() == 2 and scores.shape[0] and scores.stride(1) != 1:
        scores = torch.as_strided(scores, scores.shape, (scores.stride(0), 1))
    return correct(scores, bias, topk, renormalize, rsf)


def reads_dense_logits_as_row_major(scores, bias, topk, renormalize, rsf):
    """Takes any dense logits (one block of memory, no gaps) for row-major ones and copies the rest: right on
    contiguous, row-strided and column-sliced logits, wrong on a transposed [E, M] buffer only (dense too)."""
    rows, experts = scores.shape
    if scores.is_contiguous() or scores.t().is_contiguous():
        scores = torch.as_strided(scores, (rows, experts), (experts, 1))
    else:
        scores = scores.contiguous()
    return correct(scores, bias, topk, renormalize, rsf)


def reads_the_bias_at_stride_1(scores, bias, topk, renormalize, rsf):
    """Reads the bias as E consecutive elements from where it starts, whatever its stride."""
    if bias is not None:
        bias = torch.as_strided(bias, bias.shape, (1,))
    return correct(scores, bias, topk, renormalize, rsf)


def _refuses_logits_column_strides(scores, bias, topk, renormalize, rsf):
    """A kernel's route that refuses what its launch cannot read (as ``kernels._args.check_route_args`` does)."""
    if scores.shape[1] > 1 and scores.stride(1) != 1:
        raise ValueError(f"scores.stride(1)={scores.stride(1)} is not 1; pass scores.contiguous()")
    return correct(scores, bias, topk, renormalize, rsf)


def _logits_column_stride_1(*, rows, experts, topk, dtype, bias_dtype, logits_strides=None, bias_stride=None) -> bool:
    return logits_strides is None or experts == 1 or logits_strides[1] == 1


def _takes_no_layouts(*, rows, experts, topk, dtype, bias_dtype, renormalize=True) -> bool:
    return True


# Declares the layouts its route refuses: those rows are skipped and counted, never an error, and the rest passes.
declines_logits_column_strides = Candidate(name="declines-logits-column-strides", route=_refuses_logits_column_strides,
                                           covered=_logits_column_stride_1, coverage="logits of column stride 1 only")
# A gate written before the layouts were asked about (it takes no logits_strides): asked as if it served every layout,
# so its router, wrong on column strides, is checked there and fails.
undeclared_column_strides = Candidate(name="undeclared-column-strides", route=ignores_the_logits_column_stride,
                                      covered=_takes_no_layouts)


# The empty batch (an idle data-parallel rank routes 0 tokens): no plan made one, so a router that crashes on it,
# or answers it with rows of its own, passed.
def raises_on_an_empty_batch(scores, bias, topk, renormalize, rsf):
    """Raises on 0 rows (a launch of an empty grid), right everywhere else."""
    if scores.shape[0] == 0:
        raise ValueError("grid of 0 blocks: invalid configuration argument")
    return correct(scores, bias, topk, renormalize, rsf)


def one_row_for_an_empty_batch(scores, bias, topk, renormalize, rsf):
    """Answers 0 rows with one row (a kernel that rounds its grid up to one block and writes it)."""
    if scores.shape[0] == 0:
        return torch.zeros(1, topk), torch.arange(topk, dtype=torch.int32)[None]
    return correct(scores, bias, topk, renormalize, rsf)


def int64_ids_for_an_empty_batch(scores, bias, topk, renormalize, rsf):
    """Answers 0 rows with empty tensors of the wrong dtype (an early return that allocates its own outputs)."""
    if scores.shape[0] == 0:
        return torch.zeros(0, topk), torch.zeros(0, topk, dtype=torch.int64)
    return correct(scores, bias, topk, renormalize, rsf)


# Wrong with one pair of call options in one launch class only (kernels are instantiated per renormalize flag and
# launch shape): the options were drawn per case, so a class met a pair by chance.
def wrong_unnormalized_unscaled_in_block_launches(scores, bias, topk, renormalize, rsf):
    """Wrong without renormalizing at a scaling of 1.0, in calls of fewer than FIRST_WARP rows."""
    pair = not renormalize and rsf == 1.0 and 0 < scores.shape[0] < FIRST_WARP
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), pair)


def wrong_unnormalized_scaled_in_dense_launches(scores, bias, topk, renormalize, rsf):
    """Wrong without renormalizing at a scaling of 2.827, in calls of FIRST_DENSE rows or more."""
    pair = not renormalize and rsf == 2.827 and scores.shape[0] >= FIRST_DENSE
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), pair)


def wrong_renormalized_scaled_2827_in_the_first_warp_launches(scores, bias, topk, renormalize, rsf):
    """Wrong renormalizing at a scaling of 2.827 in calls of FIRST_WARP..64 rows (the first warp launches)."""
    pair = renormalize and rsf == 2.827 and FIRST_WARP <= scores.shape[0] <= 64
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), pair)


def ignores_a_scaling_factor_below_1(scores, bias, topk, renormalize, rsf):
    """Scales by max(routed_scaling_factor, 1): right for the factors the cases draw (1.0, 2.5, 2.827), wrong for a
    model whose factor is below 1."""
    return correct(scores, bias, topk, renormalize, max(float(rsf), 1.0))


def clamps_the_scaling_factor_at_8(scores, bias, topk, renormalize, rsf):
    """Scales by min(routed_scaling_factor, 8): a factor kept in a narrow type; wrong for a model that scales by 16."""
    return correct(scores, bias, topk, renormalize, min(float(rsf), 8.0))


def wrong_on_strided_offset_0(scores, bias, topk, renormalize, rsf):
    """Wrong on rows further apart than E at storage offset 0 (the old strided family always had an offset)."""
    strided = scores.stride(0) > scores.shape[1] and scores.storage_offset() == 0
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), strided and scores.shape[0] > 0)


def wrong_on_strided(scores, bias, topk, renormalize, rsf):
    """Wrong on every strided call (row stride > E): the split view must keep the layout to see it."""
    strided = scores.stride(0) > scores.shape[1]
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), strided and scores.shape[0] > 0)


# Process exits: each ends the process on its first call, reporting success where it can.
def calls_sys_exit(scores, bias, topk, renormalize, rsf):
    sys.exit(0)


def calls_os_exit(scores, bias, topk, renormalize, rsf):
    os._exit(0)


def calls_posix_exit(scores, bias, topk, renormalize, rsf):
    posix._exit(0)


def calls_libc_exit(scores, bias, topk, renormalize, rsf):
    ctypes.CDLL(None)._exit(0)


def raises(scores, bias, topk, renormalize, rsf):
    raise RuntimeError("this router raises on every call")


def segfaults(scores, bias, topk, renormalize, rsf):
    ctypes.string_at(0)


PROCESS_EXITS = {
    "sys.exit(0)": "calls_sys_exit",
    "os._exit(0)": "calls_os_exit",
    "posix._exit(0)": "calls_posix_exit",
    "libc _exit(0)": "calls_libc_exit",
    "raise": "raises",
    "segfault": "segfaults",
}


# Wrong only with an all-zero bias (a freshly initialised e_score_correction_bias, for which a kernel may take a
# bias-free path): the only zero biases were all_zero's, on all-zero logits, so the bias-free path's NaN and infinity
# handling never met a case.
def wrong_on_nan_or_infinite_rows_with_a_zero_bias(scores, bias, topk, renormalize, rsf):
    """Output order reversed on rows holding a NaN or an infinite logit, when every bias element is zero."""
    out = correct(scores, bias, topk, renormalize, rsf)
    if bias is None or bool(bias.any()) or scores.shape[0] == 0:
        return out
    return _reverse_rows(out, (torch.isnan(scores) | torch.isinf(scores)).any(1))
