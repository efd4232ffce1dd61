"""The ``--out`` folder: one writer per folder (a lock), an earlier bundle replaced only with ``--force`` and only
when the harness wrote all of it, and a bundle folder made whole beside its target and swapped into place, so that a
reader never sees old and new files mixed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Callable

from .bundle_layout import BUNDLE_MARKERS, HARNESS_FILES, BundleError, BundleExistsError

__all__ = ["LOCK_SUFFIX", "lock_path", "prepare_out", "write_folder"]

LOCK_SUFFIX = ".contracts-lock"


def _holds_bundle(folder: Path) -> bool:
    return any((folder / marker).exists() for marker in BUNDLE_MARKERS)


def _harness_made(path: Path) -> bool:
    """A file or folder the harness wrote: a bundle file, our lock, a temporary folder of ours, or a folder of only those."""
    name = path.name
    if name.startswith(".") and (".new-" in name or ".old-" in name):
        return True
    if path.is_symlink():
        return False
    if path.is_dir():
        return _holds_bundle(path) and all(_harness_made(p) for p in path.iterdir())
    return name in HARNESS_FILES


# ---------------------------------------------------------------- one writer per --out

_HELD: dict[str, int] = {}  # lock file path -> the descriptor whose flock makes this process the folder's writer


def lock_path(out: Path) -> Path:
    """The lock file of ``out``: in the temporary folder, named by the hash of its real path, so that no bundle
    (and no folder above one: a nightly's, an upload's) ever holds a file of the lock."""
    import hashlib as _hashlib

    real = os.path.realpath(os.path.abspath(out))
    folder = Path(tempfile.gettempdir()) / f"router-contracts-locks-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder / (_hashlib.sha256(real.encode()).hexdigest()[:32] + LOCK_SUFFIX)


def _lock(out: Path, what: str) -> None:
    """Make this process the one writer of ``out``: an exclusive ``flock`` on ``lock_path(out)``, held until the
    process ends (the kernel drops it then, on a crash too: a lock file left behind is never stale; a clean exit
    removes it). Writers of one machine and user see each other (an flock on a network file system is not relied on). A second process gets a one-line refusal naming the writer; this process may write ``out`` again
    (sequential runs of one process are one writer)."""
    import atexit
    import fcntl

    path = lock_path(out)
    key = str(path)
    if key in _HELD:
        return
    for _ in range(10):
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                holder = os.read(fd, 200).decode("utf-8", "replace").strip() or "another process"
            finally:
                os.close(fd)
            raise BundleExistsError(f"{what} {out} is in use by another run ({holder}); wait for it to finish or choose another directory") from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its writer removed the file as we locked it: lock the file now at the path
    else:
        raise BundleError(f"{what} {out}: its lock file {path} keeps changing; choose another directory")
    os.ftruncate(fd, 0)
    os.write(fd, f"pid {os.getpid()}, writing {os.path.realpath(out)}".encode())
    _HELD[key] = fd
    atexit.register(_unlock, key)


def _unlock(key: str) -> None:
    fd = _HELD.pop(key, None)
    if fd is None:
        return
    try:
        os.unlink(key)  # while still locked, so no other writer holds a file at this path yet
    except OSError:
        pass
    os.close(fd)


def prepare_out(out: Path, *, force: bool = False, what: str = "--out") -> Path:
    """Make ``out`` ready for a new bundle before any work is done; return the folder to write (symlinks resolved).

    An empty or missing folder is used as it is. A folder that holds an
    earlier bundle is emptied only with ``force``, and only when everything in
    it is the harness's own (bundle files, reports, per-candidate bundle
    folders): a folder with other files is never touched. The folder is
    locked for this process (``_lock``): a second writer into it is refused.
    """
    out = Path(out)
    if out.is_symlink():
        target = Path(os.path.realpath(out))
        if not target.is_dir():
            raise BundleExistsError(f"{what} {out} is a symlink to {target}, which is not a directory; point it at a directory or choose another")
        out = target
    if out.exists() and not out.is_dir():
        raise BundleExistsError(f"{what} {out} is a file, not a directory; choose another directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        _lock(out, what)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise BundleError(f"{what} {out} is not writable ({exc.strerror or exc}); choose another directory") from None
    entries = list(out.iterdir())
    if entries:
        if not _holds_bundle(out) and not any(p.is_dir() and _holds_bundle(p) for p in entries):
            raise BundleExistsError(f"{what} {out} is not empty and holds no bundle; choose an empty or new directory")
        if not force:
            raise BundleExistsError(f"{what} {out} already holds a bundle; pass --force to replace it, or choose another directory")
        foreign = sorted(p.name for p in entries if not _harness_made(p))
        if foreign:
            raise BundleExistsError(
                f"{what} {out} holds files the harness did not write ({', '.join(foreign[:5])}{', ...' if len(foreign) > 5 else ''}); "
                "--force replaces only bundles: move those files, or choose another directory"
            )  # fmt: skip
        for p in entries:
            if p.is_dir() and not p.is_symlink():
                _remove_tree(p)
            else:
                p.unlink()
    return out


def _remove_tree(folder: Path) -> None:
    # Move it aside first: a crash half-way through the removal leaves no half bundle at the name.
    trash = Path(tempfile.mkdtemp(prefix=f".{folder.name}.old-", dir=folder.parent))
    os.replace(folder, trash / folder.name)
    shutil.rmtree(trash, ignore_errors=True)


def _swap_into_place(tmp: Path, target: Path) -> None:
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    if target.exists():
        if target.is_dir() and not any(target.iterdir()):
            target.rmdir()
        else:
            foreign = sorted(p.name for p in target.iterdir() if not _harness_made(p)) if target.is_dir() else [target.name]
            if foreign:  # never lose a file the harness did not write
                raise BundleExistsError(f"{target} holds files the harness did not write ({', '.join(foreign[:5])}); the bundle was not written there")
            _remove_tree(target)
    os.replace(tmp, target)


def write_folder(target: Path, fill: Callable[[Path], None]) -> Path:
    """Make a bundle folder whole: ``fill(tmp)`` writes into a fresh folder beside ``target``, which then replaces it."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    try:
        fill(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes 0700; bundles are meant to be read by others
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target
