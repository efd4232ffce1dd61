"""Planted misbehaving candidates for the robustness tests.

Each module exposes ``route(scores, bias, topk, renormalize, routed_scaling_factor)``
and is loaded as ``--candidate tests.planted.MODULE:route``. Module-level call
counters let a candidate answer correctly a few times before it misbehaves, so
the tests can see that rows checked before a crash are kept. The counters are
per process: these candidates are meant to run in a worker (third-party
candidates are isolated by default).
"""
