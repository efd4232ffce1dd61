"""Where each family's router lives in transformers: a leaf module, so the adapters in ``_hf`` and the
package's front both read it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

MIN_TRANSFORMERS = "5.24"


@dataclass(frozen=True)
class Router:
    family: str  # the contract it follows (oracle's built-in of that name)
    module: str  # transformers.models.<module>.modeling_<module>
    cls: str  # the router class (or the class whose routing method runs)
    config: str  # the config class
    experts: int  # the shape a candidate is checked at by default (the contract's)
    topk: int


# family -> where its router lives in transformers (5.24); the adapters in ``_hf`` say how each is fed
ROUTERS: dict[str, Router] = {
    r.family: r
    for r in (
        Router("deepseek-v4", "deepseek_v4", "DeepseekV4TopKRouter", "DeepseekV4Config", 256, 6),
        Router("llama4", "llama4", "Llama4Router", "Llama4TextConfig", 16, 1),
        Router("glm4-moe", "glm4_moe", "Glm4MoeTopkRouter", "Glm4MoeConfig", 160, 8),
        Router("kimi-k2", "deepseek_v3", "DeepseekV3TopkRouter", "DeepseekV3Config", 384, 8),
        # the same class grouped (8 groups, 4 kept): after kimi-k2, so that capture's class lookup still names kimi-k2
        Router("deepseek-v3", "deepseek_v3", "DeepseekV3TopkRouter", "DeepseekV3Config", 256, 8),
        Router("minimax-m2", "minimax_m2", "MiniMaxM2TopKRouter", "MiniMaxM2Config", 256, 8),
        Router("qwen3-next", "qwen3_next", "Qwen3NextTopKRouter", "Qwen3NextConfig", 512, 10),
        Router("qwen2-moe", "qwen2_moe", "Qwen2MoeTopKRouter", "Qwen2MoeConfig", 60, 4),
        Router("olmoe", "olmoe", "OlmoeTopKRouter", "OlmoeConfig", 64, 8),
        Router("dbrx", "dbrx", "DbrxFFN", "DbrxConfig", 16, 4),
        Router("gemma4", "gemma4", "Gemma4TextRouter", "Gemma4TextConfig", 128, 8),
        Router("ernie4.5", "ernie4_5_moe", "Ernie4_5_MoeTopKRouter", "Ernie4_5_MoeConfig", 64, 6),
        Router("longcat-flash", "longcat_flash", "LongcatFlashTopkRouter", "LongcatFlashConfig", 768, 12),
        Router("mistral4", "mistral4", "Mistral4TopkRouter", "Mistral4Config", 128, 4),
        Router("deepseek-v2", "deepseek_v2", "DeepseekV2TopkRouter", "DeepseekV2Config", 160, 6),
        Router("hunyuan-moe", "hunyuan_v1_moe", "HunYuanMoEV1Gate", "HunYuanMoEV1Config", 64, 8),
        Router("dots1", "dots1", "Dots1TopkRouter", "Dots1Config", 128, 6),
        Router("jamba", "jamba", "JambaTopKRouter", "JambaConfig", 16, 2),
        Router("granite-moe", "granitemoe", "GraniteMoeTopKRouter", "GraniteMoeConfig", 32, 8),
        # the three softmax contracts that came before the model families
        Router("qwen3-moe", "qwen3_moe", "Qwen3MoeTopKRouter", "Qwen3MoeConfig", 128, 8),
        Router("mixtral", "mixtral", "MixtralTopKRouter", "MixtralConfig", 8, 2),
        Router("gpt-oss", "gpt_oss", "GptOssTopKRouter", "GptOssConfig", 128, 4),
    )
}
