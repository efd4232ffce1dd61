"""The two routing contracts as data: named clauses, a tie rule, tolerances.

The clause names are a fixed vocabulary: the runner attributes every
mismatched row to exactly one of them, reports group by them, and nightly
diffs compare them across runs. Do not rename them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CLAUSE_NAMES", "CONTRACTS", "Clause", "Contract", "get_contract"]


@dataclass(frozen=True)
class Clause:
    name: str
    statement: str


@dataclass(frozen=True)
class Contract:
    """One routing contract.

    ``weight_rtol``/``weight_atol``: a weight ``a`` matches the oracle's ``e``
    when ``|a - e| <= atol + rtol * |e|`` (NaN matches only NaN).
    Near ties (spec §9): two faithful implementations of the contract's
    sigmoid may differ by a few ULP, so two experts whose ranking values are
    closer than both sigmoids' error bounds may swap. The bound of one
    expert's sigmoid is ``(near_tie_ulp + near_tie_x_ulp * (1 - sig) * |x|)``
    ULP of ``sig``: the second term models a sigmoid computed as
    ``exp2(-log2(e) * x)``, whose rounded product carries ``|x|`` times
    more relative error (aiter's form). Zero for both means bit-exact.
    """

    name: str
    summary: str
    tie_rule: str
    output_order: str
    clauses: tuple[Clause, ...]
    weight_rtol: float
    weight_atol: float
    near_tie_ulp: int
    near_tie_x_ulp: float
    allows_duplicate_ids: bool

    @property
    def clause_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.clauses)

    def clause(self, name: str) -> Clause:
        for c in self.clauses:
            if c.name == name:
                return c
        raise KeyError(f"contract {self.name!r} has no clause {name!r}; it has {self.clause_names}")


_COMMON = {
    "validity": "Outputs are fp32 weights and int32 ids of shape [M, topk], ids in [0, E), inputs left unchanged.",
    "selection": "The selected experts are those with the topk largest ranking values sig(x) + bias.",
    "signed_zero": "-0.0 and +0.0 ranking values are equal (they tie, and the tie rule decides).",
    "bias_in_weight": "The bias takes part in ranking only: weights are built from sig(x), never sig(x) + bias.",
    "scaling": "Weights are multiplied by routed_scaling_factor exactly once, after renormalization.",
    "weight_accuracy": "Each weight equals the contract's arithmetic within the contract's tolerance.",
}

AITER = Contract(
    name="aiter",
    summary="AMD aiter-compatible routing (the Kimi-K3 radix-4 kernel): wave64 lane tie order, NaN last.",
    tie_rule="aiter",
    output_order="key descending, then tie priority ascending",
    clauses=(
        Clause("validity", _COMMON["validity"] + " No expert appears twice in a row."),
        Clause("selection", _COMMON["selection"]),
        Clause("tie_order", "Equal ranking keys are broken by aiter's wave64 lane priority (expert 252 wins an all-equal row)."),
        Clause("nan_last", "A NaN ranking value ranks below every number, -inf included; NaN experts only fill slots no number can."),
        Clause("signed_zero", _COMMON["signed_zero"]),
        Clause("output_order", "Winners are ordered by ranking key descending, then tie priority ascending."),
        Clause("bias_in_weight", _COMMON["bias_in_weight"]),
        Clause("renorm_guard", "With renormalize, weights are divided by their sum only when the sum is > 0 (else by 1)."),
        Clause("scaling", _COMMON["scaling"]),
        Clause("weight_accuracy", _COMMON["weight_accuracy"] + " (rtol 1e-5, atol 1e-6; aiter's sigmoid is not torch's)"),
    ),
    weight_rtol=1e-5,
    weight_atol=1e-6,
    near_tie_ulp=4,
    near_tie_x_ulp=1.0,
    allows_duplicate_ids=False,
)

SERIAL = Contract(
    name="serial",
    summary="The serial-scan router of a second engine: lowest-index ties, -1e30 sentinel, expert-0 fallback.",
    tie_rule="lowest",
    output_order="selection order (ranking value descending, then lowest index)",
    clauses=(
        Clause("validity", _COMMON["validity"] + " Repeats are allowed only as the expert-0 fallback."),
        Clause("selection", _COMMON["selection"] + " Only values > -1e30 can be selected."),
        Clause("tie_order", "Equal ranking values go to the lowest expert index."),
        Clause("nan_last", "A NaN ranking value is never selected (it never beats the running best)."),
        Clause("signed_zero", _COMMON["signed_zero"]),
        Clause("output_order", "Winners are output in selection order."),
        Clause("bias_in_weight", _COMMON["bias_in_weight"]),
        Clause("renorm_guard", "With renormalize, weight = (sig / (den + 1e-20f)) * rs, den summed in selection order."),
        Clause("scaling", _COMMON["scaling"]),
        Clause("weight_accuracy", _COMMON["weight_accuracy"] + " (rtol 1e-5, atol 1e-6)"),
        Clause("sentinel_fallback", "A round in which no value beats -1e30 emits expert 0 and counts its sig again."),
    ),
    weight_rtol=1e-5,
    weight_atol=1e-6,
    near_tie_ulp=4,
    near_tie_x_ulp=0.0,
    allows_duplicate_ids=True,
)

CONTRACTS: dict[str, Contract] = {c.name: c for c in (AITER, SERIAL)}

CLAUSE_NAMES: tuple[str, ...] = tuple(dict.fromkeys(n for c in CONTRACTS.values() for n in c.clause_names))


def get_contract(contract: str | Contract) -> Contract:
    if isinstance(contract, Contract):
        return contract
    try:
        return CONTRACTS[contract]
    except (KeyError, TypeError):
        raise ValueError(f"contract={contract!r} is not a known contract; use one of {sorted(CONTRACTS)}") from None
