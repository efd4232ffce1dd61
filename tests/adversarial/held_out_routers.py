"""Held-out adversary routers for issue 55's classes (tests/adversarial/test_held_out_55.py).

Each is a ``module:attr`` router (``--candidate tests.adversarial.held_out_routers:NAME``), right except where it attacks.
"""

import torch

from tests.planted._common import correct


def right(scores, bias, topk, renormalize, rsf, **groups):
    return correct(scores, bias, topk, renormalize, rsf)


class _Sub(torch.Tensor):
    pass


def subclassed(scores, bias, topk, renormalize, rsf, **groups):
    """The right values as a torch.Tensor subclass."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.as_subclass(_Sub), ids.as_subclass(_Sub)


def triple(scores, bias, topk, renormalize, rsf, **groups):
    """(weights, ids, extra): a tuple of three."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w, ids, None


def as_list(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return [w, ids]


def float_ids(scores, bias, topk, renormalize, rsf, **groups):
    """Ids as float32 values (exact integers)."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w, ids.float()


def ids_plus_2_32(scores, bias, topk, renormalize, rsf, **groups):
    """Ids int64, each + 2^32: the right id under an int32 reading."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w, ids.long() + 2**32


def ids_plus_2_31(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w, ids.long() + 2**31


def uint8_ids_wrap(scores, bias, topk, renormalize, rsf, **groups):
    """Ids as uint8: wrong where E > 256 (id mod 256)."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w, ids.to(torch.uint8)


def weights_view_of_input(scores, bias, topk, renormalize, rsf, **groups):
    """Weights written into the input's storage, returned as a view of the input."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    out = scores[:, : w.shape[1]]
    out.copy_(w.to(scores.dtype))
    return out, ids


def weights_float64(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.double(), ids


def weights_bool(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.bool(), ids


def weights_complex(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.to(torch.complex64), ids


def on_meta(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.to("meta"), ids.to("meta")


def transposed(scores, bias, topk, renormalize, rsf, **groups):
    """Non-contiguous [M, k] views (stride (1, M))."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.t().contiguous().t(), ids.t().contiguous().t()


def numpy_out(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w.numpy(), ids.numpy()


def extra_dim(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return w[None], ids[None]


def dict_out(scores, bias, topk, renormalize, rsf, **groups):
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    return {"weights": w, "ids": ids}
