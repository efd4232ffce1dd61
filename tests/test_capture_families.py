"""``capture`` on every model family it supports: the contract it prints is one the model's own routing passes.

For each family (every one of ``kernels.models.ROUTERS``, and deepseek-v3),
a tiny random-weight model (two layers, hidden size 32,
8 to 32 experts; built from a config, nothing downloaded) is captured with
the ``capture`` command, with the config values of the released checkpoint
where they decide the routing (group shape, routed_scaling_factor,
norm_topk_prob). The printed contract must be the family's built-in, and
the model's own ids and weights, every row of every layer, the oracle's
under it (tests/adversarial/test_capture_labels.py routes them). Families
capture takes every family of ``kernels.models``. DeepSeek-V4's
hash-routed layers (``DeepseekV4HashRouter``, no per-row top-k) are not
recorded; its top-k layers are.
"""

from __future__ import annotations

import json

import pytest

import oracle
from tests._requires import transformers_for_models
from tests.adversarial.test_capture_labels import _capture, _disagreeing_rows

transformers = transformers_for_models()

_SMALL = dict(vocab_size=256, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
              head_dim=16, max_position_embeddings=256)  # fmt: skip
_MLA = dict(q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, first_k_dense_replace=0)

# DeepSeek-V4: a hash-routed first layer (not recorded) and a top-k one; its attention's own small shapes
_V4 = dict(hidden_size=64, moe_intermediate_size=16, num_attention_heads=4, num_key_value_heads=1, head_dim=32, q_lora_rank=32,
           n_routed_experts=16, num_experts_per_tok=2, qk_rope_head_dim=8, layer_types=["heavily_compressed_attention",
           "compressed_sparse_attention"], mlp_layer_types=["hash_moe", "moe"], o_groups=2, o_lora_rank=16, index_n_heads=2,
           index_head_dim=16, index_topk=8, hc_mult=2, sliding_window=16, num_nextn_predict_layers=0, routed_scaling_factor=1.5,
           scoring_func="sqrtsoftplus")  # fmt: skip

