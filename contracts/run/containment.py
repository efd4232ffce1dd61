"""The harness contains its own errors: a fault of its own code while it handles one candidate ends that candidate only.

Why (issue 55): a candidate's crash, hang or exception was already an ERROR
of that candidate, but an exception of the harness's own code (the oracle's
expected answer, ``compare_case`` and its attribution, the tally, the
diagnosis, a report writer) went up through ``run_checks`` and ended the
whole run with a traceback: the candidates after it never checked, no index,
nothing to read. Under torch 2.11 that happened exactly when a router was
broken (the weights attribution raised), and a router whose answer makes the
comparison raise escaped its FAIL.

``contained(step, handling)`` is the one place such an exception is caught.
It becomes a ``HarnessError``: the candidate ends ERROR with error kind
``harness_error`` (the command exits 1, never 0), naming the stage, the case
in hand (family, batch size, dtypes, seed) and its replay line, with the
traceback in the bundle; the counts made before the fault are kept; the run
goes on with the next candidate. ``Handling`` is what the harness is doing
for the candidate, kept up to date by the check so that a fault can say it.
Interrupts and usage errors (``OptionError``) are not faults: they pass.
"""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, TypeVar

from ..candidates.worker import Interrupted
from ..cases.logits_file import InputChanged
from ..reports.schema import HARNESS_ERROR, INPUT_CHANGED, CheckResult, ErrorRecord, Status, Summary
from .options import OptionError

if TYPE_CHECKING:
    from ..cases import Case, CaseSpec

__all__ = ["HarnessError", "Handling", "contained", "ended_by", "write_contained"]

T = TypeVar("T")
PASSED_ON = (Interrupted, OptionError)  # a stop, and bad input (exit 2, one line): not faults of the harness
TRACEBACK_CHARS = 8000
_ROOT = Path(__file__).resolve().parents[2]
_PACKAGES = tuple(f"{_ROOT / name}{os.sep}" for name in ("contracts", "oracle"))  # the harness's own code
_ENDING_KINDS = (HARNESS_ERROR, INPUT_CHANGED)  # kinds a contained exception ends a check with; the first one stands


@dataclass
class Handling:
    """What the harness is doing for one candidate: the stage, the case in hand, and how to keep what it counted."""

    stage: str = "setting up the check"
    spec: CaseSpec | None = None  # the case in hand (None between cases)
    case: Case | None = None  # its inputs, once built (their dtypes)
    case_replay: Callable[[CaseSpec], str] | None = None  # the replay line of a case (set by the check)
    check_line: str | None = None  # the command line that reruns the whole check, for a fault outside a case
    partial: Callable[[], CheckResult] | None = None  # the result of the rows counted so far (set by the check)

    def doing(self, stage: str, spec: CaseSpec | None = None, case: Case | None = None) -> None:
        self.stage, self.spec, self.case = stage, spec, case

    def described_case(self) -> str:
        """The case in hand in words: family, batch size, dtypes, seed (``""`` between cases)."""
        s = self.spec
        if s is None:
            return ""
        if self.case is not None:
            bias = self.case.bias
            dtypes = f"logits {_dtype(self.case.scores.dtype)}" + (f", bias {_dtype(bias.dtype)}" if bias is not None else "")
        else:
            dtypes = f"logits {s.logits_dtype or 'of the family'}"
        return f"family {s.family}, batch size {s.rows:,}, {dtypes}, seed {s.case_seed}"


def _dtype(dtype) -> str:
    return {"torch.float32": "fp32", "torch.bfloat16": "bf16", "torch.float16": "fp16"}.get(str(dtype), str(dtype).removeprefix("torch."))


