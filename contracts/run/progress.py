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
    """``update(rows, family)`` per case; ``close()`` prints the candidate's line. ``stream`` defaults to stderr."""

    def __init__(self, label: str, total: int, *, enabled: bool = True, stream=None):
        self.label, self.total = label, max(total, 0)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.started = time.perf_counter()
        self.done = 0
        self.family: str | None = None
        self.family_rows = 0
        self.family_started = self.started
        self._bar = None
        if enabled and getattr(self.stream, "isatty", lambda: False)():
            from tqdm import tqdm

            self._bar = tqdm(total=self.total, unit="row", unit_scale=True, desc=label, leave=False, file=self.stream)

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)

    def _rate(self, rows: int, since: float) -> float:
        elapsed = time.perf_counter() - since
        return rows / elapsed if elapsed > 0 else 0.0

    def _family_done(self) -> None:
        if self.family is None or self._bar is not None or not self.enabled:
            return
        rate = self._rate(self.done, self.started)
        left = (self.total - self.done) / rate if rate > 0 and self.total > self.done else 0.0
        self._line(
            f"{self.label}: {self.family} done, {self.family_rows:,} rows at {self._rate(self.family_rows, self.family_started):,.0f} rows/s; "
            f"{self.done:,} of {self.total:,} rows ({100.0 * self.done / max(self.total, 1):.0f}%), about {_duration(left)} left"
        )

    def update(self, rows: int, family: str | None = None) -> None:
        if family is not None and family != self.family:
            self._family_done()
            self.family, self.family_rows, self.family_started = family, 0, time.perf_counter()
        self.done += rows
        self.family_rows += rows
        if self._bar is not None:
            self._bar.update(rows)

    def close(self, status: str = "") -> None:
        self._family_done()
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:
            elapsed = time.perf_counter() - self.started
            self._line(f"{self.label}: {status + ', ' if status else ''}{self.done:,} rows in {_duration(elapsed)} ({self._rate(self.done, self.started):,.0f} rows/s)")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.close()
