"""One test per contract clause, on a case built to exercise it, asserting exact ids."""

import math

import pytest
import torch

import oracle

E, K = 896, 16


def _route(scores, bias=None, topk=K, contract="aiter", renormalize=True, rsf=1.0):
    if bias is None:
        bias = torch.zeros(scores.shape[1])
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=contract)


def _row(values):
    return torch.tensor([values], dtype=torch.float32)


def test_contract_clause_names_are_the_fixed_vocabulary():
    common = ["validity", "selection", "tie_order", "nan_last", "signed_zero", "output_order",
              "bias_in_weight", "renorm_guard", "renormalization", "scaling", "weight_accuracy"]  # fmt: skip
    assert list(oracle.CONTRACTS["aiter"].clause_names) == common
    assert list(oracle.CONTRACTS["serial"].clause_names) == common + ["sentinel_fallback"]
    for c in oracle.CONTRACTS.values():
        assert all(cl.statement.strip() for cl in c.clauses)
        assert ("softmax_scope" in c.clause_names) == (c.scoring in ("softmax", "softmax_of_topk"))  # a sigmoid has no set to take it over


@pytest.mark.parametrize("contract", ["aiter", "serial"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_validity_shapes_dtypes_and_inputs_untouched(contract, dtype):
    scores = torch.randn(37, E).to(dtype)
    bias = torch.randn(E) * 0.1
    before = (scores.clone(), bias.clone())
    w, ids = _route(scores, bias, contract=contract)
    assert w.dtype == torch.float32 and ids.dtype == torch.int32
    assert w.shape == ids.shape == (37, K)
    assert int(ids.min()) >= 0 and int(ids.max()) < E
    assert all(len(set(r)) == K for r in ids.tolist())
    assert torch.equal(scores, before[0]) and torch.equal(bias, before[1])


@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_selection_picks_largest_ranking_values(contract):
    scores = torch.full((1, 64), -5.0)
    winners = [3, 60, 17, 41]
    for rank, e in enumerate(winners):
        scores[0, e] = 4.0 - rank
    _, ids = _route(scores, topk=4, contract=contract)
    assert ids[0].tolist() == winners


@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_selection_uses_bias_for_ranking(contract):
    scores = torch.zeros(1, 8)
    bias = torch.tensor([0.0, 0.0, 0.0, 0.5, 0.0, 0.0, 0.25, 0.0])
    _, ids = _route(scores, bias, topk=2, contract=contract)
    assert ids[0].tolist() == [3, 6]


def test_nan_last_nan_ranks_below_minus_inf_aiter():
    # Row: 4 finite, 2 -inf, rest NaN; topk 6 must take the 4 finite then the 2 -inf, never NaN.
    values = [float("nan")] * 16
    values[5], values[9], values[2], values[11] = 1.0, 0.5, 0.25, 0.125
    values[7], values[14] = -math.inf, -math.inf
    _, ids = _route(_row(values), topk=6)
    assert ids[0, :4].tolist() == [5, 9, 2, 11]
    assert sorted(ids[0, 4:].tolist()) == [7, 14]


def test_nan_last_nan_fills_remaining_slots_by_priority_aiter():
    values = [float("nan")] * 16
    values[3] = 0.0
    _, ids = _route(_row(values), topk=4)
    prio = oracle.tie_priority(16, "aiter")
    nan_experts = sorted((e for e in range(16) if e != 3), key=lambda e: int(prio[e]))
    assert ids[0].tolist() == [3] + nan_experts[:3]


def test_nan_last_serial_never_takes_nan():
    values = [float("nan")] * 8
    values[6] = -1.0
    w, ids = _route(_row(values), topk=3, contract="serial")
    assert ids[0].tolist() == [6, 0, 0]


@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_signed_zero_minus_zero_ties_with_plus_zero(contract):
    # sigmoid(-200) is exactly 0.0; with bias -0.0 the ranking value is 0.0 + -0.0.
    scores = torch.full((1, 8), -30.0)  # sig ~ 9e-14, tiny positive
    bias = torch.full((8,), -1.0)
    scores[0, 5] = -200.0  # sig == 0.0 exactly
    bias[5] = -0.0  # ranking = 0.0 + -0.0 = +0.0
    scores[0, 2] = -200.0
    bias[2] = 0.0
    sig, ranking = oracle.ranking_values(scores, bias, contract)
    assert ranking[0, 5] == 0 and ranking[0, 2] == 0
    _, ids = _route(scores, bias, topk=1, contract=contract)
    rule = oracle.get_contract(contract).tie_rule
    prio = oracle.tie_priority(8, rule)
    expected = 5 if prio[5] < prio[2] else 2
    assert ids[0].tolist() == [expected]


def test_signed_zero_keys_are_equal():
    keys = oracle.rank_keys(torch.tensor([-0.0, 0.0, -1e-45, 1e-45, -math.inf, math.nan]))
    assert keys[0] == keys[1]
    assert keys[2] < keys[0] < keys[3]
    assert keys[5] < keys[4]


def test_output_order_aiter_is_key_desc_then_priority():
    values = [0.0] * 16
    for e in (1, 2, 13, 14):
        values[e] = 1.0
    values[7] = 2.0
    _, ids = _route(_row(values), topk=5)
    prio = oracle.tie_priority(16, "aiter")
    tied = sorted((1, 2, 13, 14), key=lambda e: int(prio[e]))
    assert ids[0].tolist() == [7] + tied


def test_output_order_serial_is_selection_order():
    values = [0.0] * 16
    for e in (1, 2, 13, 14):
        values[e] = 1.0
    values[7] = 2.0
    _, ids = _route(_row(values), topk=5, contract="serial")
    assert ids[0].tolist() == [7, 1, 2, 13, 14]


@pytest.mark.parametrize("contract", ["aiter", "serial"])
def test_bias_in_weight_weights_exclude_bias(contract):
    scores = torch.randn(4, 32)
    bias = torch.randn(32)
    w, ids = _route(scores, bias, topk=4, contract=contract, renormalize=False)
    sig, _ = oracle.ranking_values(scores, bias, contract)
    assert torch.equal(w, sig.gather(1, ids.long()))


def test_renorm_guard_aiter_zero_sum_is_not_divided():
    scores = torch.full((1, 8), -200.0)  # every sigmoid is exactly 0
    w, ids = _route(scores, topk=3, rsf=2.5)
    assert torch.equal(w, torch.zeros(1, 3))
    assert not torch.isnan(w).any()


def test_renorm_guard_aiter_nan_sum_is_not_divided():
    values = [float("nan")] * 8
    values[0] = 3.0
    w, ids = _route(_row(values), topk=2)
    sig0 = torch.sigmoid(torch.tensor(3.0))
    assert w[0, 0] == sig0 and torch.isnan(w[0, 1])


def test_renorm_guard_serial_adds_1e20():
    scores = torch.full((1, 8), -200.0)
    w, ids = _route(scores, topk=3, contract="serial")
    assert ids[0].tolist() == [0, 1, 2]
    assert torch.equal(w, torch.zeros(1, 3))


@pytest.mark.parametrize("contract", ["aiter", "serial"])
@pytest.mark.parametrize("rsf", [1.0, 2.5, 2.827])
def test_scaling_applied_once_after_renormalization(contract, rsf):
    scores = torch.randn(16, 64)
    w1, ids1 = _route(scores, topk=8, contract=contract, rsf=1.0)
    w2, ids2 = _route(scores, topk=8, contract=contract, rsf=rsf)
    assert torch.equal(ids1, ids2)
    assert torch.equal(w2, w1 * torch.tensor(rsf, dtype=torch.float32))
    assert torch.allclose(w2.sum(1), torch.full((16,), rsf), rtol=1e-5)


def test_weight_accuracy_matches_sigmoid_formula():
    x = torch.linspace(-20, 20, 4001).reshape(1, -1)
    sig_a, _ = oracle.ranking_values(x, torch.zeros(x.shape[1]), "aiter")
    sig_s, _ = oracle.ranking_values(x, torch.zeros(x.shape[1]), "serial")
    exact = 1.0 / (1.0 + torch.exp(-x.double()))
    for sig in (sig_a, sig_s):
        assert torch.allclose(sig.double(), exact, rtol=2e-7, atol=0)


def test_sentinel_fallback_serial_emits_expert_zero_and_counts_it_again():
    values = [-math.inf] * 8
    values[4], values[6] = 0.5, 0.25
    scores = torch.zeros(1, 8)
    bias = torch.tensor(values)
    w, ids = _route(scores, bias, topk=4, contract="serial")
    assert ids[0].tolist() == [4, 6, 0, 0]
    # sig = 0.5 for every expert; den = 4 * 0.5 = 2; each weight 0.25.
    assert torch.equal(w, torch.full((1, 4), 0.25))


def test_sentinel_fallback_values_at_or_below_sentinel_are_not_taken():
    scores = torch.zeros(1, 4)
    sig = 0.5
    bias = torch.tensor([-1e30 - sig, -2e30, 1.0, -1e29])  # expert 0: sig + bias rounds to -1e30, not above
    _, ids = _route(scores, bias, topk=4, contract="serial")
    assert ids[0].tolist() == [2, 3, 0, 0]
