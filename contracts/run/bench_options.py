"""What ``python -m contracts bench`` times and how: the batch sizes, the inputs, the timer's sample counts and the
contract the candidates are timed under (``BenchOptions``), read by the run (``contracts.run.bench``) and by each
point (``contracts.run.bench_point``)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["DEFAULT_M", "DTYPES", "BenchOptions", "options_for_contract", "races_under_its_own"]

DEFAULT_M = (1, 8, 64, 256, 1024, 1536, 4096)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
RENORMALIZE, ROUTED_SCALING_FACTOR = True, 2.5


@dataclass(frozen=True)
class BenchOptions:
    """How to time: the batch sizes, the inputs, and the timer's sample counts (``contracts.run.bench``'s docstring)."""

    m: tuple[int, ...] = DEFAULT_M
    dtype: str = "bf16"
    bias_dtype: str = "same"
    experts: int = 896
    topk: int = 16
    replays: int = 25
    launches: int = 20
    warmup: int = 3
    repeats: int = 10
    rotate: int = 1
    seed: int = 0
    # The routing contract every candidate is timed under (None: each its own): a candidate that follows several
    # (radix4) routes it, one that does not serve it is listed unavailable. ``options_for_contract`` fills the rest.
    contract: str | None = None
    num_expert_group: int = 1  # a grouped contract's groups, passed to every route, gate and bench path
    topk_group: int = 1
    bias: bool = True  # False: the contract has no correction bias; every candidate gets bias=None
    renormalize: bool = RENORMALIZE
    routed_scaling_factor: float = ROUTED_SCALING_FACTOR

    @property
    def group_args(self) -> dict:
        """``num_expert_group`` / ``topk_group`` for a grouped contract, else nothing (as a check calls)."""
        return dict(num_expert_group=self.num_expert_group, topk_group=self.topk_group) if self.num_expert_group > 1 else {}


def options_for_contract(contract: str, **options) -> BenchOptions:
    """``BenchOptions`` that time every candidate under built-in contract ``contract``: its shape where ``options``
    give none, its groups, whether it has a bias, and call options it admits (renormalize and a scaling of 2.5 where
    it admits them). ValueError (one line) for a name that is not a built-in contract, or one whose calls take a
    per-expert scale (not benched)."""
    import oracle

    try:
        c = oracle.get_contract(contract)
    except Exception as exc:  # noqa: BLE001 -- the oracle's message names the choices
        raise ValueError(str(exc).splitlines()[0]) from None
    admitted = c.admitted_options()
    if admitted.get("expert_scale"):
        raise ValueError(f"contract {contract!r} calls its router with a per-expert weight scale, which bench does not draw; "
                         "time it under a contract without one (e.g. aiter)")  # fmt: skip
    renorm = admitted["renormalize"]
    factors = admitted["routed_scaling_factor"]
    options.setdefault("experts", c.experts)
    options.setdefault("topk", c.topk)
    groups = dict(num_expert_group=c.n_group, topk_group=c.topk_group) if c.is_grouped else {}
    return BenchOptions(contract=c.name, bias=c.has_bias, renormalize=RENORMALIZE if RENORMALIZE in renorm else renorm[0],
                        routed_scaling_factor=ROUTED_SCALING_FACTOR if factors is None or ROUTED_SCALING_FACTOR in factors else factors[0],
                        **groups, **options)  # fmt: skip


def races_under_its_own(candidate, contract: str) -> bool:
    """Whether ``bench --contract contract`` times ``candidate``, which does not serve ``contract``, beside those that do,
    under its own contract: both built-in contracts with the same scoring, bias and grouping, so that the two do the
    same work on the model's shape and differ only in the contract's details (ties, NaN, rounding). sglang's Triton
    router and FlashInfer's NoAuxTc follow aiter and serve Kimi K2 in production: the K2 race is theirs too."""
    import oracle

    try:
        own, asked = oracle.get_contract(candidate.contract), oracle.get_contract(contract)
    except Exception:  # noqa: BLE001 -- a contract file or an unknown name: no race to claim
        return False
    return (own.scoring, own.has_bias, own.is_grouped) == (asked.scoring, asked.has_bias, asked.is_grouped)