# family -> (config class, the config values that set E, k and the routing options as the released checkpoint has them)
FAMILIES = {
    "kimi-k2": ("DeepseekV3Config", dict(n_routed_experts=16, num_experts_per_tok=2, n_group=1, topk_group=1, routed_scaling_factor=2.827,
                                         norm_topk_prob=True, n_shared_experts=1, moe_intermediate_size=16, **_MLA)),
    "deepseek-v3": ("DeepseekV3Config", dict(n_routed_experts=32, num_experts_per_tok=4, n_group=8, topk_group=4, routed_scaling_factor=2.5,
                                             norm_topk_prob=True, n_shared_experts=1, moe_intermediate_size=16, **_MLA)),
    "deepseek-v2": ("DeepseekV2Config", dict(n_routed_experts=16, num_experts_per_tok=2, n_group=8, topk_group=3, routed_scaling_factor=16.0,
                                             topk_method="group_limited_greedy", moe_intermediate_size=16, **_MLA)),
    "glm4-moe": ("Glm4MoeConfig", dict(n_routed_experts=16, num_experts_per_tok=2, n_group=1, topk_group=1, routed_scaling_factor=2.5,
                                       norm_topk_prob=True, moe_intermediate_size=16, first_k_dense_replace=0)),
    "dots1": ("Dots1Config", dict(n_routed_experts=16, num_experts_per_tok=2, n_group=1, topk_group=1, routed_scaling_factor=2.5,
                                  norm_topk_prob=True, n_shared_experts=1, moe_intermediate_size=16, first_k_dense_replace=0)),
    "minimax-m2": ("MiniMaxM2Config", dict(num_local_experts=16, num_experts_per_tok=2)),
    "qwen3-next": ("Qwen3NextConfig", dict(num_experts=16, num_experts_per_tok=2, norm_topk_prob=True, moe_intermediate_size=16)),
    "qwen3-moe": ("Qwen3MoeConfig", dict(num_experts=16, num_experts_per_tok=2, norm_topk_prob=True, moe_intermediate_size=16)),
    "qwen2-moe": ("Qwen2MoeConfig", dict(num_experts=16, num_experts_per_tok=2, norm_topk_prob=False, moe_intermediate_size=16)),
    "olmoe": ("OlmoeConfig", dict(num_experts=16, num_experts_per_tok=2, norm_topk_prob=False)),
    "mixtral": ("MixtralConfig", dict(num_local_experts=8, num_experts_per_tok=2)),
    "gpt-oss": ("GptOssConfig", dict(num_local_experts=16, num_experts_per_tok=2)),
    "jamba": ("JambaConfig", dict(num_experts=16, num_experts_per_tok=2)),
    "granite-moe": ("GraniteMoeConfig", dict(num_local_experts=16, num_experts_per_tok=2)),
    "hunyuan-moe": ("HunYuanMoEV1Config", dict(num_experts=16, moe_topk=2)),
    "ernie4.5": ("Ernie4_5_MoeConfig", dict(num_experts=16, num_experts_per_tok=2, moe_intermediate_size=16)),
    "gemma4": ("Gemma4TextConfig", dict(num_experts=16, top_k_experts=2, enable_moe_block=True, moe_intermediate_size=16,
                                        vocab_size_per_layer_input=256)),  # the default per-layer table is 262,144 x 512
    "deepseek-v4": ("DeepseekV4Config", _V4),
    # AutoModelForCausalLM does not map Mistral4Config: capture builds its base model, whose routers run the same
    "mistral4": ("Mistral4Config", dict(n_routed_experts=16, num_local_experts=16, num_experts_per_tok=2, n_group=4, topk_group=2,
                                        moe_intermediate_size=16, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8,
                                        qk_nope_head_dim=8, v_head_dim=16)),
    # DBRX's config has its own names (d_model, n_layers, ...); its router returns logits, DbrxFFN routes them
    "dbrx": ("DbrxConfig", dict(d_model=32, n_heads=2, n_layers=2, max_seq_len=256, attn_config=dict(kv_n_heads=2, clip_qkv=8.0, rope_theta=10000.0),
                                ffn_config=dict(moe_num_experts=16, moe_top_k=4, ffn_hidden_size=32, moe_normalize_expert_weights=1.0))),
    # 12 routed + 4 zero-computation experts: the router ranks all 16
    "longcat-flash": ("LongcatFlashConfig", dict(num_layers=1, n_routed_experts=12, zero_expert_num=4, num_experts_per_tok=2, moe_topk=2,
                                                 expert_ffn_hidden_size=16, ffn_hidden_size=32, kv_lora_rank=16, q_lora_rank=16,
                                                 qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8,
                                                 routed_scaling_factor=6.0)),
    "llama4": ("Llama4TextConfig", dict(num_local_experts=8, num_experts_per_tok=1, intermediate_size_mlp=48, interleave_moe_layer_step=1)),
}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_capture_prints_the_family_contract_and_the_models_own_routing_passes_it(tmp_path, capsys, family):
    cls, fields = FAMILIES[family]
    folder = tmp_path / family
    small = {k: v for k, v in _SMALL.items() if not (k == "head_dim" and "kv_lora_rank" in fields)}  # MLA sets its own head dims
    if cls == "DbrxConfig":
        small = {"vocab_size": _SMALL["vocab_size"]}
    getattr(transformers, cls)(**{**small, **fields}).save_pretrained(folder)  # a config only: random weights from --seed
    meta, tensors, contract = _capture(tmp_path, folder, capsys)
    assert contract.name == family, (meta["contract"], meta["routing"])
    routing = json.loads(meta["routing"])
    assert routing["experts"] == tensors["logits"].shape[-1] and routing["topk"] == tensors["ids"].shape[-1]
    assert routing["bias"] == contract.has_bias and (routing["n_group"] > 1) == contract.is_grouped
    if contract.has_bias:  # the capture holds the bias the router ranked with (a buffer, ERNIE's moe_statics, MiniMax's argument)
        assert "bias" in tensors, sorted(tensors)
    assert _disagreeing_rows(tensors, contract) == 0


def test_qwen3_with_its_config_default_norm_topk_prob_false_is_not_labelled_renormalized(tmp_path, capsys):
    # Qwen3MoeConfig's default norm_topk_prob is False: the old label (qwen3-moe, renormalized) failed the model's weights
    transformers.Qwen3MoeConfig(**_SMALL, num_experts=16, num_experts_per_tok=2, moe_intermediate_size=16).save_pretrained(tmp_path / "q")
    meta, tensors, contract = _capture(tmp_path, tmp_path / "q", capsys)
    assert contract.default_renormalize is False and json.loads(meta["routing"])["norm_topk_prob"] is False
    assert _disagreeing_rows(tensors, contract) == 0
    assert _disagreeing_rows(tensors, oracle.get_contract("qwen3-moe")) > 0


