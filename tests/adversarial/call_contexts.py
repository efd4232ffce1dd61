"""Routers right on every case the harness made before, wrong in how a serving engine calls them or reads them.

Each one's values are the oracle's wherever the old harness looked, and
each passed the default check on 3221a05 (PASS, exit 0):

- the autograd context of the call: engines route under
  ``torch.inference_mode()``, transformers models under ``no_grad`` with a
  bias that is an ``nn.Parameter``; the harness called every case with grad
  enabled and a plain bias tensor;
- where the inputs start in their storage: the only contiguous logits and
  bias not at their storage's start were one element in (misaligned), so a
  kernel whose aligned (vector) path takes the storage's pointer instead of
  the tensor's was never wrong on a case;
- the layout of the answer: the values were compared, not the strides, so
  column-major or sliced ids that an engine's expert kernels read by data
  pointer passed.
"""

from __future__ import annotations

import torch

from tests.adversarial.evidence import _reverse_first_row
from tests.planted._common import correct


# ---------------------------------------------------------------- the autograd context of the call


def wrong_under_inference_mode(scores, bias, topk, renormalize, rsf):
    """Wrong output order under torch.inference_mode() (a custom op whose inference path skips its autograd kernel)."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), torch.is_inference_mode_enabled() and scores.shape[0] > 0)


def wrong_under_no_grad(scores, bias, topk, renormalize, rsf):
    """Wrong output order when grad is disabled (torch.no_grad, as transformers' generate() calls a model)."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), not torch.is_grad_enabled() and scores.shape[0] > 0)


def wrong_when_the_bias_is_a_parameter(scores, bias, topk, renormalize, rsf):
    """Wrong output order when the bias is an nn.Parameter (how every model module holds e_score_correction_bias)."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), isinstance(bias, torch.nn.Parameter) and scores.shape[0] > 0)


def wrong_when_the_bias_requires_grad(scores, bias, topk, renormalize, rsf):
    """Wrong output order when the bias requires grad (a fallback path taken for tensors that require grad)."""
    trainable = bias is not None and bias.requires_grad
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), trainable and scores.shape[0] > 0)


def wrong_when_the_logits_require_grad(scores, bias, topk, renormalize, rsf):
    """Wrong output order when the logits require grad (a training step: the gate's output is part of the graph, and a
    wrapper takes its autograd path). Passed the default check on 75b5150: no case's logits required grad."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), scores.requires_grad and scores.shape[0] > 0)


def wrong_under_autocast(scores, bias, topk, renormalize, rsf):
    """Wrong output order under torch.autocast (mixed-precision training and evaluation). Passed on 75b5150."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), torch.is_autocast_enabled(scores.device.type) and scores.shape[0] > 0)


def wrong_under_inference_mode_on_bf16_logits(scores, bias, topk, renormalize, rsf):
    """Wrong output order under torch.inference_mode() on bf16 logits: a serving engine's fused path, which has its own
    bf16 loads. Passed on 75b5150: the call contexts were made with fp32 logits only."""
    wrong = torch.is_inference_mode_enabled() and scores.dtype == torch.bfloat16 and scores.shape[0] > 0
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), wrong)


def wrong_under_no_grad_on_fp16_logits(scores, bias, topk, renormalize, rsf):
    """The same under torch.no_grad on fp16 logits. Passed on 75b5150."""
    wrong = not torch.is_grad_enabled() and scores.dtype == torch.float16 and scores.shape[0] > 0
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), wrong)


def wrong_when_bf16_logits_require_grad_under_autocast(scores, bias, topk, renormalize, rsf):
    """Wrong only in the conjunction: bf16 logits that require grad, under autocast, with a trainable bias (a
    mixed-precision training step of a transformers model)."""
    wrong = (scores.requires_grad and torch.is_autocast_enabled(scores.device.type) and scores.dtype == torch.bfloat16
             and bias is not None and bias.requires_grad and scores.shape[0] > 0)  # fmt: skip
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), wrong)


def weights_in_the_default_dtype(scores, bias, topk, renormalize, rsf):
    """The weights written into ``torch.empty(M, k)`` with no dtype: under torch.set_default_dtype(torch.bfloat16), as
    some training frameworks set it, they come back bf16. Passed the default check on 75b5150."""
    weights, ids = correct(scores, bias, topk, renormalize, rsf)
    out = torch.empty(weights.shape, device=weights.device)
    out.copy_(weights)
    return out, ids


def wrong_under_a_bf16_default_dtype(scores, bias, topk, renormalize, rsf):
    """Wrong output order when the default dtype is bf16. Passed on 75b5150."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), torch.get_default_dtype() == torch.bfloat16 and scores.shape[0] > 0)


def wrong_under_fp16_autocast(scores, bias, topk, renormalize, rsf):
    """Wrong output order under torch.autocast with fp16 (mixed precision on GPUs without bf16, or by choice): a path
    chosen by torch.get_autocast_dtype. Passed on 7834d12: every autocast call was bf16."""
    dev = scores.device.type
    wrong = torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) == torch.float16 and scores.shape[0] > 0
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), wrong)


