"""Routers whose answers make the harness's own code raise (issue 55): each must end ERROR or FAIL, never PASS.

A broken router that makes the comparison raise would otherwise take the
whole run down with a traceback: its FAIL never written, no later
candidate checked, no index. ``tests/adversarial/test_harness_errors_adversary.py``
checks that the run survives it and that the router does not pass.
"""

import torch

import oracle


def nested_weights(scores, bias, topk, renormalize, routed_scaling_factor):
    """The oracle's right answer, with the weights handed back as a nested tensor (one row per component).

    Its values are right, but a nested tensor has no ``shape``: on torch 2.13 the in-process comparison's
    validity check raised ``RuntimeError: Internal error: NestedTensorImpl doesn't support sizes`` on it
    (main at c7e47c9, under ``--no-isolate``), and the run ended with that traceback.
    """
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor, contract="aiter")
    return torch.nested.nested_tensor(list(w)), ids
