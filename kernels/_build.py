"""Compile kernel sources into cached shared libraries and load them with ctypes.

Kernel sources in this package need no torch headers: they expose plain
``extern "C"`` entry points taking raw pointers, strides and a stream handle.
That keeps them compilable on a machine without a GPU (CI compiles every
back end) and lets a serving engine load them without this harness.

Cache key: the bytes of every source and header that goes into the build, the
compiler's ``--version`` text, the target architecture and the flags. A change
to any of them builds a new library; an unchanged one is reused. The cache
lives in ``$ROUTER_KERNEL_CACHE`` or ``~/.cache/router-contracts/kernels``.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from . import BUILD_NOTICE_PREFIX

__all__ = ["BuildError", "cache_dir", "compile_shared", "compile_to_assembly", "compiler_version", "load_library"]


class BuildError(RuntimeError):
    """The platform compiler rejected a kernel source (its output is in the message)."""


def cache_dir() -> Path:
    root = os.environ.get("ROUTER_KERNEL_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "router-contracts" / "kernels"
    path.mkdir(parents=True, exist_ok=True)
    return path


@functools.lru_cache(maxsize=None)
def compiler_version(compiler: str) -> str:
    """The compiler's own ``--version`` text; raises BuildError if it is not installed."""
    exe = shutil.which(compiler)
    if exe is None:
        raise BuildError(f"compiler {compiler!r} is not on PATH; install it (see README) or use a host that has it")
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return out.stdout + out.stderr


def _digest(sources: list[Path], extra: list[str]) -> str:
    h = hashlib.sha256()
    for src in sources:
        h.update(src.name.encode())
        h.update(src.read_bytes())
    for item in extra:
        h.update(b"\0" + item.encode())
    return h.hexdigest()[:20]


def _run_compiler(cmd: list[str], env: dict[str, str] | None = None, *, say=None) -> None:
    """Run the compiler; ``say(seconds)``, where given, every ``PROGRESS_EVERY_S`` while it runs (a whole kernel unit
    takes minutes of one core: a run that prints nothing meanwhile looks hung)."""
    with tempfile.TemporaryFile("w+") as output:
        proc = subprocess.Popen(cmd, stdout=output, stderr=subprocess.STDOUT, text=True, env=env)
        started = time.monotonic()
        while True:
            try:
                proc.wait(timeout=PROGRESS_EVERY_S)
                break
            except subprocess.TimeoutExpired:
                if say is not None:
                    say(time.monotonic() - started)
            except BaseException:  # interrupted: the compiler goes with us
                proc.kill()
                proc.wait()
                raise
        if proc.returncode != 0:
            output.seek(0)
            tail = output.read().strip()[-4000:]
            raise BuildError(f"compile failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")


PROGRESS_EVERY_S = 30.0


def _notice(line: str) -> None:
    """One line on stderr about a build (stdout is the commands' reports)."""
    print(BUILD_NOTICE_PREFIX + line, file=sys.stderr, flush=True)


def _timing_file(main_source: Path, compiler: str) -> Path:
    """Where the last build of ``main_source`` with ``compiler`` on this machine (any flags) left its duration."""
    return cache_dir() / f"{Path(main_source).stem}.{Path(compiler).name}.seconds"


def _last_seconds(main_source: Path, compiler: str) -> float | None:
    try:
        return float(_timing_file(main_source, compiler).read_text())
    except (OSError, ValueError):
        return None


def compile_shared(
    main_source: Path,
    *,
    compiler: str,
    flags: list[str],
    depends: list[Path] = (),
    env: dict[str, str] | None = None,
) -> Path:
    """Build ``main_source`` into a shared library, or return the cached one.

    ``depends`` lists headers the source includes, so that editing a header
    invalidates the cache. ``flags`` must include the architecture flag: it is
    part of the cache key through them.
    """
    sources = [Path(main_source), *map(Path, depends)]
    key = _digest(sources, [compiler, compiler_version(compiler), *flags])
    target = cache_dir() / f"{Path(main_source).stem}-{key}.so"
    if target.exists():
        return target
    # One build per key on the machine: a second process asking for the same
    # library (pytest-xdist workers, parallel checks) waits for the first and
    # loads its result instead of compiling it again.
    name = f"{Path(main_source).name} with {compiler} ({' '.join(f for f in flags if 'arch' in f) or 'host'})"
    with _locked(target.with_suffix(".lock"), waiting=f"waiting for another process's build of {name}"):
        if target.exists():
            return target
        # Build into a temporary name and rename: a process that does not
        # take the lock must never load a half-written library. The build says
        # what it is before it starts and how far it is while it runs.
        last = _last_seconds(main_source, compiler)
        _notice(f"building {name} (first use of this source and these flags{f'; the last build took {last:.0f} s' if last else ''}); "
                f"cached in {cache_dir()}")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(dir=cache_dir()) as tmp:
            partial = Path(tmp) / target.name
            _run_compiler([compiler, *flags, "-o", str(partial), str(main_source)], env=env,
                          say=lambda s: _notice(f"still building {name}: {s:.0f} s"))  # fmt: skip
            os.replace(partial, target)
        took = time.monotonic() - started
        with contextlib.suppress(OSError):  # the next build of this source says how long this one took
            _timing_file(main_source, compiler).write_text(f"{took:.1f}\n")
        _notice(f"built {name} in {took:.0f} s")
    return target


@contextlib.contextmanager
def _locked(path: Path, waiting: str = ""):
    """An exclusive advisory lock on ``path`` (created if missing) for the block; none where fcntl is missing.
    ``waiting``: said once when another process holds the lock (a second check building the same library waits
    minutes on a cold cache, silent otherwise)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: builds may repeat, the rename above keeps them safe
        yield
        return
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                _notice(waiting)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def compile_to_assembly(
    main_source: Path, *, compiler: str, flags: list[str], out: Path, env: dict[str, str] | None = None
) -> Path:
    """Compile device code to assembly text (``-S``), for instruction checks in CI."""
    _run_compiler([compiler, *flags, "-S", "-o", str(out), str(main_source)], env=env)
    return out


@functools.lru_cache(maxsize=None)
def load_library(path: Path) -> ctypes.CDLL:
    return ctypes.CDLL(str(path))
