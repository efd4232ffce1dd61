"""Which mismatch cells a bundle keeps: the policy the check and the merge of shards share.

Counts are always exact (in the summary); the cells are examples, capped so
a bundle stays small however many rows break:

- mismatch cells up to ``max_cells`` in all, but always the first
  ``CELLS_PER_GROUP`` of every (family, clause), past the cap, so no family
  or clause goes missing from ``mismatches.csv``;
- cells of declared deviations and of near ties only as a sample of
  ``SAMPLE_CELLS_PER_FAMILY`` per family and verdict (their counts are in
  the summary, per family and clause).
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["CELLS_PER_GROUP", "SAMPLE_CELLS_PER_FAMILY", "CellKeeper"]

CELLS_PER_GROUP = 256
SAMPLE_CELLS_PER_FAMILY = 200


@dataclass
class CellKeeper:
    max_cells: int = 100_000
    frames: list = field(default_factory=list)  # DataFrames of CELL_COLUMNS
    kept: int = 0
    _groups: dict = field(default_factory=dict)  # (family, verdict or clause) -> cells kept

    def keep(self, frame) -> None:
        """Keep what the policy allows of ``frame`` (cells of one case, with their family column)."""
        import pandas as pd

        taken = []
        for (family, verdict, clause), part in frame.groupby(["family", "verdict", "clause"], sort=False):
            sample = verdict != "mismatch"
            key = (family, verdict if sample else clause)
            have = self._groups.get(key, 0)
            take = max(0, min(SAMPLE_CELLS_PER_FAMILY if sample else CELLS_PER_GROUP, self.max_cells) - have)
            if not sample:
                take = max(take, self.max_cells - self.kept - sum(len(t) for t in taken))
            if take <= 0:
                continue
            part = part.iloc[:take]
            self._groups[key] = have + len(part)
            taken.append(part)
        if taken:
            block = pd.concat(taken, ignore_index=True)
            self.frames.append(block)
            self.kept += len(block)

    def sample_full(self, family: str, verdict: str) -> bool:
        """Whether ``family``'s sample of ``verdict`` cells (a sampled kind: near ties, declared deviations) is complete."""
        return self._groups.get((family, verdict), 0) >= min(SAMPLE_CELLS_PER_FAMILY, self.max_cells)

    def table(self, columns):
        import pandas as pd

        if not self.frames:
            return pd.DataFrame(columns=list(columns))
        return pd.concat(self.frames, ignore_index=True).reindex(columns=list(columns))

    def note(self, total: int) -> str | None:
        if total <= self.kept:
            return None
        return (f"mismatch cells: {self.kept:,} of {total:,} recorded (every family and clause keeps its first {CELLS_PER_GROUP}, "
                f"declared deviations and near ties a sample of {SAMPLE_CELLS_PER_FAMILY} per family); the counts are exact")  # fmt: skip
