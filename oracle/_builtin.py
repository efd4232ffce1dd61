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

__all__ = ["BUILTIN_CONTRACTS", "CLAUSE_NAMES", "CONTRACTS", "MCORE_CONTRACTS", "MODEL_CONTRACTS", "SERIAL_SENTINEL"]

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
    source="SGLang 0.5.23 biased_grouped_topk_impl, vLLM 0.33 grouped_topk and transformers 5.24 models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3TopkRouter, all masking with -inf (docs/contracts.md, the other built-in contracts)",
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
    source="DeepSeek's own model code (the checkpoint repository's remote code) and lmdeploy 0.18: masked experts score 0.0, as in transformers 5.24's DeepSeek-V2 and Mistral4 routers; transformers' DeepSeek-V3 router masks with -inf: deepseek-v3 (docs/contracts.md, the other built-in contracts)",
    group_mask=0.0,
)

# The call options of the three below follow their transformers (5.24) router classes: Qwen3MoeTopKRouter divides
# by the sum when config.norm_topk_prob says so and has no routed_scaling_factor; MixtralTopKRouter always divides,
# with no factor; GptOssTopKRouter softmaxes over the k chosen (already summing to one) and never divides or scales.
QWEN3_MOE = Contract(
    name="qwen3-moe",
    summary="Qwen3-MoE softmax routing: fp32 softmax over 128 experts, top-8, normalized (norm_topk_prob).",
    source="transformers 5.24 models/qwen3_moe/modeling_qwen3_moe.py Qwen3MoeTopKRouter: softmax(logits) in fp32, top-k, divided by the chosen sum if norm_topk_prob (docs/contracts.md)",
    scoring="softmax", score_precision="fp32", bias="none",
    tie_rule="lowest", nan_rule="last", floor=None,
    renormalize="raw", output_order="rank",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=4, near_tie_x_ulp=1.0,
    experts=128, topk=8, routed_scaling_factor=1.0, admitted_scaling="default",
)  # fmt: skip

MIXTRAL = QWEN3_MOE.replace(
    name="mixtral",
    summary="Mixtral softmax routing: fp32 softmax over 8 experts, top-2, normalized.",
    source="transformers 5.24 models/mixtral/modeling_mixtral.py MixtralTopKRouter: softmax(logits) in fp32, top-2, always divided by the chosen sum (docs/contracts.md)",
    experts=8, topk=2, admitted_renormalize="default",
)  # fmt: skip

GPT_OSS = Contract(
    name="gpt-oss",
    summary="gpt-oss routing: top-4 of the raw logits over 128 experts, then softmax over the 4 chosen.",
    source="transformers 5.24 models/gpt_oss/modeling_gpt_oss.py GptOssTopKRouter: torch.topk of the router logits, softmax over the k chosen (docs/contracts.md)",
    scoring="softmax_of_topk", score_precision="fp32", bias="none",
    tie_rule="lowest", nan_rule="last", floor=None,
    renormalize="raw", output_order="rank",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=0, near_tie_x_ulp=0.0,
    experts=128, topk=4, routed_scaling_factor=1.0, default_renormalize=False,
    admitted_renormalize="default", admitted_scaling="default",
)  # fmt: skip

# ---------------------------------------------------------------- released model families
# Each follows the router class of the installed transformers (5.24) named in its source; shape defaults are
# the released checkpoint's (E / k / groups / routed_scaling_factor). The model's options decide what a call
# may pass: admitted_renormalize="default" where the code always (or never) renormalizes, admitted_scaling=
# "default" where it has no routed_scaling_factor (1.0 only). Ties and NaN as above (lowest, last).
_TF = "transformers 5.24"


def _model(name: str, summary: str, source: str, **fields) -> Contract:
    common = dict(tie_rule="lowest", nan_rule="last", floor=None, score_precision="fp32", sigmoid_formula="correctly_rounded",
                  weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=4, near_tie_x_ulp=1.0)  # fmt: skip
    return Contract(name=name, summary=summary, source=f"{_TF} {source}", **{**common, **fields})


