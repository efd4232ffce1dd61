"""The contract's weights as a differentiable function of the logits: the backward pass's reference.

The forward oracle (``_route``) computes through float64 with in-place steps
and 16-bit lookup tables, for bit-identical answers on every device; none of
that is differentiable, nor meant to be. The backward contract is the
derivative of the contract's *weight formula* at a given selection: the
selection itself (top-k, groups, ties, the bias's ranking) is piecewise
constant in the logits and has no gradient. So here:

- ``contract_weights(logits, bias, ids, ...)``: the contract's weights of the
  experts ``ids`` (in the order given), as plain autograd ops in the logits'
  dtype (float64 for the reference): the scoring, the gather, the
  renormalization by the contract's rule, the scaling factor. ``variant``
  replaces one step's derivative (the forward value is unchanged), for
  naming the step a router's backward gets wrong (``GRAD_VARIANTS``).
- ``reference_gradient(...)``: d<upstream, weights>/d(logits, bias) in
  float64 at the given selection (``GradReference``).
- ``differentiable_route(...)``: the oracle as a differentiable router: its
  ids from ``route``, its weights from ``contract_weights`` in fp32 (the
  ``oracle`` candidate of the backward check).

Imports only torch and this package (oracle/ never imports contracts/).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ._contracts import Contract
from ._lookup import get_contract
from ._route import renorm_denominator, renormalizes

__all__ = ["GRAD_VARIANTS", "GradReference", "contract_weights", "differentiable_route", "reference_gradient"]

# One step's derivative replaced, the forward value kept (a straight-through trick on that step alone). Each is a
# mistake a hand-written backward makes; the harness names the clause of the first one that explains a row.
GRAD_VARIANTS: dict[str, str] = {
    "contract": "the contract's own derivative",
    "renorm_detached": "the renormalization's denominator treated as a constant (sum.detach(): no quotient rule)",
    "score_identity": "the score function's derivative taken as 1 (straight through the sigmoid / softmax)",
    "score_value": "the score function's derivative taken as the score itself (s instead of s * (1 - s))",
    "score_diagonal": "the softmax's derivative without its cross terms (p * (1 - p) on the diagonal only)",
}


def _replace_derivative(value: torch.Tensor, x: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:
    """``value`` forward, ``slope * dx`` backward (elementwise): one step's derivative swapped for another."""
    return value.detach() + (x - x.detach()) * slope.detach()


def _sigmoid(x: torch.Tensor, variant: str) -> torch.Tensor:
    s = torch.sigmoid(x)
    if variant == "score_identity":
        return _replace_derivative(s, x, torch.ones_like(s))
    if variant == "score_value":
        return _replace_derivative(s, x, s)
    return s


def _softmax(x: torch.Tensor, variant: str) -> torch.Tensor:
    p = torch.softmax(x, dim=1)
    if variant == "score_identity":
        return _replace_derivative(p, x, torch.ones_like(p))
    if variant == "score_diagonal":
        return _replace_derivative(p, x, p * (1 - p))
    if variant == "score_value":
        return _replace_derivative(p, x, p)
    return p


def _scores(x: torch.Tensor, c: Contract, variant: str) -> torch.Tensor:
    """[M, E] expert scores of the contract's scoring (the *_of_topk scorings: the logits, scored after the gather)."""
    if c.scoring == "sigmoid":
        return _sigmoid(x, variant)
    if c.scoring == "softmax":
        return _softmax(x, variant)
    if c.scoring == "sqrt_softplus":
        return torch.nn.functional.softplus(x).sqrt()
    if c.scoring == "softcap_sigmoid":
        return _sigmoid(torch.tanh(x / c.softcap) * c.softcap, variant)
    return x


