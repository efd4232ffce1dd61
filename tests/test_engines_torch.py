"""The engines' torch routers, loaded from their installed files, against plain references (docs/contracts.md#how-other-routers-differ).

What is asserted, per engine (SGLang 0.5.23, vLLM 0.33.0, lmdeploy 0.18.0):
- each loads from its installed file and routes a batch like a plain fp32
  reference (ids as a set, weights per id), at 896/16 and 384/8;
- bf16 logits get the sigmoid and ranking in bf16, which picks other
  experts than an fp32 sigmoid on many random rows;
- a zero sum: NaN weights in vLLM (the raw sum), zeros in SGLang and lmdeploy
  (``sum + 1e-20``), and that epsilon's effect on a tiny sum;
- ``torch.topk(sorted=False)`` output order;
- grouped routing: SGLang and vLLM mask dropped groups with -inf, lmdeploy
  with 0.0, so a negative bias lets lmdeploy pick masked experts.

An engine that is not installed skips with the reason (``available()``'s
one line: the package, version or file and the install command).
"""

from __future__ import annotations

import os

import pytest
import torch

from kernels import engines
from kernels.engines import lmdeploy_torch, sglang_torch, vllm_torch

ENGINES = {"sglang": sglang_torch, "vllm": vllm_torch, "lmdeploy": lmdeploy_torch}
EPSILON = {"sglang": 1e-20, "vllm": 0.0, "lmdeploy": 1e-20}  # what each adds to the renormalizing sum


@pytest.fixture(params=list(ENGINES))
def engine(request):
    module = ENGINES[request.param]
    ok, why = module.available()
    if not ok:
        pytest.skip(f"{request.param} unavailable: {why}")
    return request.param, module


def _by_id(weights, ids):
    order = ids.long().argsort(dim=1)
    return weights.gather(1, order), ids.long().gather(1, order)


def _reference(x, bias, k, rs, eps):
    """Plain fp32 routing: sigmoid, + bias for the choice, top-k, weights sig / (sum + eps) * rs."""
    sig = torch.sigmoid(x.float())
    ids = torch.topk(sig + bias.float(), k, dim=1).indices
    w = sig.gather(1, ids)
    return w / (w.sum(dim=1, keepdim=True) + eps) * rs, ids


@pytest.mark.parametrize("shape", [(896, 16), (384, 8)], ids=["k3", "k2"])
def test_routes_like_a_plain_fp32_reference(engine, shape):
    name, module = engine
    E, k = shape
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(32, E, generator=gen)
    bias = torch.randn(E, generator=gen) * 0.01
    weights, ids = module.route(x, bias, k, True, 2.5)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32 and weights.shape == ids.shape == (32, k)
    ref_w, ref_ids = _reference(x, bias, k, 2.5, EPSILON[name])
    w_sorted, ids_sorted = _by_id(weights, ids)
    ref_w_sorted, ref_ids_sorted = _by_id(ref_w, ref_ids)
    assert torch.equal(ids_sorted, ref_ids_sorted)
    torch.testing.assert_close(w_sorted, ref_w_sorted, rtol=1e-6, atol=1e-7)
    # Without renormalization the weights are the sigmoids, times the scaling factor.
    weights, ids = module.route(x, bias, k, False, 2.0)
    torch.testing.assert_close(weights, torch.sigmoid(x).gather(1, ids.long()) * 2.0, rtol=1e-6, atol=1e-7)


def test_bf16_logits_get_a_bf16_sigmoid(engine):
    name, module = engine
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(256, 896, generator=gen).bfloat16()
    bias = (torch.randn(896, generator=gen) * 0.01).bfloat16()
    _, ids = module.route(x, bias, 16, True, 1.0)
    got = ids.long().sort(dim=1).values
    bf16_choice = x.sigmoid() + bias  # the engine's arithmetic: bf16 sigmoid, bf16 add
    assert bf16_choice.dtype == torch.bfloat16
    assert torch.equal(got, torch.topk(bf16_choice, 16, dim=1, sorted=False).indices.sort(dim=1).values)
    fp32_ids = torch.topk(x.float().sigmoid() + bias.float(), 16, dim=1).indices.sort(dim=1).values
    differ = (got != fp32_ids).any(dim=1).float().mean().item()
    assert differ > 0.10, f"only {differ:.0%} of bf16 rows route differently from an fp32 sigmoid"


def test_sglang_as_served_upcasts_to_fp32():
    ok, why = sglang_torch.available()
    if not ok:
        pytest.skip(f"sglang unavailable: {why}")
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(64, 896, generator=gen).bfloat16()
    bias = torch.randn(896, generator=gen) * 0.01
    _, ids = sglang_torch.route_as_served(x, bias.bfloat16(), 16, True, 1.0)
    ref = torch.topk(x.float().sigmoid() + bias.bfloat16().float(), 16, dim=1).indices
    assert torch.equal(ids.long().sort(dim=1).values, ref.sort(dim=1).values)


def test_a_zero_sum_gives_nan_in_vllm_and_zero_with_the_epsilon(engine):
    name, module = engine
    x = torch.full((2, 896), -200.0)  # fp32 sigmoid(-200) is exactly 0
    weights, _ = module.route(x, torch.zeros(896), 16, True, 1.0)
    if name == "vllm":
        assert torch.isnan(weights).all(), "vLLM divides by the raw sum: 0 / 0"
    else:
        assert (weights == 0).all(), f"{name} divides by sum + 1e-20"