def test_a_contract_file_in_the_way_is_refused_in_one_line(tmp_path, capsys):
    from contracts.commands import main

    fields = {**FAMILIES["kimi-k2"][1], "routed_scaling_factor": 3.0}  # no built-in has it: the capture writes a contract file
    transformers.DeepseekV3Config(**{k: v for k, v in _SMALL.items() if k != "head_dim"}, **fields).save_pretrained(tmp_path / "k")
    (tmp_path / "text.txt").write_text("route these tokens")
    (tmp_path / "x.contract.toml").write_text("# someone's file\n")
    argv = ["capture", "--model", str(tmp_path / "k"), "--text", str(tmp_path / "text.txt"), "--out", str(tmp_path / "x.safetensors"), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "x.contract.toml exists" in err and "--force" in err, err
    assert (tmp_path / "x.contract.toml").read_text() == "# someone's file\n" and not (tmp_path / "x.safetensors").exists()
    assert main([*argv, "--force"]) == 0 and "base = \"kimi-k2\"" in (tmp_path / "x.contract.toml").read_text()


def test_a_bf16_model_whose_router_casts_its_weights_is_told_so(tmp_path, capsys):
    # Qwen3MoeTopKRouter casts the weights back to the logits' dtype: in bf16 they are the contract's rounded (a cast, said
    # as such, with the candidate that declares it), the ids the contract's
    from contracts.commands import main

    transformers.Qwen3MoeConfig(**{**_SMALL, **FAMILIES["qwen3-moe"][1]}).save_pretrained(tmp_path / "q")
    (tmp_path / "text.txt").write_text("Routers route tokens; " * 4)
    out = tmp_path / "q.safetensors"
    assert main(["capture", "--model", str(tmp_path / "q"), "--text", str(tmp_path / "text.txt"), "--out", str(out), "--dtype", "bfloat16",
                 "--quiet"]) == 0  # fmt: skip
    printed = capsys.readouterr().out
    warning = next(line for line in printed.splitlines() if line.startswith("warning: "))
    assert "differs from qwen3-moe on" in warning and "cast to the logits' dtype on" in warning, warning
    assert "weights other than a cast" not in warning and "--candidate hf-qwen3-moe" in warning, warning


def test_a_gemma4_checkpoint_with_a_per_expert_scale_says_the_capture_leaves_it_out(tmp_path, capsys):
    import torch

    from contracts.commands import main

    config = transformers.Gemma4TextConfig(**{**_SMALL, **FAMILIES["gemma4"][1]})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(getattr(m, "per_expert_scale", None), torch.Tensor):
                m.per_expert_scale.copy_(torch.linspace(0.5, 2.0, m.per_expert_scale.numel()))
    model.save_pretrained(tmp_path / "g")
    (tmp_path / "text.txt").write_text("Routers route tokens; " * 2)
    out = tmp_path / "g.safetensors"
    assert main(["capture", "--model", str(tmp_path / "g"), "--text", str(tmp_path / "text.txt"), "--out", str(out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "warning: per_expert_scale is not all ones" in printed and "weights other than a cast on" in printed, printed


def test_a_deepseek_v4_config_scoring_with_sigmoid_gets_a_sigmoid_contract(tmp_path, capsys):
    # DeepseekV4TopKRouter scores with ACT2FN[config.scoring_func]: the label reads it (no built-in has V4's routing with a
    # sigmoid: a contract file on top of deepseek-v4)
    transformers.DeepseekV4Config(**{**_SMALL, **_V4, "scoring_func": "sigmoid"}).save_pretrained(tmp_path / "v4")
    meta, tensors, contract = _capture(tmp_path, tmp_path / "v4", capsys)
    assert contract.scoring == "sigmoid" and meta["contract"].endswith(".contract.toml"), meta
    assert json.loads(meta["routing"])["scoring"] == "sigmoid" and tensors["logits"].shape[0] == 1  # the hash layer is not recorded
    assert _disagreeing_rows(tensors, contract) == 0
    assert _disagreeing_rows(tensors, oracle.get_contract("deepseek-v4")) > 0


def test_a_dbrx_config_without_renormalization_is_labelled_unnormalized(tmp_path, capsys):
    # DbrxFFN divides by the L_p norm of the chosen weights when moe_normalize_expert_weights is p, not at all when None
    cls, fields = FAMILIES["dbrx"]
    fields = {**fields, "ffn_config": {**fields["ffn_config"], "moe_normalize_expert_weights": None}}
    transformers.DbrxConfig(vocab_size=_SMALL["vocab_size"], **fields).save_pretrained(tmp_path / "d")
    meta, tensors, contract = _capture(tmp_path, tmp_path / "d", capsys)
    assert contract.default_renormalize is False and json.loads(meta["routing"])["renorm_p"] is None, meta
    assert _disagreeing_rows(tensors, contract) == 0 and _disagreeing_rows(tensors, oracle.get_contract("dbrx")) > 0


def test_every_family_of_kernels_models_is_captured_here():
    from kernels.models import ROUTERS

    assert set(ROUTERS) <= set(FAMILIES), sorted(set(ROUTERS) - set(FAMILIES))


def test_a_config_whose_model_fails_its_forward_is_one_line(tmp_path, capsys):
    from contracts.commands import main

    # Mistral 4 with head_dim 16 and its default MLA shapes (a rotary dimension of 64): the model's own forward raises
    transformers.Mistral4Config(**_SMALL, n_routed_experts=16, num_local_experts=16, num_experts_per_tok=2,
                                moe_intermediate_size=16).save_pretrained(tmp_path / "m")  # fmt: skip
    (tmp_path / "text.txt").write_text("route these tokens")
    argv = ["capture", "--model", str(tmp_path / "m"), "--text", str(tmp_path / "text.txt"), "--out", str(tmp_path / "x.safetensors"), "--quiet"]
    code = main(argv)
    err = capsys.readouterr().err.strip()
    if code == 0:
        pytest.skip("this transformers builds that config")
    assert code == 2 and "\n" not in err and "forward pass raised" in err, err