def contract_weights(logits: torch.Tensor, bias: torch.Tensor | None, ids: torch.Tensor, *, contract: str | Contract,
                     renormalize: bool, routed_scaling_factor: float, variant: str = "contract") -> torch.Tensor:  # fmt: skip
    """``[M, k]`` (``k + 1`` with a shared-expert slot): the contract's weights of experts ``ids`` ``[M, k]`` (in that
    column order), differentiable in ``logits`` ``[M, E]`` (and ``bias`` under ``bias="in_weight"``), in the logits'
    dtype. The selection is taken as given: it has no derivative."""
    if variant not in GRAD_VARIANTS:
        raise ValueError(f"variant={variant!r}; use one of {', '.join(GRAD_VARIANTS)}")
    c = get_contract(contract)
    ids = ids.long()
    scores = _scores(logits, c, variant)
    if c.bias == "in_weight" and bias is not None:
        scores = scores + bias.to(scores.dtype)  # the one contract family whose weights hold the bias
    w = scores.gather(1, ids)
    if c.scoring == "softmax_of_topk":
        w = _softmax(w, variant)
    elif c.scoring == "sigmoid_of_topk":
        w = _sigmoid(w, variant)
    rsf = float(routed_scaling_factor)
    if renormalizes(c, renormalize, ids.shape[1]):  # renormalize_when, as the route reads it
        if c.renormalize == "lp":
            denom = w.abs().pow(c.renorm_p).sum(dim=1, keepdim=True).pow(1.0 / c.renorm_p)
        else:
            denom = renorm_denominator(w.sum(dim=1, keepdim=True), c)
        if variant == "renorm_detached":
            denom = denom.detach()
        w = w / denom
    w = w * rsf
    if c.shared_expert_slot == "last":  # the shared expert's weight: the routed weights' sum over the factor
        w = torch.cat((w, w.sum(dim=1, keepdim=True) / rsf), dim=1)
    return w


@dataclass(frozen=True)
class GradReference:
    """d<upstream, weights> in float64 at a fixed selection: ``logits`` ``[M, E]``; ``bias`` ``[E]`` (None: no bias
    was given). Rows are independent: row r of ``logits`` depends on row r of the upstream only."""

    logits: torch.Tensor
    bias: torch.Tensor | None


def reference_gradient(logits: torch.Tensor, bias: torch.Tensor | None, ids: torch.Tensor, upstream: torch.Tensor, *,
                       contract: str | Contract, renormalize: bool, routed_scaling_factor: float,
                       variant: str = "contract") -> GradReference:  # fmt: skip
    """The float64 gradient of ``sum(upstream * contract_weights(...))`` with respect to the logits and the bias."""
    x = logits.detach().double().requires_grad_(True)
    b = bias.detach().double().requires_grad_(True) if bias is not None else None
    with torch.enable_grad():
        w = contract_weights(x, b, ids, contract=contract, renormalize=renormalize,
                             routed_scaling_factor=routed_scaling_factor, variant=variant)  # fmt: skip
        inputs = (x,) if b is None else (x, b)
        grads = torch.autograd.grad(w, inputs, grad_outputs=upstream.detach().double(), allow_unused=True)
    gx = grads[0] if grads[0] is not None else torch.zeros_like(x)
    gb = None
    if b is not None:
        gb = grads[1] if grads[1] is not None else torch.zeros_like(b)  # ranks only: no path from the bias to a weight
    return GradReference(gx.detach(), None if gb is None else gb.detach())


def differentiable_route(scores: torch.Tensor, bias: torch.Tensor | None, topk: int, renormalize: bool | None = None,
                         routed_scaling_factor: float | None = None, *, contract: str | Contract = "aiter",
                         num_expert_group: int | None = None, topk_group: int | None = None):  # fmt: skip
    """The oracle with a backward: ``route``'s ids (its selection, exactly), and weights ``contract_weights`` of them
    in fp32, differentiable in ``scores``. Its forward weights agree with ``route``'s to the contract's tolerance
    (``route`` rounds once from float64; this computes in fp32)."""
    from ._route import route  # here: _route imports much; this module stays cheap to import

    c = get_contract(contract)
    renormalize = c.default_renormalize if renormalize is None else renormalize
    rsf = c.routed_scaling_factor if routed_scaling_factor is None else routed_scaling_factor
    with torch.no_grad():
        _, ids = route(scores.detach(), None if bias is None else bias.detach(), topk, renormalize=renormalize,
                       routed_scaling_factor=rsf, contract=c, num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    routed = ids[:, :topk]  # a shared-expert slot's id (E) is no logit's column; contract_weights adds it again
    w = contract_weights(scores.float(), None if bias is None else bias.float(), routed, contract=c,
                         renormalize=renormalize, routed_scaling_factor=rsf)  # fmt: skip
    return w, ids
