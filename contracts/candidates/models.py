"""The released models' own routers as candidates ``hf-<family>``: one per router of ``kernels.models.ROUTERS``.

Each runs the model's router class from the installed ``transformers``
(``pip install '.[models]'``), built from a small config and fed the logits
unchanged (``kernels.models``: nothing is downloaded), and claims the
built-in contract of its family (``oracle``'s ``deepseek-v4``, ``llama4``,
...). Unavailable, with the reason, when transformers is missing or older
than ``kernels.models.MIN_TRANSFORMERS``. A third party's code: ``check``
runs it in a worker process by default.

``check --candidate all`` leaves them out (twenty-two more full checks on a
host with transformers); ``--candidate all --contract <family>`` includes
the family's router.

The declared deviations are what the harness measured (``MEASURED_WITH``),
each with why; they are the model code's own behaviour, not the adapter's:
``torch.topk`` breaks exact ties in its own order (not lowest-index: an
all-zero 128-wide row gives [84, 87, 86, ...] on a CPU) and ranks NaN above
every number, and several routers cast the weights back to the logits'
dtype or compute their scores in it. docs/models.md gives the figures.
"""

from __future__ import annotations

from kernels.models import ROUTERS

from .lazy import LazyFactory
from .registry import Candidate, register

__all__ = ["HF_DEVIATIONS", "MEASURED_WITH", "hf_candidate"]

MEASURED_WITH = "python -m contracts check --candidate hf-{family} --rows 20000 --no-isolate"

# Shared by every router that ranks with torch.topk (all of them).
_TOPK = {
    "tie_order": "torch.topk breaks exact ties in its own order, not by the lowest expert index",
    "nan_last": "torch.topk ranks NaN above every number (NaN experts are chosen first)",
}

# The MEASURED_WITH run checks the 20,000 rows and the pinned cases: 68,419 rows (68,675 with a correction bias,
# whose two pinned bias-dtype cases add 256).
_CAST = "the weights are cast back to the logits' dtype: bf16 logits get bf16 weights ({rows} rows, every bf16 family)"
# torch.topk over group scores: exact ties (all-equal, saturated, zero groups) and NaN go its own way, so experts
# of groups the contract drops are chosen
_GROUP_TOPK = {
    "group_tie_order": "torch.topk breaks exact group-score ties in its own order ({rows} rows)",
    "group_mask": "torch.topk keeps other groups where group scores tie or are NaN (all_equal, nan_*, inf_logits, "
                  "saturated, all_zero): experts of groups the contract drops are chosen ({rows} rows)",
}  # fmt: skip

# family -> {clause: why}, beyond _TOPK: every clause the MEASURED_WITH run (--rows 20000, --no-isolate, CPU,
# torch 2.13, transformers 5.24) saw broken, with its rows (of 68,419, or 68,675); none that no run saw (renorm_guard
# of deepseek-v4 was seen at 4,000 rows, 1 row, and not at 20,000). Weights that are the contract's rounded to
# bf16 are the cast (weight_accuracy) wherever they also look like another rule: llama4's bf16 top-1 weights that
# round to 1.0 (once read as renormalized) and jamba's bf16 top-2 weights that sum to exactly 1/2 (once read as
# renormalized and divided by k) are counted there.
_MEASURED: dict[str, dict[str, str]] = {
    "deepseek-v4": {
        "selection": "scores = sqrt(softplus(x)) in the logits' dtype: bf16 logits rank bf16 scores, which choose "
                     "other experts (4,750 rows: bf16_near_ties, random_bf16, batch_sizes, strided)",
        "weight_accuracy": "the weights are those bf16 scores (54,807 rows, every bf16 family)",
        "renorm_guard": "the division by sum + 1e-20 runs in bf16 (1 row of 4,000, saturated)",
        "renormalization": "softplus(x) underflows to 0 in fp32 below x = -103 (exp(x) under the smallest subnormal): "
                           "a saturated row's scores are all 0 and its weights 0 / (0 + 1e-20) = 0, which reads as "
                           "weights left unnormalized (2 rows, saturated)",
    },
    "llama4": {
        "weight_accuracy": "sigmoid in fp32, " + _CAST.format(rows="60,007"),
        "signed_zero": "torch.topk ranks -0.0 and +0.0 apart (20 rows, signed_zero)",
    },
    "qwen3-next": {"weight_accuracy": _CAST.format(rows="34,419")},
    "qwen2-moe": {"weight_accuracy": _CAST.format(rows="55,819")},
    "olmoe": {"weight_accuracy": _CAST.format(rows="50,830")},
    "ernie4.5": {"weight_accuracy": _CAST.format(rows="58,856")},
    "jamba": {"weight_accuracy": _CAST.format(rows="59,637")},
    "granite-moe": {
        "weight_accuracy": "softmax over the k chosen in fp32, " + _CAST.format(rows="54,125"),
        "signed_zero": "torch.topk ranks -0.0 and +0.0 apart (1 row, signed_zero)",
    },
    "dbrx": {
        "weight_accuracy": "the softmax is computed in the logits' dtype (softmax(dtype=logits.dtype)): bf16 weights "
                           "(58,653 rows, every bf16 family)",
        "selection": "distinct probabilities round to one bf16 value, and torch.topk chooses among them its own way "
                     "(27 rows: random_bf16, batch_sizes)",
        "output_order": "... or orders them its own way (22 rows: random_bf16, batch_sizes)",
    },
    "mistral4": {
        "weight_accuracy": "the softmax is computed in the logits' dtype: bf16 weights (57,387 rows)",
        "selection": "bf16 probabilities choose other experts among near-equal ones (4 rows, bf16_near_ties)",
        "group_selection": "group top-2 sums of bf16 probabilities keep other groups (311 rows, bf16 families)",
        "group_tie_order": _GROUP_TOPK["group_tie_order"].format(rows="907"),
        "group_mask": _GROUP_TOPK["group_mask"].format(rows="4,059"),
    },
    "deepseek-v2": {
        "group_tie_order": _GROUP_TOPK["group_tie_order"].format(rows="2,490"),
        "group_mask": _GROUP_TOPK["group_mask"].format(rows="4,356"),
        "group_selection": "torch's fp32 softmax is an ULP from the contract's correctly rounded one, and group maxima "
                           "that tie or nearly tie then keep other groups (83 rows: bf16_near_ties, tie_pool_*, "
                           "saturated, ...)",
    },
    # transformers' DeepSeek-V3 router grouped (8 / 4), fp32 throughout: torch.topk over group scores only (measured with
    # --rows 300 --families random_fp32,random_bf16,all_equal,nan_sparse: 173,807 rows with the pinned cases; with
    # --rows 200 --max-batch 64, 8,841 rows, a NaN row shows as nan_last too, 150 rows: _TOPK's)
    "deepseek-v3": {
        "group_tie_order": _GROUP_TOPK["group_tie_order"].format(rows="2,208"),
        "group_mask": _GROUP_TOPK["group_mask"].format(rows="53"),
    },
    # The three older softmax contracts
    "qwen3-moe": {"weight_accuracy": _CAST.format(rows="48,333")},
    "gpt-oss": {"weight_accuracy": "the softmax over the k chosen is computed in the logits' dtype "
                                   "(softmax(dtype=logits.dtype)): bf16 weights (53,827 rows, every bf16 family)"},
    # glm4-moe, kimi-k2, minimax-m2, dots1 (logits cast to fp32 first), gemma4, hunyuan-moe, longcat-flash, mixtral
    # (fp32 weights): ties and NaN only
}

