"""The built-in contracts (the lookup by name, contract or TOML path is ``_lookup``).

Choices the model code leaves open (it ranks with ``torch.topk``, whose tie
order is unspecified and which ranks NaN first) are fixed here the way the
kernels that implement these routers behave: ties to the lowest expert (and
group) index, NaN below every number so that a NaN logit never takes a
number's slot. ``docs/contracts_as_data.md`` says why for each.
"""

from __future__ import annotations

from ._clauses import ClauseName
from ._contracts import Contract

__all__ = ["BUILTIN_CONTRACTS", "CLAUSE_NAMES", "CONTRACTS", "SERIAL_SENTINEL"]

SERIAL_SENTINEL = -1e30

AITER = Contract(
    name="aiter",
    summary="AMD aiter-compatible routing (the Kimi-K3 radix-4 kernel): wave64 lane tie order, NaN last.",
    source="AMD aiter biased_grouped_topk, generic kernel, and the radix-4 kernel that replaces it (docs/contracts.md, contract aiter)",
    scoring="sigmoid", sigmoid_formula="correctly_rounded", score_precision="fp32", bias="ranks_only",
    tie_rule="aiter", nan_rule="last", floor=None,
    renormalize="guard", output_order="rank",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=4, near_tie_x_ulp=1.0,
    experts=896, topk=16, routed_scaling_factor=1.0,
)  # fmt: skip

SERIAL = Contract(
    name="serial",
    summary="The serial-scan router of a second engine: lowest-index ties, -1e30 sentinel, expert-0 fallback.",
    source="a second engine's serial-scan Kimi-K3 router and its bit-identical block-parallel argmax (docs/contracts.md, contract serial)",
    scoring="sigmoid", sigmoid_formula="expf", score_precision="fp32", bias="ranks_only",
    tie_rule="lowest", nan_rule="never", floor=SERIAL_SENTINEL,
    renormalize="eps", renorm_eps=1e-20, output_order="selection",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=4, near_tie_x_ulp=0.0,
    experts=896, topk=16, routed_scaling_factor=1.0,
)  # fmt: skip

DEEPSEEK_V3 = Contract(
    name="deepseek-v3",
    summary="DeepSeek-V3/R1 grouped noaux_tc routing as the serving engines run it: 8 groups, 4 kept, mask -inf.",
    source="SGLang 0.5.23 biased_grouped_topk_impl and vLLM 0.33 grouped_topk (docs/contracts.md, the other built-in contracts)",
    scoring="sigmoid", sigmoid_formula="correctly_rounded", score_precision="fp32", bias="ranks_only",
    n_group=8, topk_group=4, group_score="top2_sum", group_mask=-float("inf"), group_tie_rule="lowest",
    tie_rule="lowest", nan_rule="last", floor=None,
    renormalize="eps", renorm_eps=1e-20, output_order="any",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=4, near_tie_x_ulp=1.0,
    experts=256, topk=8, routed_scaling_factor=2.5,
)  # fmt: skip

DEEPSEEK_V3_REFERENCE = DEEPSEEK_V3.replace(
    name="deepseek-v3-reference",
    summary="DeepSeek-V3/R1 grouped noaux_tc routing as the model's reference code runs it: mask 0.0.",
    source="transformers modeling_deepseek_v3 and DeepSeek's own model code: masked experts score 0.0 (docs/contracts.md, the other built-in contracts)",
    group_mask=0.0,
)

QWEN3_MOE = Contract(
    name="qwen3-moe",
    summary="Qwen3-MoE softmax routing: fp32 softmax over 128 experts, top-8, normalized (norm_topk_prob).",
    source="Qwen3-MoE model code: softmax(logits) in fp32, top-k, divided by the chosen sum (docs/contracts.md, the other built-in contracts)",
    scoring="softmax", score_precision="fp32", bias="none",
    tie_rule="lowest", nan_rule="last", floor=None,
    renormalize="raw", output_order="rank",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=4, near_tie_x_ulp=1.0,
    experts=128, topk=8, routed_scaling_factor=1.0,
)  # fmt: skip

MIXTRAL = QWEN3_MOE.replace(
    name="mixtral",
    summary="Mixtral softmax routing: fp32 softmax over 8 experts, top-2, normalized.",
    source="Mixtral model code: softmax(logits) in fp32, top-2, divided by the chosen sum (docs/contracts.md, the other built-in contracts)",
    experts=8, topk=2,
)  # fmt: skip

GPT_OSS = Contract(
    name="gpt-oss",
    summary="gpt-oss routing: top-4 of the raw logits over 128 experts, then softmax over the 4 chosen.",
    source="gpt-oss model code: torch.topk of the router logits, softmax over the k chosen (docs/contracts.md, the other built-in contracts)",
    scoring="softmax_of_topk", score_precision="fp32", bias="none",
    tie_rule="lowest", nan_rule="last", floor=None,
    renormalize="raw", output_order="rank",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=0, near_tie_x_ulp=0.0,
    experts=128, topk=4, routed_scaling_factor=1.0, default_renormalize=False,
)  # fmt: skip

BUILTIN_CONTRACTS: dict[str, Contract] = {
    c.name: c for c in (AITER, SERIAL, DEEPSEEK_V3, DEEPSEEK_V3_REFERENCE, QWEN3_MOE, MIXTRAL, GPT_OSS)
}

# The contracts the harness checks today: its --contract choices and clause
# vocabulary stay these until it is wired for the grouped and softmax ones.
CONTRACTS: dict[str, Contract] = {name: BUILTIN_CONTRACTS[name] for name in ("aiter", "serial")}

CLAUSE_NAMES: tuple[ClauseName, ...] = tuple(dict.fromkeys(n for c in CONTRACTS.values() for n in c.clause_names))