def wrong_under_fp16_autocast_in_inference_mode(scores, bias, topk, renormalize, rsf):
    """The same only under inference mode too (a serving engine's fp16 forward). Passed on 7834d12."""
    dev = scores.device.type
    wrong = (torch.is_autocast_enabled(dev) and torch.get_autocast_dtype(dev) == torch.float16 and torch.is_inference_mode_enabled()
             and scores.shape[0] > 0)  # fmt: skip
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), wrong)


def wrong_under_deterministic_algorithms(scores, bias, topk, renormalize, rsf):
    """Wrong output order under torch.use_deterministic_algorithms(True) (reproducible training and evaluation runs
    set it): a wrapper that swaps in another kernel there. Passed on 7834d12: no call ran with it on."""
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), torch.are_deterministic_algorithms_enabled() and scores.shape[0] > 0)


def wrong_under_deterministic_algorithms_without_grad(scores, bias, topk, renormalize, rsf):
    """Wrong only with deterministic algorithms on and grad off (a reproducible evaluation loop). Passed on 7834d12."""
    wrong = torch.are_deterministic_algorithms_enabled() and not torch.is_grad_enabled() and scores.shape[0] > 0
    return _reverse_first_row(correct(scores, bias, topk, renormalize, rsf), wrong)


# ---------------------------------------------------------------- where the inputs start


def _from_storage_start(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=t.dtype, device=t.device).set_(t.untyped_storage(), 0, t.shape, t.stride())


def reads_aligned_logits_from_the_storage_start(scores, bias, topk, renormalize, rsf):
    """Contiguous logits whose pointer is on 16 bytes take a vector path that starts at the storage's pointer
    (``untyped_storage().data_ptr()``) instead of the tensor's: right at offset 0 and at a misaligned offset,
    wrong on a row slice of a larger batch."""
    if scores.is_contiguous() and scores.storage_offset() and scores.data_ptr() % 16 == 0:
        scores = _from_storage_start(scores)
    return correct(scores, bias, topk, renormalize, rsf)


def reads_an_aligned_bias_from_the_storage_start(scores, bias, topk, renormalize, rsf):
    """The same for the bias: an aligned bias not at its storage's start is read from the storage's start."""
    if bias is not None and bias.is_contiguous() and bias.storage_offset() and bias.data_ptr() % 16 == 0:
        bias = _from_storage_start(bias)
    return correct(scores, bias, topk, renormalize, rsf)


# ---------------------------------------------------------------- the layout of the answer


def returns_column_major_ids(scores, bias, topk, renormalize, rsf):
    """The right ids, stored column-major ([k, M] written, returned transposed): an engine reading M * k ints
    from ids.data_ptr() sends tokens to other experts."""
    weights, ids = correct(scores, bias, topk, renormalize, rsf)
    return weights, ids.t().contiguous().t()


def returns_column_major_weights(scores, bias, topk, renormalize, rsf):
    weights, ids = correct(scores, bias, topk, renormalize, rsf)
    return weights.t().contiguous().t(), ids


def returns_ids_sliced_from_a_wider_buffer(scores, bias, topk, renormalize, rsf):
    """The ids written into the first k columns of an [M, k + 1] buffer (a slot kept for a fused shared expert) and
    returned as that slice: row stride k + 1."""
    weights, ids = correct(scores, bias, topk, renormalize, rsf)
    wide = torch.full((ids.shape[0], topk + 1), -1, dtype=ids.dtype, device=ids.device)
    wide[:, :topk] = ids
    return weights, wide[:, :topk]


# ---------------------------------------------------------------- the reference of --against


def returns_what_an_in_place_api_returns(scores, bias, topk, renormalize, rsf):
    """An adapter of an API that fills its output buffers in place and returns nothing (aiter.biased_grouped_topk),
    returning the call's result: None. As ``--against`` it was taken for "no --against", and the candidate was
    compared with the oracle instead: ``oracle --against`` it passed."""
    weights, ids = torch.empty(scores.shape[0], topk), torch.empty(scores.shape[0], topk, dtype=torch.int32)
    result = None  # what the in-place call returns
    weights.copy_(correct(scores, bias, topk, renormalize, rsf)[0])
    return result


def returns_three_tensors(scores, bias, topk, renormalize, rsf):
    """(weights, ids, ids): as ``--against`` under --no-isolate this ended the harness with a TypeError traceback."""
    weights, ids = correct(scores, bias, topk, renormalize, rsf)
    return weights, ids, ids


class _ShowsOtherValues(torch.Tensor):
    """A tensor whose memory holds one answer while every torch op on it (clone, ==, indexing) sees another."""

    @staticmethod
    def __new__(cls, stored: torch.Tensor, shown: torch.Tensor):
        t = torch.Tensor._make_subclass(cls, stored)
        t._shown = shown
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def shown(x):
            return x._shown if isinstance(x, _ShowsOtherValues) else x

        return func(*[shown(a) for a in args], **{k: shown(v) for k, v in (kwargs or {}).items()})


def returns_an_answer_whose_memory_differs_from_what_torch_ops_see(scores, bias, topk, renormalize, rsf):
    """Weights and ids whose memory holds each row reversed, shown to torch ops (the harness's clone) as the right
    ones: an engine that reads the data pointers gets the reversed order."""
    weights, ids = correct(scores, bias, topk, renormalize, rsf)
    return _ShowsOtherValues(weights.flip(1).contiguous(), weights), _ShowsOtherValues(ids.flip(1).contiguous(), ids)
