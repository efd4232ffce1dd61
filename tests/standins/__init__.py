"""Test stand-ins for third-party routers that cannot run on this machine.

Nothing here is the real library. Each stand-in reproduces a library's call
signature and calling conventions (in-place outputs, argument checks) on top
of this project's behavioural model, so the adapters' argument handling and
the harness's plumbing can be tested on a CPU.

- ``aiter_standin``: aiter's ``biased_grouped_topk`` signature, implemented
  with ``kernels.adapters.aiter_model``.
- ``aiter_lowest_ties``: the same, but a hypothetical release that breaks
  ties to the lowest expert id (a planted drift for ``--against`` tests).
- ``candidates``: CPU candidates that run ``kernels.adapters.aiter`` over
  whichever module ``$ROUTER_AITER_MODULE`` names.
"""
