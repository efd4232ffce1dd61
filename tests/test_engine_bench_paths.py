"""The engines' bench paths (``bench_launch``): the launch they time computes what ``route`` returns."""

from __future__ import annotations

import importlib

import pytest
import torch

from kernels.engines import ADAPTERS


@pytest.mark.parametrize("name", [n for n, a in ADAPTERS.items() if "cpu" in a.devices])
def test_a_cpu_engines_bench_launch_returns_what_its_route_returns(name):
    adapter = ADAPTERS[name]
    module = importlib.import_module(adapter.module)
    ok, why = module.available()
    if not ok:
        pytest.skip(f"{name} unavailable here: {why}")
    g = torch.Generator().manual_seed(7)
    scores = (torch.randn(5, 384, generator=g) * 2).to(torch.bfloat16)
    bias = (torch.randn(384, generator=g) * 0.05).to(torch.bfloat16)
    launch = getattr(module, adapter.bench)(scores, bias, 8, True, 2.5)
    expected_w, expected_ids = getattr(module, adapter.route)(scores, bias, 8, True, 2.5)
    for _ in range(2):  # the prepared launch runs again and again, as a server's forward does
        weights, ids = launch()
        assert torch.equal(ids.to(torch.int32), expected_ids) and torch.equal(weights.float(), expected_w)


def test_every_adapter_names_a_bench_path_its_module_has():
    for name, adapter in ADAPTERS.items():
        module = importlib.import_module(adapter.module)
        assert callable(getattr(module, adapter.bench, None)), f"{name}: {adapter.module}.{adapter.bench} is missing"