def _sigmoid_bias(name, summary, source, **fields) -> Contract:
    """DeepSeek-V3-style noaux_tc: sig(x) + bias ranks, sig weights, / (sum + 1e-20), * rsf."""
    base = dict(scoring="sigmoid", bias="ranks_only", renormalize="eps", renorm_eps=1e-20, output_order="any")
    return _model(name, summary, source, **{**base, **fields})


def _softmax_topk(name, summary, source, **fields) -> Contract:
    """Qwen-style: softmax(x) in fp32 ranks and weighs, optionally / sum; no scaling factor."""
    base = dict(scoring="softmax", bias="none", renormalize="raw", output_order="rank", admitted_scaling="default")
    return _model(name, summary, source, **{**base, **fields})


DEEPSEEK_V4 = _sigmoid_bias(
    "deepseek-v4", "DeepSeek-V4 (Flash shape) routing: sqrt(softplus(x)) + bias ranks, ungrouped, / (sum + 1e-20) * 1.5.",
    "models/deepseek_v4/modeling_deepseek_v4.py DeepseekV4TopKRouter (checkpoint deepseek-ai/DeepSeek-V4-Flash-Base: 256 experts, top-6, rsf 1.5)",
    scoring="sqrt_softplus", near_tie_x_ulp=0.0, experts=256, topk=6, routed_scaling_factor=1.5, admitted_renormalize="default",
)  # fmt: skip
DEEPSEEK_V4_FLASH = DEEPSEEK_V4.replace(name="deepseek-v4-flash", summary="DeepSeek-V4-Flash: the deepseek-v4 contract at its shape, 256 experts, top-6, rsf 1.5.")
LLAMA4 = _model(
    "llama4", "Llama 4 routing: top-1 of the raw logits, weight sigmoid(chosen logit), no renormalization, no scaling.",
    "models/llama4/modeling_llama4.py Llama4Router (Llama 4 Scout: 16 experts, top-1; Maverick: 128, top-1)",
    scoring="sigmoid_of_topk", bias="none", renormalize="raw", output_order="rank", near_tie_ulp=0, near_tie_x_ulp=0.0,
    experts=16, topk=1, default_renormalize=False, admitted_renormalize="default", admitted_scaling="default",
)  # fmt: skip
GLM4_MOE = _sigmoid_bias(
    "glm4-moe", "GLM-4.5 (glm4_moe) routing: sigmoid + bias, 160 experts, top-8, ungrouped, / (sum + 1e-20) * 2.5.",
    "models/glm4_moe/modeling_glm4_moe.py Glm4MoeTopkRouter (GLM-4.5: 160 experts, top-8, 1 / 1 groups, rsf 2.5, norm_topk_prob)",
    experts=160, topk=8, routed_scaling_factor=2.5,
)  # fmt: skip
KIMI_K2 = _sigmoid_bias(
    "kimi-k2", "Kimi-K2 routing (the DeepSeek-V3 router): sigmoid + bias, 384 experts, top-8, ungrouped, rsf 2.827.",
    "models/deepseek_v3/modeling_deepseek_v3.py DeepseekV3TopkRouter (Kimi-K2 config: 384 experts, top-8, 1 / 1 groups, rsf 2.827)",
    experts=384, topk=8, routed_scaling_factor=2.827,
)  # fmt: skip
MINIMAX_M2 = _sigmoid_bias(
    "minimax-m2", "MiniMax-M2 routing: sigmoid + bias, 256 experts, top-8, always divided by the raw sum, no scaling.",
    "models/minimax_m2/modeling_minimax_m2.py MiniMaxM2TopKRouter (256 experts, top-8)",
    renormalize="raw", experts=256, topk=8, admitted_renormalize="default", admitted_scaling="default",
)  # fmt: skip
QWEN3_NEXT = _softmax_topk(
    "qwen3-next", "Qwen3-Next routing: fp32 softmax over 512 experts, top-10, normalized (norm_topk_prob).",
    "models/qwen3_next/modeling_qwen3_next.py Qwen3NextTopKRouter (512 experts, top-10, norm_topk_prob; weights cast to the logits' dtype)",
    experts=512, topk=10,
)  # fmt: skip
QWEN2_MOE = _softmax_topk(
    "qwen2-moe", "Qwen1.5/2-MoE routing: fp32 softmax over 60 experts, top-4, not normalized by default (norm_topk_prob).",
    "models/qwen2_moe/modeling_qwen2_moe.py Qwen2MoeTopKRouter (Qwen1.5-MoE-A2.7B: 60 experts, top-4, norm_topk_prob false)",
    experts=60, topk=4, default_renormalize=False,
)  # fmt: skip
OLMOE = _softmax_topk(
    "olmoe", "OLMoE routing: fp32 softmax over 64 experts, top-8, not normalized by default (norm_topk_prob).",
    "models/olmoe/modeling_olmoe.py OlmoeTopKRouter (OLMoE-1B-7B: 64 experts, top-8, norm_topk_prob false)",
    experts=64, topk=8, default_renormalize=False,
)  # fmt: skip
DBRX = _softmax_topk(
    "dbrx", "DBRX routing: softmax over 16 experts, top-4, weights divided by their L_p norm (p = 1).",
    "models/dbrx/modeling_dbrx.py DbrxFFN.route_tokens_to_experts (DBRX: 16 experts, top-4, moe_normalize_expert_weights 1; the softmax in the logits' dtype)",
    renormalize="lp", renorm_p=1.0, experts=16, topk=4,
)  # fmt: skip
GEMMA4 = _softmax_topk(
    "gemma4", "Gemma 4 MoE routing: fp32 softmax, top-8 of 128, normalized, then times a per-expert scale.",
    "models/gemma4/modeling_gemma4.py Gemma4TextRouter (128 experts, top-8: the MoE checkpoint's config; per_expert_scale)",
    weight_scale="per_expert", experts=128, topk=8, admitted_renormalize="default",
)  # fmt: skip
ERNIE4_5 = _softmax_topk(
    "ernie4.5", "ERNIE 4.5 MoE routing: fp32 softmax + a correction bias ranks (moe_statics), softmax weights / sum, 64 experts, top-6.",
    "models/ernie4_5_moe/modeling_ernie4_5_moe.py Ernie4_5_MoeTopKRouter (ERNIE-4.5-21B-A3B: 64 experts, top-6; sum clamped at moe_norm_min 1e-12)",
    bias="ranks_only", experts=64, topk=6, admitted_renormalize="default",
)  # fmt: skip
LONGCAT_FLASH = _model(
    "longcat-flash", "LongCat-Flash routing: softmax + bias over 512 routed and 256 zero-computation experts, top-12, no renormalization, * 6.",
    "models/longcat_flash/modeling_longcat_flash.py LongcatFlashTopkRouter (512 routed + 256 zero experts, top-12, rsf 6.0)",
    scoring="softmax", bias="ranks_only", renormalize="raw", output_order="any", experts=768, topk=12, zero_experts=256,
    routed_scaling_factor=6.0, default_renormalize=False, admitted_renormalize="default",
)  # fmt: skip
MISTRAL4 = _model(
    "mistral4", "Mistral 4 routing: grouped softmax (top-2 sum per group, dropped groups masked with 0.0), / (sum + 1e-20) * rsf.",
    "models/mistral4/modeling_mistral4.py Mistral4TopkRouter (128 experts, top-4; group shape 4 / 2 here to exercise the 0.0 mask: the config default is 1 / 1)",
    scoring="softmax", bias="none", n_group=4, topk_group=2, group_score="top2_sum", group_mask=0.0, renormalize="eps",
    renorm_eps=1e-20, output_order="any", experts=128, topk=4,
)  # fmt: skip
DEEPSEEK_V2 = _model(
    "deepseek-v2", "DeepSeek-V2 routing: softmax, group score the max, dropped groups masked with 0.0, no renormalization, * 16.",
    "models/deepseek_v2/modeling_deepseek_v2.py DeepseekV2TopkRouter, topk_method group_limited_greedy (DeepSeek-V2: 160 experts, top-6, 8 / 3 groups, rsf 16)",
    scoring="softmax", bias="none", n_group=8, topk_group=3, group_score="max", group_mask=0.0, renormalize="raw",
    output_order="any", experts=160, topk=6, routed_scaling_factor=16.0, default_renormalize=False, admitted_renormalize="default",
)  # fmt: skip
HUNYUAN_MOE = _softmax_topk(
    "hunyuan-moe", "Hunyuan-A13B (hunyuan_v1_moe) routing: fp32 softmax over 64 experts, top-8, always divided by the sum.",
    "models/hunyuan_v1_moe/modeling_hunyuan_v1_moe.py HunYuanMoEV1Gate (Hunyuan-A13B: 64 experts, top-8)",
    experts=64, topk=8, admitted_renormalize="default",
)  # fmt: skip
DOTS1 = _sigmoid_bias(
    "dots1", "dots.llm1 routing: sigmoid + bias, 128 experts, top-6, ungrouped, / (sum + 1e-20) * 2.5.",
    "models/dots1/modeling_dots1.py Dots1TopkRouter (dots.llm1: 128 experts, top-6, 1 / 1 groups, rsf 2.5, norm_topk_prob)",
    experts=128, topk=6, routed_scaling_factor=2.5,
)  # fmt: skip
JAMBA = _softmax_topk(
    "jamba", "Jamba routing: fp32 softmax over 16 experts, top-2, never normalized.",
    "models/jamba/modeling_jamba.py JambaTopKRouter (16 experts, top-2; weights cast to the hidden states' dtype)",
    experts=16, topk=2, default_renormalize=False, admitted_renormalize="default",
)  # fmt: skip
GRANITE_MOE = _model(
    "granite-moe", "Granite MoE routing: top-8 of the raw logits over 32 experts, softmax over the 8 chosen.",
    "models/granitemoe/modeling_granitemoe.py GraniteMoeTopKRouter (granite-3.0-1b-a400m: 32 experts, top-8; weights cast to the hidden states' dtype)",
    scoring="softmax_of_topk", bias="none", renormalize="raw", output_order="rank", near_tie_ulp=0, near_tie_x_ulp=0.0,
    experts=32, topk=8, default_renormalize=False, admitted_renormalize="default", admitted_scaling="default",
)  # fmt: skip