def test_the_epsilon_on_a_tiny_sum(engine):
    name, module = engine
    x = torch.full((1, 896), -48.0)  # sigmoid ~ 1.4e-21: the 16 sigmoids sum to ~2.3e-20
    weights, _ = module.route(x, torch.zeros(896), 16, True, 1.0)
    s = torch.sigmoid(torch.tensor(-48.0))
    expected = s / (s * 16 + EPSILON[name])  # vLLM: exactly 1/16; SGLang, lmdeploy: about 0.044
    torch.testing.assert_close(weights, expected.expand(1, 16), rtol=1e-6, atol=0.0)


def test_output_order_is_torch_topk_unsorted(engine):
    _, module = engine
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(16, 896, generator=gen)
    bias = torch.randn(896, generator=gen) * 0.01
    _, ids = module.route(x, bias, 16, True, 1.0)
    choice = torch.sigmoid(x) + bias
    assert torch.equal(ids.long(), torch.topk(choice, 16, dim=1, sorted=False).indices)
    ranked = choice.gather(1, ids.long())
    assert not (ranked[:, :-1] >= ranked[:, 1:]).all(), "torch.topk(sorted=False) on the CPU is not sorted"


def test_grouped_routing_mask_value(engine):
    name, module = engine
    # 16 experts in 4 groups, keep 1. Group 0 scores highest; the bias (-2) makes every choice negative,
    # so experts masked with 0.0 outrank the kept group, and experts masked with -inf do not.
    x = torch.full((1, 16), -1.0)
    x[0, :4] = 2.0
    bias = torch.full((16,), -2.0)
    _, ids = module.route(x, bias, 4, True, 1.0, num_expert_group=4, topk_group=1)
    chosen = set(ids[0].tolist())
    if name == "lmdeploy":
        assert chosen.isdisjoint({0, 1, 2, 3}), "lmdeploy masks dropped groups with 0.0"
    else:
        assert chosen == {0, 1, 2, 3}, f"{name} masks dropped groups with -inf"


def test_no_bias_routes_the_sigmoid_alone():
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, 384, generator=gen)
    ref = torch.topk(torch.sigmoid(x), 8, dim=1).indices.sort(dim=1).values
    for name in ("sglang", "vllm"):
        ok, why = ENGINES[name].available()
        if not ok:
            pytest.skip(f"{name} unavailable: {why}")
        _, ids = ENGINES[name].route(x, None, 8, True, 1.0)
        assert torch.equal(ids.long().sort(dim=1).values, ref), name
    with pytest.raises(ValueError, match="always takes a correction bias"):
        lmdeploy_torch.route(x, None, 8, True, 1.0)


@pytest.mark.slow  # torch.compile (inductor) of the published route: about 30 s on 2 cores
def test_sglang_published_torch_compile_version_runs():
    """route_compiled keeps the published @torch.compile(dynamic=True); about 30 s of inductor on 2 cores."""
    ok, why = sglang_torch.available()
    if not ok:
        pytest.skip(f"sglang unavailable: {why}")
    if os.environ.get("ROUTER_SKIP_TORCH_COMPILE"):
        pytest.skip("ROUTER_SKIP_TORCH_COMPILE is set")
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(8, 896, generator=gen)
    bias = torch.randn(896, generator=gen) * 0.01
    fn = sglang_torch.load(compiled=True)["biased_grouped_topk_impl"]
    assert fn is not sglang_torch.load()["biased_grouped_topk_impl"]
    w_c, ids_c = sglang_torch.route_compiled(x, bias, 16, True, 2.5)
    w_e, ids_e = sglang_torch.route(x, bias, 16, True, 2.5)
    assert torch.equal(ids_c.long().sort(dim=1).values, ids_e.long().sort(dim=1).values)
    torch.testing.assert_close(_by_id(w_c, ids_c)[0], _by_id(w_e, ids_e)[0], rtol=1e-6, atol=1e-7)


def test_engine_path_of_extracted_files_works_like_the_installed_package(tmp_path):
    """An unpacked copy of just the torch files, named with --engine-path, loads the same functions."""
    import shutil

    from kernels.engines import _locate

    for name, module in ENGINES.items():
        ok, why = module.available()
        if not ok:
            pytest.skip(f"{name} unavailable: {why}")
    files = {"sglang": [sglang_torch.FILE], "vllm": list(vllm_torch.FILES.values()),
             "lmdeploy": list(lmdeploy_torch.FILES.values())}  # fmt: skip
    for key, rels in files.items():
        for rel in rels:
            target = tmp_path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_locate.locate(key, rel), target)
    saved = os.environ.get(engines.ENV_ENGINE_PATH)
    engines.set_engine_path(str(tmp_path))
    try:
        x = torch.randn(4, 384)
        for name, module in ENGINES.items():
            ok, why = module.available()
            assert ok and f"--engine-path {tmp_path}" in why, why
            _, ids = module.route(x, torch.zeros(384), 8, True, 1.0)
            assert ids.shape == (4, 8)
    finally:
        engines.set_engine_path(saved)
