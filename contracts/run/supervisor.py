"""``--no-isolate`` without a blind spot: the in-process command runs as the child of a tiny supervisor.

A candidate run in the harness's own process can end that process itself:
``sys.exit(0)`` is caught, but ``os._exit(0)``, ``posix._exit(0)`` and libc
``_exit(0)`` end it at once, with status 0 and no bundle. So an in-process
command (``check --no-isolate``, ``probe --no-isolate``...) starts again as a
child process with ``ROUTER_CONTRACTS_COMPLETION`` naming a marker file; the
child writes its exit code there as its last act (``mark_completed``). The
supervisor, which imports no torch and runs no candidate, exits with the
child's code when the marker holds it, and otherwise with 1 and one line
saying that the command ended without finishing. Signals reach the child
(the same process group; SIGTERM is passed on), and its code (130, 143)
comes back.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile

__all__ = ["COMPLETION_ENV", "mark_completed", "run_supervised", "supervising"]

COMPLETION_ENV = "ROUTER_CONTRACTS_COMPLETION"
_INCOMPLETE = 1  # ExitCode.FAILED (kept literal: contracts.commands imports this module)


# Set by the command line's entry (``contracts.commands.main`` or ``run_main`` reading ``sys.argv``): only a process
# started as a command supervises itself; a library or test calling ``main([...])`` runs in its own process as it asked.
ENTRY = False


def supervising() -> bool:
    """Whether this process should supervise: started as a command, not itself the supervised child, not a torchrun rank."""
    return ENTRY and not os.environ.get(COMPLETION_ENV) and int(os.environ.get("WORLD_SIZE", "1") or 1) <= 1


def mark_completed(code: int) -> int:
    """In the supervised child: record that the command finished with ``code`` (returned unchanged)."""
    path = os.environ.get(COMPLETION_ENV)
    if path:
        with open(path, "w", encoding="utf-8") as f:
            f.write(str(int(code)))
    return code


def run_supervised(command: str, argv: list[str]) -> int:
    """Run ``python -m contracts COMMAND ARGV...`` as a child; its exit code if it finished, else 1 with a line on stderr."""
    fd, marker = tempfile.mkstemp(prefix="router-contracts-completion-")
    os.close(fd)
    os.unlink(marker)  # the child creates it only when it finishes
    child = subprocess.Popen([sys.executable, "-m", "contracts", command, *argv], env={**os.environ, COMPLETION_ENV: marker})

    def forward(signum, _frame):
        if child.poll() is None:
            child.send_signal(signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                code = child.wait()
                break
            except KeyboardInterrupt:  # the child got the same SIGINT; wait for its bundle
                continue
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    try:
        with open(marker, encoding="utf-8") as f:
            recorded = f.read().strip()
        os.unlink(marker)
    except OSError:
        recorded = None
    if recorded == str(code):
        return code
    how = f"signal {-code}" if code < 0 else f"exit status {code}"
    hint = " Run without --no-isolate to get a bundle that says what happened." if "--no-isolate" in argv else ""
    print(f"error: {command} ended without finishing ({how}, no completion record): the candidate, run in the harness's "
          f"process, ended it (sys.exit, os._exit, posix._exit or libc _exit, or a crash); the run is not a success.{hint}", file=sys.stderr)  # fmt: skip
    return _INCOMPLETE if code in (0, None) or code < 0 else (code if code != 0 else _INCOMPLETE)


def supervised(command: str, run, *, when=lambda args: True):
    """``run(args)`` of a command, run in a supervised child when ``when(args)`` (an in-process run of a candidate):
    the wrapped function is what the command's ``main`` calls."""

    def wrapped(args) -> int:
        if when(args) and supervising():
            return run_supervised(command, args.argv)
        return mark_completed(run(args))

    wrapped.__doc__ = run.__doc__
    return wrapped