# The model families above, in the order `python -m contracts contracts` lists them.
MODEL_CONTRACTS: tuple[Contract, ...] = (
    DEEPSEEK_V4, DEEPSEEK_V4_FLASH, LLAMA4, GLM4_MOE, KIMI_K2, MINIMAX_M2, QWEN3_NEXT, QWEN2_MOE, OLMOE, DBRX, GEMMA4,
    ERNIE4_5, LONGCAT_FLASH, MISTRAL4, DEEPSEEK_V2, HUNYUAN_MOE, DOTS1, JAMBA, GRANITE_MOE,
)  # fmt: skip

# ---------------------------------------------------------------- the trainer's arithmetic (Megatron-core)
# megatron-core 0.16.1 (the newest release: it supports Python 3.10-3.12, as this project does), the unfused torch
# path a Megatron trainer runs: megatron/core/transformer/moe/moe_utils.py topk_routing_with_score_function and
# group_limited_topk. Its probs stay in the logits' dtype (score_precision and weight_precision "input"): with fp32
# logits (moe_router_dtype fp32) these contracts route as fp32 ones. Megatron ranks with torch.topk: NaN above every
# number (nan_rule "first", in the group scores too: a NaN among a group's top experts makes its group score NaN and
# keeps it), exact ties in its own order, which no field can say: its candidates declare tie_order (docs/training.md).
_MCORE = "megatron-core 0.16.1 megatron/core/transformer/moe/moe_utils.py"
MCORE_SIGMOID = DEEPSEEK_V3.replace(
    name="mcore-sigmoid",
    summary="Megatron-core sigmoid routing (DeepSeek-V3 shape): bf16 scores rank, group score the top k/groups_kept sum, bf16 weights / (sum + 1e-20) always.",
    source=f"{_MCORE}:717 topk_routing_with_score_function: scores = torch.sigmoid(logits.float()).type_as(logits) "
           f"(+ expert_bias, :719); :554 group_limited_topk: group score topk(topk // group_topk).sum, :567 mask -inf; "
           f":724 probs = scores / (scores.sum + 1e-20) if topk > 1, whatever norm_topk_prob; :729 probs * scaling_factor",
    score_precision="input", weight_precision="input", group_score="topk_share_sum", nan_rule="first",
    renormalize_when="always", admitted_renormalize="default",
)  # fmt: skip
MCORE_SIGMOID_UNGROUPED = MCORE_SIGMOID.replace(
    name="mcore-sigmoid-ungrouped",
    summary="Megatron-core sigmoid routing without groups (Kimi-K2 shape: 384 experts, top-8, rsf 2.827).",
    n_group=1, topk_group=1, experts=384, topk=8, routed_scaling_factor=2.827,
)  # fmt: skip
MCORE_SOFTMAX = Contract(
    name="mcore-softmax",
    summary="Megatron-core post-softmax routing (its default): top-k of the logits, softmax over the k chosen in fp32, weights in the logits' dtype.",
    source=f"{_MCORE}:714 topk_routing_with_score_function, use_pre_softmax=False: top-k of the logits, "
           f":715 probs = torch.softmax(scores, dim=-1, dtype=torch.float32).type_as(logits); :729 probs * scaling_factor",
    scoring="softmax_of_topk", score_precision="fp32", weight_precision="input", bias="none",
    tie_rule="lowest", nan_rule="first", floor=None, renormalize="raw", output_order="any",
    weight_rtol=1e-5, weight_atol=1e-6, near_tie_ulp=0, near_tie_x_ulp=0.0,
    experts=128, topk=8, routed_scaling_factor=1.0, default_renormalize=False, admitted_renormalize="default",
    renormalize_when="never",  # no norm_topk_prob reaches topk_routing_with_score_function: a renormalize=True call is not divided
)  # fmt: skip
MCORE_SOFTMAX_PRE = MCORE_SOFTMAX.replace(
    name="mcore-softmax-pre",
    summary="Megatron-core pre-softmax routing: softmax over all experts rounded to the logits' dtype ranks and weighs; never renormalized.",
    source=f"{_MCORE}:711 topk_routing_with_score_function, use_pre_softmax=True: scores = torch.softmax(logits, "
           f"dim=-1, dtype=torch.float32).type_as(logits), top-k of them are the probs (no renormalization); :729 probs * scaling_factor",
    scoring="softmax", score_precision="input", near_tie_ulp=4, near_tie_x_ulp=1.0,
)  # fmt: skip
MCORE_CONTRACTS: tuple[Contract, ...] = (MCORE_SIGMOID, MCORE_SIGMOID_UNGROUPED, MCORE_SOFTMAX, MCORE_SOFTMAX_PRE)

BUILTIN_CONTRACTS: dict[str, Contract] = {
    c.name: c for c in (AITER, SERIAL, DEEPSEEK_V3, DEEPSEEK_V3_REFERENCE, QWEN3_MOE, MIXTRAL, GPT_OSS, *MODEL_CONTRACTS,
                        *MCORE_CONTRACTS)
}

# The contracts the harness checks today: its --contract choices and clause
# vocabulary stay these until it is wired for the grouped and softmax ones.
CONTRACTS: dict[str, Contract] = {name: BUILTIN_CONTRACTS[name] for name in ("aiter", "serial")}

CLAUSE_NAMES: tuple[ClauseName, ...] = tuple(dict.fromkeys(n for c in CONTRACTS.values() for n in c.clause_names))
