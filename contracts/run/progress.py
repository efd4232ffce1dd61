"""Progress of a run: a bar on a terminal, and plain lines when the output goes to a file or a pipe.

A nightly or a CI log is not a terminal, so a bar would stay silent for the
whole run; there a line is printed when a family of a candidate finishes
(rows, rows/s, the time left for the candidate), and when a candidate does.
"""

from __future__ import annotations

import sys
import time

__all__ = ["Progress"]


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Progress:
    """``update(rows, family)`` per case; ``close()`` prints the candidate's line. ``stream`` defaults to stderr.

    Rates are honest: a family's rate is its rows over the time spent on its own cases (the time from the case
    before to its last case; a family met again later keeps adding to its counts), never over time that came
    after its last case (the next family's start, the diagnosis). ``close(summary=...)`` prints the summary's own
    figures, the ones the verdict table shows, and the time spent after the last case on its own.
    """

    def __init__(self, label: str, total: int, *, enabled: bool = True, stream=None):
        self.label, self.total = label, max(total, 0)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.perf_counter()
        self.last = self.started  # the end of the last case
        self.done = 0
        self.family: str | None = None
        self.families: dict[str, list[float]] = {}  # family -> [rows, seconds], over all its stretches
        self._bar = None
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit="row", unit_scale=True, desc=label, leave=False, file=self.stream)

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def say(self, text: str) -> None:
        """One line about the run (what it plans), above the bar on a terminal; nothing when disabled (--quiet)."""
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            self._line(text)

    @staticmethod
    def _rate(rows: float, seconds: float) -> float:
        return rows / seconds if seconds > 0 else 0.0

    def _family_done(self) -> None:
        if self.family is None or self._bar is not None or not self.enabled:
            return
        rows, seconds = self.families[self.family]
        rate = self._rate(self.done, self.last - self.started)
        left = (self.total - self.done) / rate if rate > 0 and self.total > self.done else 0.0
        self._line(
            f"{self.label}: {self.family} done, {int(rows):,} rows at {self._rate(rows, seconds):,.0f} rows/s; "
            f"{self.done:,} of {self.total:,} rows ({100.0 * self.done / max(self.total, 1):.0f}%) at {rate:,.0f} rows/s, about {_duration(left)} left"
        )

    def update(self, rows: int, family: str | None = None) -> None:
        now = time.perf_counter()
        if family is not None and family != self.family:
            self._family_done()
            self.family = family
        if self.family is not None:
            entry = self.families.setdefault(self.family, [0, 0.0])
            entry[0] += rows
            entry[1] += now - self.last
        self.last = now
        self.done += rows
        if self._bar is not None:
            self._bar.update(rows)

    def close(self, status: str = "", *, summary=None) -> None:
        """The candidate's line: with ``summary``, its rows, seconds and rows/s (the verdict table's figures)."""
        self._family_done()
        self.family = None
        if self._bar is not None:
            self._bar.close()
            return
        if not self.enabled:
            return
        after = time.perf_counter() - self.last  # the diagnosis, the bundle: after the last case
        if summary is not None and summary.duration_s is not None:
            rows, seconds, rate = summary.rows_checked, summary.duration_s, summary.rows_per_s or 0.0
        else:
            rows, seconds = self.done, self.last - self.started
            rate = self._rate(rows, seconds)
        what = "the diagnosis" if summary is not None and summary.diagnosis else "the summary"
        tail = f"; then {_duration(after)} for {what}" if after >= 1 else ""
        raised = summary.raised_rows if summary is not None else 0
        if raised:  # rows of calls that raised were never answered: no rate of rows checked is claimed for them
            answered = max(rows - raised, 0)
            self._line(f"{self.label}: {status + ', ' if status else ''}{answered:,} of {rows:,} rows answered in {_duration(seconds)} "
                       f"({'every call raised' if not answered else f'{raised:,} rows raised'}{tail})")  # fmt: skip
            return
        self._line(f"{self.label}: {status + ', ' if status else ''}{rows:,} rows in {_duration(seconds)} ({rate:,.0f} rows/s{tail})")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
