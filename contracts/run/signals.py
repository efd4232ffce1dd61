"""SIGINT and SIGTERM during a run: stop after the current case, keep what ran."""

from __future__ import annotations

import signal
import sys
import threading

__all__ = ["StopSignals"]


class StopSignals:
    """The first SIGINT/SIGTERM asks the run to stop after the current case and write its bundle;
    a second stops at once (KeyboardInterrupt), except while bundles are being written.

    Calling the object returns the stop reason (``"SIGINT"``, ``"SIGTERM"``) or None; library
    functions take it as their ``should_stop``.
    """

    def __init__(self):
        self.reason: str | None = None
        self.signum = 0
        self.writing = False
        self._previous: dict = {}

    def __call__(self) -> str | None:
        return self.reason

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()

    def stop(self, reason: str, signum: int = 0) -> None:
        """Ask for a stop without a signal (a rank that learnt another stopped, a test)."""
        if self.reason is None:
            self.reason, self.signum = reason, signum

    def _handle(self, signum, frame):
        if self.reason is None:
            self.reason, self.signum = signal.Signals(signum).name, signum
            print(f"\n{self.reason}: stopping after the current case; the bundle keeps what ran (again to stop at once)", file=sys.stderr)
        elif not self.writing:
            raise KeyboardInterrupt

    @property
    def exit_code(self) -> int:
        """The shell's convention: 128 + the signal number (130 for SIGINT, 143 for SIGTERM)."""
        return 128 + (self.signum or signal.SIGINT)