# family -> {clause: bound}: how far its declared bounded clauses reach (contracts.compare.tolerance):
# the worst the run below measured (check --rows 20000, CPU, torch 2.13, transformers 5.24; the largest relative error
# among the rows blamed on the clause), doubled and rounded up to a power of two. Weights that are the contract's
# rounded to bf16 once measure 2^-8.0 (the cast); a softmax or the renormalization computed in bf16 2^-6.2 to 2^-6.8.
# Selection (how far past the contract's cutoff a chosen or left-out expert lies, relative to its score): dbrx 2^-7.42
# (--rows 2000 and the pinned cases), mistral4 none seen; both rank bf16 probabilities, bound 2^-5. deepseek-v4 ranks
# sqrt(softplus(x)) in bf16, with more roundings: 2^-4, set from that, not measured.
_CAST_BOUND = {"weight_accuracy": 2.0**-7}
_BF16_ARITHMETIC_BOUND = {"weight_accuracy": 2.0**-5}
DECLARED_BOUNDS: dict[str, dict[str, float]] = {
    "deepseek-v4": {**_BF16_ARITHMETIC_BOUND, "selection": 2.0**-4},  # weights 2^-6.26
    "llama4": _CAST_BOUND,  # 2^-8.14
    "qwen3-next": _CAST_BOUND,  # 2^-8.01
    "qwen2-moe": _CAST_BOUND,  # 2^-8.01
    "olmoe": _CAST_BOUND,  # 2^-8.01
    "dbrx": {**_BF16_ARITHMETIC_BOUND, "selection": 2.0**-5},  # weights 2^-6.52, selection 2^-7.42
    "ernie4.5": _BF16_ARITHMETIC_BOUND,  # 2^-6.81
    # weights 2^-6.18 (2^-6.31 in a second run); groups (group top-2 sums of bf16 probabilities) 2^-6.88
    "mistral4": {**_BF16_ARITHMETIC_BOUND, "selection": 2.0**-5, "group_selection": 2.0**-5, "group_mask": 2.0**-5},
    "jamba": _CAST_BOUND,  # 2^-8.01
    "granite-moe": _CAST_BOUND,  # 2^-8.01
    "qwen3-moe": _CAST_BOUND,  # 2^-8.01
    "gpt-oss": _CAST_BOUND,  # 2^-8.01: the softmax over k in bf16 is one rounding of each weight
}

# family -> {clause: why}: the declared deviations of hf-<family> under its contract
HF_DEVIATIONS: dict[str, dict[str, str]] = {family: {**_TOPK, **_MEASURED.get(family, {})} for family in ROUTERS}
# The grouped two: a NaN row's first difference is the group torch.topk kept (group_mask); nan_last was not seen.
for _grouped in ("mistral4", "deepseek-v2"):
    del HF_DEVIATIONS[_grouped]["nan_last"]


def _available(family: str):
    def gate(_device):
        from kernels.models import available

        ok, why = available(family)
        return ok, why

    gate.__qualname__ = f"kernels.models.available[{family}]"
    return gate



def hf_candidate(family: str) -> Candidate:
    router = ROUTERS[family]
    return Candidate(
        name=f"hf-{family}",
        route=LazyFactory("kernels.models", "route_for", family),
        contract=family,
        devices=("cpu", "cuda"),
        description=f"transformers' {router.cls} ({router.module}), fed the logits unchanged",
        supported_hardware=_available(family),
        expected_deviations={family: dict(HF_DEVIATIONS[family])},
        declared_bounds={family: dict(DECLARED_BOUNDS[family])} if family in DECLARED_BOUNDS else {},
        third_party=True,
        origin="kernels.models",
        in_all=False,  # `--candidate all --contract <family>` checks it; plain `--candidate all` does not
    )


for _family in ROUTERS:
    register(hf_candidate(_family))
