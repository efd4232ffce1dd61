"""Adapters: routers we do not write ourselves, behind the same call signature
``fn(scores, bias, topk, renormalize, routed_scaling_factor) -> (weights fp32, ids int32)``.

- ``torch_native``: the torch fallback of serving engines (docs/contracts.md#how-other-routers-differ).
- ``aiter_model``: a pure-torch behavioural model of AMD aiter's generic kernel.
"""