@dataclass
class HarnessError:
    """An exception of the harness's own code while it handled one candidate: where, on which case, how to rerun it."""

    stage: str  # what the harness was doing: "the comparison", "the oracle's expected answer", "writing the bundle", ...
    message: str
    traceback: str
    case: str  # the replay id of the case in hand; "" outside a case (the diagnosis, the bundle)
    replay: str | None  # the line that reruns it: the case's, else the whole check's
    kind: str = HARNESS_ERROR

    @classmethod
    def caught(cls, exc: BaseException, handling: Handling) -> "HarnessError":
        spec = handling.spec
        case = spec.replay_id if spec is not None else ""
        replay = None
        if spec is not None and handling.case_replay is not None:
            try:
                replay = handling.case_replay(spec)
            except Exception:  # noqa: BLE001 -- the line is a courtesy; the whole check's line is the fallback
                replay = None
        where = _innermost_harness_frame(exc)
        try:
            described = handling.described_case()
        except Exception:  # noqa: BLE001 -- the case id and the replay line still name it
            described = ""
        message = (f"the harness raised {type(exc).__name__}: {_first_line(exc)} in {handling.stage}"
                   + (f" ({where})" if where else "")
                   + (f", on case {case}" + (f" ({described})" if described else "") if case else "")
                   + "; a fault of the harness, not of the candidate (the traceback is in summary.json)")  # fmt: skip
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-TRACEBACK_CHARS:]
        if isinstance(exc, InputChanged):
            # Not a fault of the harness: the file was written while the check read it, so no row can be blamed.
            message = (f"the input changed under the check: {_first_line(exc)} (in {handling.stage}); neither the "
                       "candidate's fault nor the harness's: rerun on a file nothing writes during the check")  # fmt: skip
            return cls(stage=handling.stage, message=message, traceback=text, case=case, replay=replay or handling.check_line,
                       kind=INPUT_CHANGED)  # fmt: skip
        return cls(stage=handling.stage, message=message, traceback=text, case=case, replay=replay or handling.check_line)

    def record(self) -> ErrorRecord:
        return ErrorRecord(kind=self.kind, case=self.case, message=self.message, traceback=self.traceback, replay=self.replay)

    def end(self, summary: Summary) -> Summary:
        """``summary`` ended by this fault: ERROR (an interrupt stays INTERRUPTED), this error; an earlier one kept as a note."""
        if summary.status is not Status.INTERRUPTED:
            summary.status = Status.ERROR
        earlier = summary.error
        if earlier is not None and earlier.kind not in _ENDING_KINDS:
            summary.notes.append(f"before the harness error: {earlier.kind}: {earlier.message}" + (f" (case {earlier.case})" if earlier.case else ""))
        if summary.reason:  # e.g. not covered: the error is what the note column shows now
            summary.notes.append(summary.reason)
            summary.reason = None
        if earlier is None or earlier.kind not in _ENDING_KINDS:  # the first contained error stands; a later one is a note
            summary.error = self.record()
        else:
            summary.notes.append(f"then: {self.message}")
        return summary


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"


def _innermost_harness_frame(exc: BaseException) -> str:
    """``path:line in function`` of the deepest frame of the traceback in the harness's packages (contracts, oracle)."""
    found = ""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename.startswith(_PACKAGES):
            found = f"{Path(frame.filename).relative_to(_ROOT)}:{frame.lineno} in {frame.name}"
    return found


def contained(step: Callable[[], T], handling: Handling) -> T | HarnessError:
    """``step()``, or the ``HarnessError`` of the exception it raised; interrupts and usage errors pass."""
    try:
        return step()
    except PASSED_ON:
        raise
    except Exception as exc:  # noqa: BLE001 -- the point: one candidate's fault of the harness must not end the run
        return HarnessError.caught(exc, handling)


def ended_by(fault: HarnessError, handling: Handling, bare: Callable[[], Summary]) -> CheckResult:
    """The result of a check a fault ended: the rows counted before it (``handling.partial``), else ``bare()``."""
    result = contained(handling.partial, handling) if handling.partial is not None else None
    if not isinstance(result, CheckResult):
        result = CheckResult(bare())
    fault.end(result.summary)
    return result


def write_contained(write: Callable[[CheckResult], object], write_plain: Callable[[CheckResult], object], result: CheckResult,
                    handling: Handling) -> None:  # fmt: skip
    """Write ``result``'s bundle with ``write``; if that raises, the check is ERROR ``harness_error`` and
    ``write_plain`` writes what it can (summary.json last); if even that raises, a note on the summary says so."""
    handling.doing("writing the bundle")
    fault = contained(lambda: write(result), handling)
    if not isinstance(fault, HarnessError):
        return
    fault.end(result.summary)
    again = contained(lambda: write_plain(result), handling)
    if isinstance(again, HarnessError):
        result.summary.notes.append(f"no bundle was written: {again.message}")
