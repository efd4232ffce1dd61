"""A capture's logits as a Megatron trainer ranks them: in bf16, with a trained-looking correction bias.

transformers' ``DeepseekV3TopkRouter`` computes its logits in fp32, so a capture holds fp32 logits; a Megatron-core
trainer without ``moe_router_dtype = fp32`` gets the gate's output in the model's bf16. A random-weight model's
correction bias is all zeros (a check on it is NOT COVERED for the bias), so a small random one stands in for a
trained bias. Usage (docs/training.md#train-versus-serve):

    python examples/train_serve/as_trainer_sees_it.py tiny.safetensors tiny-bf16.safetensors
"""

from __future__ import annotations

import json
import sys

import torch
from safetensors import safe_open

from contracts.run.capture import save_trace


def main(src: str, dst: str, seed: int = 1) -> None:
    with safe_open(src, "pt") as h:
        names = json.loads((h.metadata() or {}).get("layer_names", "null"))
        logits = h.get_tensor("logits")
    g = torch.Generator().manual_seed(seed)
    bias = torch.randn(logits.shape[0], logits.shape[-1], generator=g) * 0.05  # [layers, E], as a trained bias is small
    save_trace(dst, logits=logits.bfloat16(), bias=bias, layer_names=names)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
