"""The trainers' own routers as candidates: ``mcore-<family>`` (megatron-core) and ``te-fused`` (Transformer Engine).

``mcore-<family>`` runs the installed megatron-core's ``topk_routing_with_score_function`` with the family's router
settings (``kernels.trainers.FAMILIES``; ``pip install --no-deps 'megatron-core==0.16.1'``, the ``trainers`` extra)
and claims the mcore contract its arithmetic follows (``mcore-sigmoid``, ``mcore-sigmoid-ungrouped``,
``mcore-softmax``); under its family's inference contract (``--contract deepseek-v3``, ``kimi-k2``, ``qwen3-moe``,
``mixtral``) it FAILs where the trainer's arithmetic differs (docs/training.md). Unavailable, with the reason, when
megatron-core is not installed. ``te-fused`` runs Transformer Engine's ``fused_topk_with_score_function`` (CUDA
only): TE cannot be installed on this project's machines, so it is unavailable here and not verified (its adapter's
plumbing is tested against a stand-in module). Both are third-party code: ``check`` runs them in a worker process;
``--candidate all`` leaves them out, ``--candidate all --contract X`` includes those that serve X.

The declared deviations, under the mcore contracts, are Megatron's ``torch.topk``'s (measured with ``MEASURED_WITH``,
docs/training.md): exact ties broken in its own order, among experts (``tie_order``) and among group scores, NaN group
scores included (``group_tie_order``). That torch.topk ranks NaN above every number is no deviation: the mcore
contracts say so (``nan_rule = "first"``).
"""

from __future__ import annotations

from kernels.trainers import FAMILIES

from .lazy import LazyFactory
from .registry import Candidate, register

__all__ = ["MCORE_DEVIATIONS", "MEASURED_WITH", "mcore_candidate", "te_candidate"]

MEASURED_WITH = "python -m contracts check --candidate mcore-{family} --rows 2000 --no-isolate"

_TOPK = {
    "tie_order": "Megatron ranks with torch.topk, which breaks exact ties in its own order, not by the lowest expert index "
                 "(bf16 scores tie often)",
}  # fmt: skip
_GROUP_TOPK = {
    "group_tie_order": "group_limited_topk ranks group scores with torch.topk: exact group-score ties (bf16 sums, "
                       "all-equal and saturated rows, and NaN group scores, which tie at the top) go its own way",
}  # fmt: skip

_FP16_SOFTMAX = ("torch's fp32 softmax over the k chosen is an ULP from the contract's correctly rounded one, and "
                 "rounded to the logits' dtype a weight lands one ULP away, two once scaled in that dtype (fp16: 1 row "
                 "of 4,284 at --rows 400; bf16: 17 rows of 306,821 at the default plan on the CPU, 20 of 534,992 on "
                 "an H100, 2026-12-07)")
_SIGNED_TOPK = ("the post-softmax router ranks the raw logits with torch.topk, which on CUDA ranks +0.0 above -0.0 (its "
                "radix select orders bit patterns; the contract's zeros are unsigned): 5,610 signed_zero rows of 536,198 "
                "at the default plan on an H100, none on the CPU")
# family -> {clause: why} under its own mcore contract: what MEASURED_WITH (--families random_bf16,random_fp32,
# all_equal,nan_sparse --max-batch 64, CPU, torch 2.13) saw broken
MCORE_DEVIATIONS: dict[str, dict[str, str]] = {
    "deepseek-v3": {**_TOPK, **_GROUP_TOPK,
                    "group_selection": "with a bf16 bias the ranking and the group sums are bf16: group scores tie, "
                                       "and torch.topk keeps its own among them (8 rows of 9,041: bias-bf16 cases)"},
    "kimi-k2": dict(_TOPK),
    "qwen3-moe": {**_TOPK, "weight_accuracy": _FP16_SOFTMAX, "signed_zero": _SIGNED_TOPK},
    "mixtral": {**_TOPK, "weight_accuracy": _FP16_SOFTMAX, "signed_zero": _SIGNED_TOPK},
}
# One ULP of the softmax in the logits' dtype (at most 2^-7 of it in bf16), carried through Megatron's scaling in that
# dtype (probs * scaling_factor, rounded again): up to two ULPs of the scaled weight, 2^-6 of it (H100, 2026-12-07:
# random_bf16:1241212179:45185:bulk row 4658, rsf 2.5, 0.084960938 against 0.083984375). Beyond it a row is a mismatch.
MCORE_BOUNDS: dict[str, dict[str, float]] = {"qwen3-moe": {"weight_accuracy": 2.0**-6}, "mixtral": {"weight_accuracy": 2.0**-6}}

_NO_AUTOCAST = ("no call under torch.autocast: Megatron's mixed precision casts the model (Float16Module), never "
                "autocasts, and under CUDA autocast its router raises (scatter(): Expected self.dtype to be equal to "
                "src.dtype; H100, 2026-12-07)")
_EMPTY_BATCH = ("; 1 token and more: group_limited_topk views the scores as [tokens, groups, -1], which torch cannot do "
                "for 0 tokens (RuntimeError)")


# The mcore contracts with groups (oracle's is_grouped, written here: listing candidates must not import torch;
# tests/test_trainers.py holds the two together)
GROUPED_MCORE_CONTRACTS = ("mcore-sigmoid",)


def _megatron_serves(*, autocast: str | None = None, **_call) -> bool:
    return autocast is None


def _megatron_grouped_serves(*, rows: int, autocast: str | None = None, **_call) -> bool:
    return autocast is None and rows > 0


def _gate(check):
    def gate(_device):
        return check()

    gate.__qualname__ = f"kernels.trainers.{check.__name__}"
    return gate


def _mcore_available():
    from kernels.trainers import available

    return available()


def _te_available():
    from kernels.trainers import te_available

    return te_available()



def mcore_candidate(family: str) -> Candidate:
    router = FAMILIES[family]
    grouped = router.contract in GROUPED_MCORE_CONTRACTS
    return Candidate(
        name=f"mcore-{family}",
        route=LazyFactory("kernels.trainers", "dense_route_for", family),  # Megatron's dense answer, read by the harness
        contract=router.contract,
        contracts=(router.contract, family),
        devices=("cpu", "cuda"),
        description=f"megatron-core's topk_routing_with_score_function ({router.score_function}"
                    f"{', pre-softmax' if router.use_pre_softmax else ''}), the {family} settings, its dense answer (probs, routing_map)",
        supported_hardware=_gate(_mcore_available),
        expected_deviations={router.contract: dict(MCORE_DEVIATIONS[family])},
        declared_bounds={router.contract: dict(MCORE_BOUNDS[family])} if family in MCORE_BOUNDS else {},
        covered=_megatron_grouped_serves if grouped else _megatron_serves,
        coverage=_NO_AUTOCAST + (_EMPTY_BATCH if grouped else ""),
        third_party=True,
        origin="kernels.trainers",
        in_all=False,
    )  # fmt: skip


def te_candidate() -> Candidate:
    return Candidate(
        name="te-fused",
        route=LazyFactory("kernels.trainers", "te_route_for", "deepseek-v3"),
        contract="mcore-sigmoid",
        devices=("cuda",),
        description="Transformer Engine's fused_topk_with_score_function (sigmoid, DeepSeek-V3 settings); not verified here",
        supported_hardware=_gate(_te_available),
        third_party=True,
        origin="kernels.trainers",
        in_all=False,
    )


for _family in FAMILIES:
    register(mcore_candidate(_family))
register(te_candidate())
