"""``summary.json``'s ``expert_load`` records, without torch: built from per-layer counts, summed across the parts
of a split check (torchrun ranks, merged ``--shard`` bundles), and tabled for the reports.

The counting itself (``contracts.run.expert_load.ExpertLoad``) runs in the check, on tensors; everything that
only reads or adds records lives here, so that the reports and ``merge`` never import torch.
"""

from __future__ import annotations

__all__ = ["load_record", "load_rows", "sum_records"]


def _layer_order(family: str) -> tuple[int, str]:
    tail = family.rpartition(".L")[2]
    return (int(tail), family) if tail.isdigit() else (-1, family)


def load_record(counts: dict[str, tuple[int, list[int], list[int]]]) -> dict | None:
    """The record of per-family ``(rows, oracle counts, candidate counts)``: per family, rows, the oracle's counts,
    the candidate's minus the oracle's, and the figures a reader scans (the hottest expert's load over the mean, the
    largest count difference); None when no family was counted."""
    if not counts:
        return None
    out = {}
    for family in sorted(counts, key=_layer_order):  # the plan's order (layer 0 first), whichever part saw a layer first
        rows, o, c = counts[family]
        diff = [b - a for a, b in zip(o, c)]
        mean = sum(o) / max(len(o), 1)
        out[family] = {
            "rows": rows,
            "oracle": list(o),
            "candidate_minus_oracle": diff,
            "oracle_max_over_mean": round(max(o) / mean, 4) if mean else 0.0,
            "candidate_max_over_mean": round(max(c) / mean, 4) if mean else 0.0,
            "max_abs_difference": max((abs(d) for d in diff), default=0),
            "experts_differing": sum(d != 0 for d in diff),
        }
    return out


def sum_records(records: list[dict | None]) -> dict | None:
    """The ``expert_load`` of a check whose cases were split: every part's counts added per layer, the derived
    figures recomputed; None when no part checked captured logits. ValueError when a layer's expert count differs."""
    counts: dict[str, tuple[int, list[int], list[int]]] = {}
    for record in records:
        for family, v in (record or {}).items():
            o = list(v["oracle"])
            c = [a + d for a, d in zip(o, v["candidate_minus_oracle"])]
            if family in counts:
                rows, so, sc = counts[family]
                if len(so) != len(o):
                    raise ValueError(f"expert_load of {family}: {len(o)} experts in one part, {len(so)} in another")
                counts[family] = (rows + int(v["rows"]), [a + b for a, b in zip(so, o)], [a + b for a, b in zip(sc, c)])
            else:
                counts[family] = (int(v["rows"]), o, c)
    return load_record(counts)


def load_rows(expert_load: dict | None) -> list[dict]:
    """One table row per layer, for the reports."""
    return [
        {"family": family, "rows": v["rows"], "hottest expert (oracle)": int(max(range(len(v["oracle"])), key=v["oracle"].__getitem__)),
         "oracle max/mean": v["oracle_max_over_mean"], "candidate max/mean": v["candidate_max_over_mean"],
         "max abs(candidate - oracle)": v["max_abs_difference"], "experts differing": v["experts_differing"]}
        for family, v in (expert_load or {}).items()
    ]  # fmt: skip
