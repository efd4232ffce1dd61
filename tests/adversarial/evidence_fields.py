"""Routers that pass on evidence a case never draws (issue 55): each is right wherever the old plan looked.

Plain callables ``fn(scores, bias, topk, renormalize, routed_scaling_factor, **call)``, loaded as
``tests.adversarial.evidence_fields:NAME``; ``tests/adversarial/test_evidence_classes.py`` checks them.
"""

import torch

import oracle
from contracts.candidates import Candidate


def _free(name: str):
    """The built-in contract ``name``, admitting every call option (the routers below take whatever they are given)."""
    return oracle.get_contract(name).replace(admitted_renormalize="any", admitted_scaling="any")


def gemma4_scale_ignored(scores, bias, topk, renormalize, rsf, *, expert_scale=None, **_):
    """Gemma 4's routing without its per-expert scale: right wherever the scale is all ones (captured logits)."""
    return oracle.route(scores, None, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="gemma4")


def _wrong_at_own_factor(name: str):
    own = oracle.get_contract(name).routed_scaling_factor

    def route(scores, bias, topk, renormalize, rsf, **call):
        """The contract's routing, but at the model's own routed_scaling_factor it scales by 1 (a constant folded
        wrongly for the model's config): the default plan drew 1.0, 2.5, 2.827 and pinned 0.375 and 16 only."""
        return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=1.0 if rsf == own else rsf,
                            contract=_free(name), **call)  # fmt: skip

    route.__name__ = f"{name}_wrong_at_own_factor"
    return route


deepseek_v4_wrong_at_1_5 = _wrong_at_own_factor("deepseek-v4")
longcat_wrong_at_6 = _wrong_at_own_factor("longcat-flash")


def _reverse_first_row(out, where):
    weights, ids = out
    if where:
        weights, ids = weights.clone(), ids.clone()
        ids[0], weights[0] = ids[0].flip(0), weights[0].flip(0)
    return weights, ids


def wrong_above_16384_rows(scores, bias, topk, renormalize, rsf):
    """Wrong output order in calls of more than 16,384 rows only (what a CPU run's bulk calls never exceed)."""
    out = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")
    return _reverse_first_row(out, scores.shape[0] > 16_384)


def wrong_at_max_batch(scores, bias, topk, renormalize, rsf):
    """Wrong output order in calls of exactly 1,025 rows or more (the tests' max batch) only."""
    out = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")
    return _reverse_first_row(out, scores.shape[0] >= 1025)


CALLS: list[int] = []  # the rows of every call of ``spy``, in order


def _spy(scores, bias, topk, renormalize, rsf):
    CALLS.append(int(scores.shape[0]))
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")


# A correct router that records the rows of each call; its largest call is 1,000 rows (bulk cases come in slices).
spy = Candidate(name="spy", route=_spy, max_rows=1000, contract="aiter")
