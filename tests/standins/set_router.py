"""A DeepSeek-V3 router that is right but for one expert, and answers in its own column order.

``one_expert_off``: the oracle's answer with the columns reversed (free under ``deepseek-v3``, whose output order is
"any") and its lowest-ranked expert replaced by the lowest expert it did not choose, with the same weight. Each row
then differs from the contract by exactly one expert: seven matched with equal weights, one missing, one extra.
"""

from __future__ import annotations

import torch

import oracle


def one_expert_off(scores, bias, topk, renormalize, routed_scaling_factor, *, num_expert_group, topk_group):
    weights, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=routed_scaling_factor,
                                contract="deepseek-v3", num_expert_group=num_expert_group, topk_group=topk_group)  # fmt: skip
    ids = ids.long().clone()
    chosen = torch.zeros(ids.shape[0], scores.shape[1], dtype=torch.bool, device=ids.device).scatter_(1, ids, True)
    ids[:, -1] = (~chosen).int().argmax(1)  # the lowest expert not chosen
    return weights.flip(1).contiguous(), ids.flip(1).to(torch.int32).contiguous()
