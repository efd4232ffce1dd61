"""A correct answer to build misbehaviour on (the oracle's, under the aiter contract)."""

import itertools

import oracle


def correct(scores, bias, topk, renormalize, rsf):
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")


def counter():
    """Call numbers 1, 2, 3, ... (per process)."""
    return itertools.count(1).__next__
