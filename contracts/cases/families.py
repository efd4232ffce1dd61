"""Case families: named recipes of inputs that exercise every clause.

This table is plain data (it loads no torch, so a command can check
``--families`` before anything heavy loads); the input makers are in
``contracts.cases.makers``. A family makes the logits and the bias of a
case from a seeded CPU generator; ``contracts.cases.build`` turns them
into the case's tensors. Per-row facts (the tie group at the cutoff,
whether it straddles, NaN count) are computed by the comparison from the
oracle, so families only make inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["EDGE_BATCH_SIZES", "FAMILIES", "FAMILY_NAMES", "Family", "families_for"]

# Batch sizes that must always run in the batch_sizes family; the rest of its
# budget samples other sizes in 1..1025.
EDGE_BATCH_SIZES = (1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
                    255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 1536, 4096)  # fmt: skip


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    maker: str  # the function in contracts.cases.makers: (gen, rows, experts, topk) -> (x, bias, logits dtype)
    share: float = 1.0
    sizes: tuple[int, ...] = (1, 16, 128, 1024)
    strided: bool = False  # the logits are a column slice of a wider buffer (row stride > E)
    # After one pass over ``sizes``, draw further case sizes uniformly from this range (inclusive) instead of cycling.
    drawn_sizes: tuple[int, int] | None = None

    # The vectorized twin of ``maker`` for bulk cases, when ``maker`` loops over rows.
    bulk_maker: str | None = None
    # What the contract must have for the family to mean something: "bias", "sigmoid", "grouped".
    needs: tuple[str, ...] = ()

    def applies_to(self, contract) -> bool:
        traits = {"bias": contract.has_bias, "sigmoid": contract.scoring == "sigmoid", "grouped": contract.is_grouped}
        return all(traits[n] for n in self.needs)

    @property
    def grouped(self) -> bool:
        """Its maker takes the group shape (``n_group``, ``topk_group``)."""
        return "grouped" in self.needs

    def make_for(self, bulk: bool) -> Callable:
        from . import makers  # torch loads only when a case is built

        return getattr(makers, (self.bulk_maker or self.maker) if bulk else self.maker)

    @property
    def make(self) -> Callable:
        return self.make_for(False)


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("random_bf16", "normal logits, bf16", "random_bf16", share=3.0, sizes=(1, 64, 1024, 4096)),
        Family("random_fp32", "normal logits, fp32", "random_fp32", share=2.0, sizes=(1, 64, 1024, 4096)),
        Family("bf16_near_ties", "a narrow band of bf16 logits and a bias on a 2^-9 grid: exact and near ties", "bf16_near_ties", share=2.0, sizes=(1, 64, 1024, 1536)),
        Family("all_equal", "every expert of a row has the same logit", "all_equal", share=0.5, sizes=(1, 8, 256, 1025)),
        Family("tie_pool_straddle", "a pool of 2..E tied experts straddles the top-k cutoff", "tie_pool_straddle", share=0.6, sizes=(1, 16, 128), bulk_maker="tie_pool_straddle_bulk"),
        Family("tie_pool_above", "a tie pool lies entirely above the cutoff", "tie_pool_above", share=0.3, sizes=(1, 16, 128), bulk_maker="tie_pool_above_bulk"),
        Family("nan_sparse", "about 5% NaN logits", "nan_sparse", share=0.6, sizes=(1, 64, 1024)),
        Family("nan_dense", "more than E-k NaN logits per row", "nan_dense", share=0.3, sizes=(1, 16, 128), bulk_maker="nan_dense_bulk"),
        Family("nan_neg_inf_bias", "NaN logits with -inf biases: NaN and -inf meet at the cutoff", "nan_with_neg_inf_bias", share=0.3, sizes=(1, 64, 512), needs=('bias',)),
        Family("few_valid", "-inf bias masks: fewer than k experts beat the serial sentinel", "few_valid", share=0.3, sizes=(1, 64, 512), needs=('bias',)),
        Family("inf_logits", "+inf and -inf logits", "inf_logits", share=0.5, sizes=(1, 64, 1024)),
        Family("saturated", "sigmoid exactly 0 or 1", "saturated", share=0.5, sizes=(1, 64, 1024)),
        Family("all_zero", "all-zero logits", "all_zero", share=0.3, sizes=(1, 64, 256)),
        Family("signed_zero", "+0.0 and -0.0 logits and biases, ranking values of exactly 0", "signed_zero", share=0.3, sizes=(1, 64, 256)),
        Family("subnormal", "subnormal ranking values (flush-to-zero would tie them)", "subnormal", share=0.3, sizes=(1, 64, 256), needs=('bias', 'sigmoid')),
        Family("sigmoid_underflow", "logits near -88.7: sigmoids that underflow to 0 or stay subnormal", "sigmoid_underflow", share=0.3, sizes=(1, 64, 256), bulk_maker="sigmoid_underflow_bulk", needs=('sigmoid',)),
        Family("zero_sum", "the chosen sigmoids sum to 0: the renormalize guard decides", "zero_sum", share=0.3, sizes=(1, 64, 256), needs=('bias', 'sigmoid')),
        Family("strided", "a column slice of a wider buffer (row stride > E)", "strided", share=0.6, sizes=(1, 64, 1024), strided=True),
        Family("group_score_ties", "group scores tied at the topk_group cutoff: the group tie rule keeps the groups", "group_score_ties", share=0.5, sizes=(1, 16, 256), needs=("grouped",)),
        Family("group_split_pool", "a tie pool split across a kept and a dropped group", "group_split_pool", share=0.4, sizes=(1, 16, 256), needs=("grouped",)),
        Family("negative_bias_mask", "a negative bias: the 0.0 and -inf group masks disagree", "negative_bias_mask", share=0.5, sizes=(1, 64, 1024), needs=("grouped", "bias")),
        Family("group_all_equal", "every expert of the kept groups equal", "group_all_equal", share=0.3, sizes=(1, 16, 256), needs=("grouped",)),
        Family("batch_sizes", "batch sizes 1..1025, 1536, 4096", "batch_sizes", share=2.0, sizes=EDGE_BATCH_SIZES, drawn_sizes=(1, 1025)),
    ]
}



FAMILY_NAMES: tuple[str, ...] = tuple(FAMILIES)


def families_for(contract) -> list[str]:
    """The families that mean something under ``contract`` (in table order)."""
    return [name for name, f in FAMILIES.items() if f.applies_to(contract)]
