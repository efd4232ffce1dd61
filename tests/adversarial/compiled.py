"""A router compiled with ``torch.compile``: each case changes the call's configuration (renormalize, dtypes,
scaling, layout), so dynamo recompiles until its recompile limit and then runs the function eagerly."""

import torch
import torch._dynamo

# A lower limit than dynamo's default 8, so the test reaches it in a few cases; the mechanism is the same.
torch._dynamo.config.recompile_limit = 4


def _route(scores, bias, topk: int, renormalize: bool, rsf: float):
    sig = scores.float().sigmoid()
    ids = (sig + bias.float()).topk(topk, dim=1).indices
    w = sig.gather(1, ids)
    if renormalize:
        w = w / w.sum(1, keepdim=True)
    return w * rsf, ids.to(torch.int32)


route = torch.compile(_route, backend="eager")  # dynamo only: no inductor build, the recompiles are the same
