"""torch.compile's recompiles across a check: a candidate compiled with dynamo that recompiles on every new dtype,
option or layout, or falls back to eager past the recompile limit, is not the compiled code the check meant to test;
the summary says so (``CompileWatch.notes``)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

from ..cases import Case

__all__ = ["CompileWatch"]


def _dynamo_counts() -> tuple[int, dict[str, int]] | None:
    """(frames dynamo compiled, recompile-limit hits by limit name) so far in this process; None if dynamo never loaded."""
    utils = sys.modules.get("torch._dynamo.utils")
    counters = getattr(utils, "counters", None)
    if counters is None:
        return None
    hits: dict[str, int] = {}
    for key, n in dict(counters.get("unimplemented", {})).items():
        text = str(key).lower()
        if "recompile limit" in text or "cache size limit" in text or "cache_size_limit" in text:
            found = re.search(r"limit type: (\w+)", str(key))
            name = found.group(1) if found else "recompile_limit"
            hits[name] = hits.get(name, 0) + n
    return int(dict(counters.get("frames", {})).get("ok", 0)), hits


def _dynamo_limit(name: str):
    config = sys.modules.get("torch._dynamo.config")
    value = getattr(config, name, None)
    if value is None and name == "recompile_limit":
        value = getattr(config, "cache_size_limit", None)  # its name before torch 2.6
    return value


@dataclass
class CompileWatch:
    """Dynamo's compiles and recompile-limit hits across the cases of one runner (the whole check)."""

    compiles: int = 0
    recompiles: int = 0  # compiles in cases after the first that compiled anything
    limit: str | None = None  # the limit hit first, and where
    limit_case: str | None = None
    _before: tuple | None = None

    def start(self) -> None:
        self._before = _dynamo_counts()

    def stop(self, case: Case) -> None:
        after = _dynamo_counts()
        if after is None:
            return
        before = self._before or (0, {})
        compiled = after[0] - before[0]
        if compiled > 0:
            self.recompiles += compiled if self.compiles else 0
            self.compiles += compiled
        for name, n in after[1].items():
            if n > before[1].get(name, 0) and self.limit is None:
                self.limit, self.limit_case = name, case.spec.replay_id

    def notes(self) -> list[str]:
        if not self.recompiles and self.limit is None:
            return []
        text = (f"torch.compile: dynamo recompiled the candidate {self.recompiles} time(s) after its first case "
                f"({self.compiles} compiles in all), as cases changed dtypes, renormalize, scaling or layout")  # fmt: skip
        if self.limit is not None:
            text += (f", and fell back to eager after the limit of {_dynamo_limit(self.limit)} (torch._dynamo.config.{self.limit}) "
                     f"in case {self.limit_case}: later calls ran uncompiled, so this check did not test the compiled code "
                     "for them; raise the limit or mark the changing inputs dynamic")  # fmt: skip
        return [text]
