"""Layouts and gates: logits of column stride != 1 (column-sliced, transposed) and a bias of stride != 1.

What is asserted:
- ``Case.call_shape`` tells a gate the case's strides (``logits_strides``, and ``bias_stride`` with a bias);
  ``Candidate.covers`` passes them only to a gate that takes them (an older gate serves every layout), and a
  ``**kwargs`` wrapper around a gate that takes some options but not the layouts keeps those options;
- ``kernels._args.serves_layout`` says exactly what ``check_route_args`` refuses;
- every built-in and engine candidate whose route checks its arguments that way declines those layouts in its
  gate, with its coverage saying so (never an ERROR on the pinned layout cases); those that read any layout
  (the oracle, torch-native, the models' routers) serve them; where the route runs here, gate and route agree;
- the prefill/decode view's tiled batch keeps the column stride and the transposed layout, and asks the base
  about the layout it really gets.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from contracts.candidates import Candidate, all_candidates, get_candidate, register
from contracts.candidates.batched import AT_LEAST, BELOW, _tile, _tiled_strides, batched, parse_batched
from contracts.cases import CaseSpec, build_case
from kernels._args import check_route_args, serves_layout

# The four layouts of the pinned cases, at 64 rows (bf16 logits and a bf16 bias: a pair every candidate serves).
LAYOUTS = {"contiguous": {}, "column_stride-2": {"column_stride": 2}, "transposed": {"transposed": True}, "bias_stride-2": {"bias_stride": 2}}


def _case(experts: int, topk: int, layout: str, rows: int = 64):
    return build_case(CaseSpec("random_bf16", 7, rows, experts, topk, bias_dtype="bf16", **LAYOUTS[layout]))


# ---------------------------------------------------------------- what a gate is told


def test_call_shape_tells_the_layouts_and_covers_passes_them_only_to_a_gate_that_takes_them():
    shape = _case(64, 4, "transposed").call_shape()
    assert shape["logits_strides"] == (1, 64) and shape["bias_stride"] == 1
    assert _case(64, 4, "bias_stride-2").call_shape()["bias_stride"] == 2
    assert _case(64, 4, "column_stride-2").call_shape(rows=8)["logits_strides"] == (128, 2)
    no_bias = build_case(CaseSpec("random_fp32", 7, 4, 64, 4, bias=False)).call_shape()
    assert "bias_stride" not in no_bias and no_bias["logits_strides"] == (64, 1)

    asked = []

    def new_gate(*, rows, experts, topk, dtype, bias_dtype, logits_strides=None, bias_stride=None):
        asked.append((logits_strides, bias_stride))
        return logits_strides[1] == 1

    def old_gate(*, rows, experts, topk, dtype, bias_dtype, renormalize=True):  # TypeError on any other keyword
        return renormalize

    def wrapper(**kwargs):  # a lazy wrapper: no signature to filter by
        return old_gate(**kwargs)

    assert Candidate(name="new", route=None, covered=new_gate).covers(**shape) is False and asked == [((1, 64), 1)]
    assert Candidate(name="old", route=None, covered=old_gate).covers(**shape) is True  # serves every layout
    for renormalize in (True, False):  # the wrapper is found to refuse the layouts, and still gets renormalize
        assert Candidate(name="wrapped", route=None, covered=wrapper).covers(**{**shape, "renormalize": renormalize}) is renormalize


def test_call_shape_tells_autocast_only_under_it_and_a_gate_that_takes_it_can_decline_the_context():
    plain = build_case(CaseSpec("random_fp32", 7, 4, 64, 4)).call_shape()
    under = build_case(CaseSpec("random_fp32", 7, 4, 64, 4, autocast="bf16")).call_shape()
    assert "autocast" not in plain and under["autocast"] == "bf16"

    def no_autocast(*, autocast=None, **_call):
        return autocast is None

    def old_gate(*, rows, experts, topk, dtype, bias_dtype):  # asked as before: it serves the context
        return True

    assert Candidate(name="ctx", route=None, covered=no_autocast).covers(**under) is False
    assert Candidate(name="ctx", route=None, covered=no_autocast).covers(**plain) is True
    assert Candidate(name="old", route=None, covered=old_gate).covers(**under) is True


def test_serves_layout_says_exactly_what_check_route_args_refuses():
    for rows, experts, (row_stride, col_stride), bias_stride, bias_contiguous in itertools.product(
            (1, 2, 5), (1, 6), ((6, 1), (12, 2), (1, 5), (3, 1), (13, 1)), (1, 2), (True, False)):  # fmt: skip
        width = max(row_stride * (rows - 1) + col_stride * (experts - 1) + 1, 1)
        scores = torch.zeros(width).as_strided((rows, experts), (row_stride, col_stride))
        bias = torch.zeros(2 * experts)[::bias_stride][:experts]
        try:
            check_route_args(scores, bias, 1, True, 1.0, bias_contiguous=bias_contiguous)
            took = True
        except ValueError as exc:
            assert "stride" in str(exc), exc
            took = False
        served = serves_layout(rows=rows, experts=experts, logits_strides=scores.stride(), bias_stride=bias.stride(0),
                               bias_contiguous=bias_contiguous)  # fmt: skip
        assert served == took, (rows, experts, scores.stride(), bias.stride(), bias_contiguous)
    assert serves_layout(rows=4, experts=8)  # not told: a dense layout


# ---------------------------------------------------------------- the candidates' gates

# (experts, topk) each candidate serves, and whether its route takes a bias of stride 2 (its argument check's
# bias_contiguous is False: the adapters, which read or copy the bias through torch). Every kernel of ours, the aiter
# adapter and its model, and every engine adapter refuse logits of column stride != 1 (kernels._args.check_route_args);
# the oracle, torch-native, the models' routers and the trainers' adapters read every layout.
DECLINING = {
    "radix4": (896, 16, False), "radix4-pdl": (896, 16, False), "radix4-serial": (896, 16, False),
    "radix4-serial-pdl": (896, 16, False), "serial": (896, 16, False), "block-argmax": (896, 16, False),
    "aiter": (896, 16, True), "aiter-model": (896, 16, True),
    "sglang-torch": (896, 16, True), "vllm-torch": (896, 16, True), "lmdeploy-torch": (896, 16, True),
    "sglang-radix": (896, 16, True), "sglang-radix-unsorted": (896, 16, True), "sglang-triton": (896, 16, True),
    "flashinfer-noaux": (384, 8, True),
}  # fmt: skip


def _ours() -> dict[str, Candidate]:
    """The built-in, engine and model candidates (not a test's, an entry point's or a batched one a test made)."""
    return {name: c for name, c in all_candidates().items()
            if (c.origin == "oracle" or c.origin.startswith("kernels.")) and parse_batched(name) is None}  # fmt: skip


def _covers(cand: Candidate, case) -> bool | None:
    try:
        return cand.covers(contract="aiter", **case.call_shape())
    except ImportError:  # a gate whose module needs what this host lacks
        return None


def test_every_candidate_of_ours_is_classified():
    ours = _ours()
    # the trainers' adapters (kernels/trainers) hand megatron-core and TE a contiguous copy of any layout
    serving = {name for name in ours if name in ("oracle", "torch-native", "te-fused") or name.startswith(("hf-", "mcore-"))}
    assert set(ours) == set(DECLINING) | serving, set(ours) ^ (set(DECLINING) | serving)


@pytest.mark.parametrize("name", sorted(DECLINING))
def test_a_candidate_whose_route_refuses_a_layout_declines_it_and_says_so(name):
    cand = get_candidate(name)
    experts, topk, any_bias_stride = DECLINING[name]
    answers = {layout: _covers(cand, _case(experts, topk, layout)) for layout in LAYOUTS}
    if answers["contiguous"] is None:
        pytest.skip(f"{name}'s gate does not load here")
    assert answers == {"contiguous": True, "column_stride-2": False, "transposed": False, "bias_stride-2": any_bias_stride}
    assert "column stride 1" in cand.coverage and ("bias of stride 1" in cand.coverage) != any_bias_stride, cand.coverage


def test_the_oracle_torch_native_and_the_models_routers_serve_every_layout():
    for name, cand in _ours().items():
        if name not in DECLINING:
            assert all(_covers(cand, _case(896, 16, layout)) for layout in LAYOUTS), name


@pytest.mark.parametrize("name", ["torch-native", "aiter-model", "serial", "oracle"])
def test_where_the_route_runs_here_the_gate_and_the_route_agree(name):
    cand = get_candidate(name)
    ok, why = cand.available("cpu")
    if not ok:
        pytest.skip(why)
    contract = "serial" if name == "serial" else "aiter"
    for layout in LAYOUTS:
        case = _case(896, 16, layout)
        served = cand.covers(contract=contract, **case.call_shape())
        try:
            cand.route_under(contract)(case.scores, case.bias, 16, True, 1.0)
            took = True
        except ValueError:
            took = False
        assert served == took, (name, layout, served, took)


# ---------------------------------------------------------------- the prefill/decode view


_ASKED: list[tuple] = []


def _layout_gate(*, rows, experts, topk, dtype, bias_dtype, logits_strides=None, bias_stride=None) -> bool:
    _ASKED.append((rows, logits_strides))
    return True


def _oracle_route(scores, bias, topk, renormalize, routed_scaling_factor):
    import oracle

    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor)


if "recording-layouts" not in all_candidates():
    register(Candidate(name="recording-layouts", route=_oracle_route, covered=_layout_gate, in_all=False,
                       description="the oracle, recording what its gate is asked"))  # fmt: skip


@pytest.mark.parametrize("layout", ["column_stride-2", "transposed"])
def test_the_tiled_batch_keeps_the_layout_and_the_base_is_asked_about_it(layout):
    case = _case(64, 4, layout, rows=5)
    tiled = _tile(case.scores, 16)
    assert tiled.stride() == _tiled_strides(case.scores.stride(), 64, 16) and tiled.stride(1) != 1
    assert torch.equal(tiled, case.scores.repeat(4, 1)[:16])
    base = get_candidate("recording-layouts")
    _ASKED.clear()
    assert batched(base, AT_LEAST, 16).covers(**case.call_shape()) and batched(base, BELOW, 4).covers(**case.call_shape())
    assert _ASKED == [(16, tiled.stride()), (3, case.scores.stride()), (2, case.scores.stride())], _ASKED
