"""Property tests: the vectorized oracle equals the plain per-row reference.

Strategies force what breaks routers: few distinct values (exact ties),
bf16 quantization, NaN, +-inf, saturated sigmoids (|x| large) and +-0.
"""

import math

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import oracle

from reference import aiter_row, serial_row

SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 100.0, -100.0, 200.0, -200.0]


@st.composite
def routing_problems(draw):
    experts = draw(st.integers(1, 80))
    topk = draw(st.integers(1, experts))
    rows = draw(st.integers(1, 6))
    style = draw(st.sampled_from(["few_values", "bf16", "special", "wide"]))
    if style == "few_values":
        palette = draw(st.lists(st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]), min_size=1, max_size=3))
        element = st.sampled_from(palette)
    elif style == "special":
        element = st.one_of(st.sampled_from(SPECIAL), st.floats(-3, 3, width=32))
    else:
        element = st.floats(-40, 40, width=32)
    values = draw(st.lists(st.lists(element, min_size=experts, max_size=experts), min_size=rows, max_size=rows))
    scores = torch.tensor(values, dtype=torch.float32)
    if style == "bf16":
        scores = scores.bfloat16()
    bias_element = st.one_of(st.sampled_from([0.0, -0.0, 0.25, -0.5, -math.inf]), st.floats(-1, 1, width=32))
    bias = torch.tensor(draw(st.lists(bias_element, min_size=experts, max_size=experts)), dtype=torch.float32)
    if draw(st.booleans()):
        bias.zero_()
    renormalize = draw(st.booleans())
    rsf = draw(st.sampled_from([1.0, 2.5, 2.827]))
    return scores, bias, topk, renormalize, rsf


def _assert_weights_equal(actual, expected):
    expected = np.array(expected, dtype=np.float32)
    actual = actual.numpy()
    both_nan = np.isnan(actual) & np.isnan(expected)
    assert ((actual == expected) | both_nan).all(), (actual, expected)


def _check(contract, row_fn, problem):
    scores, bias, topk, renormalize, rsf = problem
    weights, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)
    sig, ranking = oracle.ranking_values(scores, bias, contract)
    for r in range(scores.shape[0]):
        exp_w, exp_ids = row_fn(sig[r].numpy().tolist(), ranking[r].numpy().astype(np.float32), topk, renormalize, rsf)
        assert ids[r].tolist() == exp_ids, f"row {r}"
        _assert_weights_equal(weights[r], exp_w)


@given(routing_problems())
@example((torch.zeros(1, 8), torch.zeros(8), 3, True, 1.0))
@example((torch.full((1, 8), math.nan), torch.zeros(8), 8, True, 2.5))
def test_oracle_aiter_equals_plain_reference(problem):
    _check("aiter", aiter_row, problem)


@given(routing_problems())
@example((torch.full((1, 8), math.nan), torch.zeros(8), 3, True, 1.0))
@example((torch.zeros(1, 8), torch.full((8,), -math.inf), 4, True, 1.0))
def test_oracle_serial_equals_plain_reference(problem):
    _check("serial", serial_row, problem)


@given(routing_problems(), st.integers(0, 5))
def test_oracle_row_strided_input_equals_contiguous(problem, offset):
    scores, bias, topk, renormalize, rsf = problem
    wide = torch.full((scores.shape[0], scores.shape[1] + 9), 7.0, dtype=scores.dtype)
    wide[:, offset : offset + scores.shape[1]] = scores
    view = wide[:, offset : offset + scores.shape[1]]
    for contract in oracle.CONTRACTS:
        a = oracle.route(view, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)
        b = oracle.route(scores.contiguous(), bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)
        assert torch.equal(a[1], b[1])
        assert torch.equal(a[0].nan_to_num(-7.0), b[0].nan_to_num(-7.0))


@given(routing_problems(), st.sampled_from(["column_stride-2", "transposed", "bias_stride-3"]))
def test_oracle_column_strided_transposed_and_strided_bias_inputs_equal_contiguous(problem, layout):
    # The harness pins these layouts; the oracle reads them as their values (the same bits).
    scores, bias, topk, renormalize, rsf = problem
    rows, experts = scores.shape
    view, bias_view = scores.t().contiguous().t(), bias
    if layout == "column_stride-2":
        wide = torch.full((rows, 2 * experts), 7.0, dtype=scores.dtype)
        wide[:, 1::2] = scores
        view = wide[:, 1::2]
    elif layout == "bias_stride-3":
        wide_bias = torch.full((3 * experts,), 7.0, dtype=bias.dtype)
        wide_bias[::3] = bias
        view, bias_view = scores, wide_bias[::3]
    for contract in oracle.CONTRACTS:
        a = oracle.route(view, bias_view, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)
        b = oracle.route(scores.contiguous(), bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)
        assert torch.equal(a[1], b[1])
        assert torch.equal(a[0].nan_to_num(-7.0), b[0].nan_to_num(-7.0))


def test_oracle_chunked_rows_equal_row_by_row():
    gen = torch.Generator().manual_seed(3)
    scores = torch.randint(-3, 4, (2500, 64), generator=gen).float()  # ties everywhere, > one CPU chunk
    bias = torch.zeros(64)
    whole = oracle.route(scores, bias, 8)
    for r in (0, 1023, 1024, 2047, 2499):
        single = oracle.route(scores[r : r + 1], bias, 8)
        assert torch.equal(whole[1][r], single[1][0]) and torch.equal(whole[0][r], single[0][0])
