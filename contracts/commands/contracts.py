"""``python -m contracts contracts [NAME|FILE.toml]``: the routing contracts the oracle knows.

Without an argument: every built-in contract, one line each (name, E / k,
scoring, expert groups, the call options it admits, the source it follows).
With a name or a contract file: that contract's fields and clauses.
Out of scope (not a per-row top-k, so no contract): hash routing
(DeepSeek-V4's first layers), capacity routing (Switch, NLLB-MoE: tokens
dropped by their position in the batch) and product-key routing (Doge);
docs/models.md says why.
"""

from __future__ import annotations

import argparse

from ._common import UsageError, make_parser, run_main

__all__ = ["build_parser", "contract_lines", "main", "run"]

PROG = "python -m contracts contracts"


def _options(c) -> str:
    renorm = "renorm on/off" if len(c.admitted_renormalize_values) == 2 else f"renorm {'on' if c.default_renormalize else 'off'}"
    factors = c.admitted_scaling_factors
    return renorm + (", any rsf" if factors is None else f", rsf {factors[0]:g}")


def _scoring(c) -> str:
    text = c.scoring + (f"({c.softcap:g})" if c.scoring == "softcap_sigmoid" else "")
    text += " + bias" if c.has_bias else ""
    if c.renormalize == "lp":
        text += f", L{c.renorm_p:g} norm"
    if c.weight_scale != "none":
        text += ", per-expert scale"
    return text


def contract_lines(contracts) -> list[str]:
    """One aligned line per contract: name, E / k, scoring, groups, admitted options, source."""
    rows = [("contract", "E / k", "scoring", "groups", "options", "source")]
    for c in contracts:
        groups = f"{c.n_group} / {c.topk_group} {c.group_score} mask {c.group_mask:g}" if c.is_grouped else "-"
        shape = f"{c.experts} / {c.topk}" + (f" ({c.zero_experts} zero)" if c.zero_experts else "")
        rows.append((c.name, shape, _scoring(c), groups, _options(c), c.source))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return ["  ".join(cell.ljust(w) for cell, w in zip(r[:5], widths)) + "  " + r[5] for r in rows]


def _details(c) -> list[str]:
    import oracle

    lines = [f"{oracle.contract_label(c)}: {c.summary}", f"source: {c.source}", "", "fields:"]
    lines += [f"  {k} = {v!r}" for k, v in c.as_dict().items() if k not in ("name", "summary", "source")]
    lines += ["", "clauses:"] + [f"  {cl.name}: {cl.statement}" for cl in c.clauses]
    return lines


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 1)[1])
    ap.add_argument("contract", nargs="?", metavar="NAME|FILE.toml", help="show one contract's fields and clauses")
    return ap


def run(args: argparse.Namespace) -> int:
    import oracle

    if args.contract is None:
        print("\n".join(contract_lines(oracle.BUILTIN_CONTRACTS.values())))
    else:
        try:
            contract = oracle.get_contract(args.contract)
        except (ValueError, OSError) as exc:  # ContractError is a ValueError: one line naming the contract
            raise UsageError(str(exc)) from None
        print("\n".join(_details(contract)))
    return 0


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
