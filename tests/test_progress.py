"""Issue 33: the progress lines are honest and agree with the verdict table.

Before: a family's rate ran from its first case to the next family's start,
so the last family took in the diagnosis ("286 rows at 3 rows/s"), and the
candidate's line gave a rows/s figure other than the table's.
"""

import io

from contracts.reports.schema import Status, Summary
from contracts.reports.terminal import verdict_table
from contracts.run import progress as progress_mod
from contracts.run.progress import Progress


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def _lines(stream):
    return [line for line in stream.getvalue().splitlines() if line]


def test_a_family_rate_counts_only_its_own_cases_and_the_close_line_is_the_tables(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(progress_mod.time, "perf_counter", clock)
    stream = io.StringIO()
    p = Progress("cand", 600, stream=stream)
    for family, rows, seconds in (("a", 100, 1.0), ("a", 100, 1.0), ("b", 300, 1.0), ("a", 100, 2.0)):
        clock.now += seconds
        p.update(rows, family)
    clock.now += 30.0  # the diagnosis: after the last case
    summary = Summary(candidate="cand", status=Status.FAIL, rows_checked=600, duration_s=5.0, rows_per_s=120.0,
                      diagnosis=[{"text": "x"}])  # fmt: skip
    p.close("FAIL", summary=summary)
    lines = _lines(stream)
    assert lines[0].startswith("cand: a done, 200 rows at 100 rows/s;")
    assert lines[1].startswith("cand: b done, 300 rows at 300 rows/s;")
    # "a" met again: its counts grow over both stretches (300 rows in 4 s), the 30 s after the last case left out
    assert lines[2].startswith("cand: a done, 300 rows at 75 rows/s;"), lines[2]
    assert lines[3] == "cand: FAIL, 600 rows in 5s (120 rows/s; then 30s for the diagnosis)"
    table = verdict_table([summary])
    assert table.splitlines()[1].split()[-1] == "120"  # the same rows/s as the line


def test_the_table_fits_120_columns_with_notes_below(tmp_path):
    long_note = {f"clause_{i}": 1000 + i for i in range(30)}
    summary = Summary(candidate="tests.broken_candidates:bias_in_weights", contract="aiter", device="cpu", status=Status.FAIL,
                      rows_checked=250_000, mismatched_rows=12_345, clauses=long_note, rows_per_s=4321.0)  # fmt: skip
    table = verdict_table([summary])
    lines = table.splitlines()
    assert max(map(len, lines)) <= 120, table
    assert lines[0].startswith("candidate") and lines[1] == "tests.broken_candidates:bias_in_weights"
    assert lines[2].split() == ["aiter", "cpu", "FAIL", "250,000", "0", "12,345", "0", "0", "4,321"]
    assert lines[3].startswith("    note: clause_0:1000, clause_1:1001")
    assert all(line.startswith("          ") for line in lines[4:])


def test_an_errors_note_keeps_the_cause_at_the_end_of_a_long_message():
    # On the H200 the note of a worker error ended "...bias_offset-1: r": a cut at 120 characters kept the case and
    # dropped the CUDA error that was the finding.
    from contracts.reports.schema import ErrorRecord
    from contracts.reports.terminal import note_for

    case = "random_bf16:679834766:1:bias-fp32:bias_offset-1"
    message = f"the harness failed inside the worker while running case {case}: raised AcceleratorError: CUDA error: misaligned address"
    summary = Summary(candidate="c", status=Status.ERROR, error=ErrorRecord("worker_error", case, message))
    assert note_for(summary).endswith("CUDA error: misaligned address") and case in note_for(summary)
    longer = Summary(candidate="c", status=Status.ERROR, error=ErrorRecord("worker_error", case, "context " * 60 + "the cause"))
    note = note_for(longer)
    assert len(note) <= 240 and note.startswith("worker_error: context") and note.endswith("the cause") and " ... " in note
