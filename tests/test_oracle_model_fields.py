"""The contract fields the released routers need, pinned on named cases (the random-contract properties in
test_oracle_fields.py compare them with the plain reference): per-expert scale, shared expert slot, L_p
renormalization, the scorings' edge values, the zero-computation experts, and their validation."""

from __future__ import annotations

import math

import pytest
import torch

import oracle

GEMMA4 = oracle.get_contract("gemma4")


def test_the_per_expert_scale_multiplies_each_chosen_weight_last():
    x = torch.randn(8, GEMMA4.experts, generator=torch.Generator().manual_seed(1))
    plain, ids = oracle.route(x, None, GEMMA4.topk, contract=GEMMA4)
    scale = torch.linspace(0.5, 2.0, GEMMA4.experts)
    scaled, ids2 = oracle.route(x, None, GEMMA4.topk, contract=GEMMA4, expert_scale=scale)
    assert torch.equal(ids, ids2) and torch.equal(scaled, plain * scale[ids.long()])
    with pytest.raises(oracle.RoutingArgumentError, match=r"expert_scale=\(3,\) must be a tensor of shape \[128\]"):
        oracle.route(x, None, GEMMA4.topk, contract=GEMMA4, expert_scale=torch.ones(3))
    with pytest.raises(oracle.RoutingArgumentError, match="has no per-expert weight scale"):
        oracle.route(x[:, :64], torch.zeros(64), 6, contract="ernie4.5", expert_scale=torch.ones(64))


def test_the_shared_expert_takes_the_last_slot_with_the_routed_sum_over_rsf():
    c = oracle.get_contract("kimi-k2").replace(name="kimi-k2-shared", shared_expert_slot="last")
    x = torch.randn(5, 384, generator=torch.Generator().manual_seed(2))
    bias = torch.zeros(384)
    w, ids = oracle.route(x, bias, 8, contract=c, routed_scaling_factor=2.5)
    routed_w, routed_ids = oracle.route(x, bias, 8, contract="kimi-k2", routed_scaling_factor=2.5)
    assert w.shape == (5, 9) and (ids[:, -1] == 384).all()
    assert torch.equal(ids[:, :8], routed_ids) and torch.equal(w[:, :8], routed_w)
    torch.testing.assert_close(w[:, 8], torch.ones(5), rtol=1e-6, atol=0)  # sum 2.5 / rsf 2.5


def test_lp_renormalization_divides_by_the_p_norm():
    c = oracle.get_contract("dbrx").replace(name="dbrx-p2", renorm_p=2.0)
    x = torch.randn(6, 16, generator=torch.Generator().manual_seed(3))
    w, _ = oracle.route(x, None, 4, contract=c)
    torch.testing.assert_close(w.double().norm(p=2, dim=1), torch.ones(6, dtype=torch.float64), rtol=1e-6, atol=0)
    w1, _ = oracle.route(x, None, 4, contract="dbrx")
    torch.testing.assert_close(w1.double().sum(1), torch.ones(6, dtype=torch.float64), rtol=1e-6, atol=0)


def test_scoring_edge_values():
    x = torch.tensor([[math.inf, -math.inf, 0.0, 30.0, -30.0, math.nan, 1.0, -1.0]])
    s, _ = oracle.ranking_values(x, None, oracle.get_contract("deepseek-v4").replace(name="v4-nobias", bias="none"))
    assert s[0, 0] == math.inf and s[0, 1] == 0 and math.isnan(s[0, 5])
    assert s[0, 2] == pytest.approx(math.sqrt(math.log(2)), rel=1e-7) and s[0, 3] == pytest.approx(math.sqrt(30.0), rel=1e-7)
    soft = oracle.get_contract("aiter").replace(name="laguna-like", scoring="softcap_sigmoid", softcap=5.0)
    s, _ = oracle.ranking_values(x, torch.zeros(8), soft)
    cap = 1 / (1 + math.exp(-5.0))
    assert s[0, 0] == pytest.approx(cap, rel=1e-7) and s[0, 1] == pytest.approx(1 - cap, rel=1e-6) and math.isnan(s[0, 5])


def test_llama4_ranks_the_logits_and_weighs_the_chosen_sigmoid():
    x = torch.tensor([[0.5, 3.0, -1.0, 3.0]])
    w, ids = oracle.route(x, None, 1, contract=oracle.get_contract("llama4").replace(name="l4", experts=4))
    assert ids.tolist() == [[1]] and w[0, 0] == pytest.approx(1 / (1 + math.exp(-3.0)), rel=1e-7)


@pytest.mark.parametrize("change, fragments", [
    (dict(scoring="softcap_sigmoid"), ["softcap=0.0", "cap > 0"]),
    (dict(softcap=3.0), ["softcap=3.0", "no other scoring"]),
    (dict(scoring="sigmoid_of_topk"), ["bias='ranks_only'", "raw logits"]),
    (dict(renormalize="lp", renorm_p=0.5), ["renorm_p=0.5", "p >= 1"]),
    (dict(zero_experts=896), ["zero_experts=896", "< experts=896"]),
    (dict(weight_scale="learned"), ["weight_scale='learned'", "'none', 'per_expert'"]),
    (dict(shared_expert_slot="first"), ["shared_expert_slot='first'", "'none', 'last'"]),
    (dict(admitted_scaling="none"), ["admitted_scaling='none'", "'any', 'default'"]),
])  # fmt: skip
def test_new_fields_are_validated_in_one_line(change, fragments):
    with pytest.raises(oracle.ContractError) as info:
        oracle.get_contract("aiter").replace(name="x", **change)
    message = str(info.value)
    assert "\n" not in message and all(f in message for f in fragments), message


def test_zero_experts_route_like_any_other():
    c = oracle.get_contract("longcat-flash")
    x = torch.randn(4, c.experts, generator=torch.Generator().manual_seed(4))
    x[:, -1] = 20.0  # a zero-computation expert with the largest logit is chosen
    _, ids = oracle.route(x, torch.zeros(c.experts), c.topk, contract=c)
    assert (ids == c.experts - 1).any(1).all() and c.zero_experts == 256
