"""Copy a report bundle to object storage (any fsspec URL) and read bundles back.

Layout at the destination: ``URL/YYYY/MM/DD/<bundle name>/`` (the date is the
bundle's UTC day). Rules:

- Never overwrite a complete bundle: if the destination holds a completion
  marker (below), the upload is refused with :class:`UploadExistsError`
  naming it. Nightly bundle names carry a UTC timestamp and the backend, so
  a clash means the same bundle is being uploaded twice.
- Resume an incomplete one: a destination with objects but no marker is
  what an interrupted upload left. A retry keeps each object whose size and
  sha256 match the local file, rewrites the others, removes objects the
  bundle does not have, and writes the markers last.
  :func:`list_incomplete_uploads` lists such destinations, and
  :func:`download_bundle` refuses them.
- Transient errors (connection resets, timeouts, throttling, 5xx) are retried
  with exponential backoff; other errors fail at once.
- Every file is read back after it is written and its size and sha256 are
  compared with the local file; a difference is an :class:`UploadError`.
- The completion markers (``nightly.json``, ``index.json`` or ``summary.json``
  at the top of the bundle) are written last, so their presence at the
  destination means the bundle is complete: :func:`list_bundles` only lists
  bundles that have one. On a local filesystem every file is written under a
  temporary name and renamed, so a marker is never seen half-written (an
  object store's PUT is atomic already).

Credentials and endpoints come from the usual places (``AWS_*`` variables,
``~/.aws``, ``GOOGLE_APPLICATION_CREDENTIALS``...). An S3-compatible server
other than AWS takes ``AWS_ENDPOINT_URL`` or ``FSSPEC_S3_ENDPOINT_URL``;
callers of the functions can pass ``storage_options`` instead.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = [
    "UploadError",
    "UploadExistsError",
    "download_bundle",
    "dated_destination",
    "list_bundles",
    "list_incomplete_uploads",
    "upload_bundle",
]

# Written last (and read first), the first one last of all: their presence marks a complete bundle.
COMPLETION_MARKERS = ("nightly.json", "index.json", "summary.json")
_CHUNK = 1 << 20
_TRANSIENT_WORDS = ("timeout", "timed out", "connection", "throttl", "slowdown", "slow down", "unavailable",
                    "internalerror", "internal error", "too many requests", "503", "500", "502", "504", "reset")  # fmt: skip
_STAMP = re.compile(r"(\d{8}T\d{6}Z)")


class UploadError(RuntimeError):
    """The upload failed or what was read back differs from what was written."""


class UploadExistsError(UploadError):
    """The destination already holds a bundle; uploads never overwrite."""


@dataclass(frozen=True)
class RemoteBundle:
    url: str  # full URL of the bundle folder
    name: str  # the bundle folder's name
    day: str  # YYYY/MM/DD


def _fs(url: str, storage_options: dict | None):
    import fsspec

    return fsspec.core.url_to_fs(url, **(storage_options or {}))


def _is_transient(exc: BaseException) -> bool:
    if isinstance(exc, (FileNotFoundError, FileExistsError, PermissionError, IsADirectoryError, NotADirectoryError)):
        return False
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(exc).__name__} {exc}".lower()
    return any(word in text for word in _TRANSIENT_WORDS)


def _with_retries(what: str, action: Callable, *, retries: int, backoff_s: float, sleep: Callable[[float], None]):
    for attempt in range(retries + 1):
        try:
            return action()
        except Exception as exc:
            if attempt == retries or not _is_transient(exc):
                raise UploadError(f"{what} failed after {attempt + 1} attempt(s): {type(exc).__name__}: {exc}") from exc
            sleep(backoff_s * 2**attempt)


def _sha256_remote(fs, path: str) -> tuple[int, str]:
    h, size = hashlib.sha256(), 0
    with fs.open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_CHUNK), b""):
            h.update(block)
            size += len(block)
    return size, h.hexdigest()


def bundle_day(name: str, fallback: dt.datetime | None = None) -> dt.datetime:
    """The UTC day a bundle belongs to: the timestamp in its name, else ``fallback`` (default now)."""
    match = _STAMP.search(name)
    if match:
        return dt.datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=dt.timezone.utc)
    return fallback or dt.datetime.now(dt.timezone.utc)


def dated_destination(url: str, name: str, when: dt.datetime | None = None) -> str:
    """``URL/YYYY/MM/DD/<name>`` for a bundle called ``name``."""
    day = when or bundle_day(name)
    return f"{url.rstrip('/')}/{day:%Y/%m/%d}/{name}"


def _upload_order(files: list[Path], root: Path) -> list[Path]:
    # Completion markers last, in the order of COMPLETION_MARKERS reversed
    # (summary.json before nightly.json): the outermost marker is the very last write.
    def key(p: Path):
        rel = p.relative_to(root).as_posix()
        rank = COMPLETION_MARKERS.index(rel) if rel in COMPLETION_MARKERS else len(COMPLETION_MARKERS)
        return (-rank, rel)

    return sorted(files, key=key)


def upload_bundle(
    local_dir: str | Path,
    url: str,
    *,
    when: dt.datetime | None = None,
    storage_options: dict | None = None,
    retries: int = 5,
    backoff_s: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
    log: Callable[[str], None] | None = print,
) -> str:
    """Copy ``local_dir`` to ``URL/YYYY/MM/DD/<name>/``, verify it, return the destination URL."""
    local_dir = Path(local_dir)
    if not local_dir.is_dir():
        raise UploadError(f"bundle {local_dir} is not a directory")
    files = [p for p in local_dir.rglob("*") if p.is_file() and not p.name.startswith(".")]
    if not files:
        raise UploadError(f"bundle {local_dir} holds no files")
    destination = dated_destination(url, local_dir.name, when)
    fs, root = _fs(destination, storage_options)
    root = root.rstrip("/")
    policy = dict(retries=retries, backoff_s=backoff_s, sleep=sleep)
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    local = "file" in protocols

    existing = _with_retries(f"listing {destination}", lambda: _remote_files(fs, root), **policy)
    done = sorted(m for m in COMPLETION_MARKERS if m in existing)
    if done:
        raise UploadExistsError(
            f"{destination} already exists; refusing to overwrite it (its {done[0]} marks a complete upload; "
            "upload each bundle once, or choose another --upload URL)"
        )
    wanted = {p.relative_to(local_dir).as_posix() for p in files}
    stale = sorted(set(existing) - wanted)  # left by an interrupted attempt (a half-written temporary file, say)
    for rel in stale:
        _with_retries(f"removing {rel}", lambda rel=rel: fs.rm_file(existing[rel]), **policy)
    total = kept = 0
    for path in _upload_order(files, local_dir):
        rel = path.relative_to(local_dir).as_posix()
        target = f"{root}/{rel}"
        data = path.read_bytes()
        want = (len(data), hashlib.sha256(data).hexdigest())
        if rel in existing and _with_retries(f"reading back {rel}", lambda target=target: _sha256_remote(fs, target), **policy) == want:
            kept += 1
            total += want[0]
            continue

        def put(target=target, data=data):
            parent, name = target.rsplit("/", 1)
            if local:  # object stores have no folders to make, and their PUT is atomic
                fs.makedirs(parent, exist_ok=True)
                partial = f"{parent}/.{name}.partial"
                fs.pipe_file(partial, data)
                fs.mv(partial, target)
            else:
                fs.pipe_file(target, data)
            fs.invalidate_cache(target)

        _with_retries(f"writing {rel}", put, **policy)
        got = _with_retries(f"reading back {rel}", lambda target=target: _sha256_remote(fs, target), **policy)
        if got != want:
            raise UploadError(
                f"verification failed for {fs.unstrip_protocol(target)}: wrote {want[0]} bytes sha256 {want[1][:16]}..., "
                f"read back {got[0]} bytes sha256 {got[1][:16]}..."
            )
        total += want[0]
    if log:
        resumed = f"; resumed an incomplete upload: {kept} file(s) already there and verified, {len(stale)} stale removed" if existing else ""
        log(f"uploaded {len(files)} files ({total:,} bytes, sizes and sha256 verified) to {destination}{resumed}")
    return destination


def _remote_files(fs, root: str) -> dict[str, str]:
    """Files under ``root`` (relative path -> full path); empty when there is nothing."""
    fs.invalidate_cache(root)
    try:
        paths = fs.find(root)
    except FileNotFoundError:
        return {}
    return {p[len(root) + 1 :]: p for p in paths if p.startswith(root + "/")}


def list_incomplete_uploads(url: str, *, storage_options: dict | None = None) -> list[RemoteBundle]:
    """Bundle folders under ``URL/YYYY/MM/DD/`` that hold objects but no completion marker (interrupted uploads), oldest first."""
    fs, root = _fs(url, storage_options)
    root = root.rstrip("/")
    folders: dict[tuple[str, ...], set[str]] = {}
    for rel in _remote_files(fs, root):
        parts = rel.split("/")
        if len(parts) < 5 or not all(p.isdigit() for p in parts[:3]):
            continue
        folders.setdefault(tuple(parts[:4]), set()).add("/".join(parts[4:]))
    found = [
        RemoteBundle(url=fs.unstrip_protocol(f"{root}/{'/'.join(key)}"), name=key[3], day="/".join(key[:3]))
        for key, names in folders.items()
        if not any(marker in names for marker in COMPLETION_MARKERS)
    ]  # fmt: skip
    return sorted(found, key=lambda b: (b.day, b.name))


def _read_json(fs, path: str):
    with fs.open(path, "rb") as fh:
        return json.loads(fh.read().decode("utf-8"))


def list_bundles(url: str, *, storage_options: dict | None = None, marker: str = "nightly.json") -> list[RemoteBundle]:
    """Complete bundles under ``URL/YYYY/MM/DD/``, oldest first (by day, then name)."""
    fs, root = _fs(url, storage_options)
    root = root.rstrip("/")
    fs.invalidate_cache()  # listings may be cached from before the last upload
    found = []
    for path in fs.glob(f"{root}/[0-9][0-9][0-9][0-9]/[0-9][0-9]/[0-9][0-9]/*/{marker}"):
        folder = path.rsplit("/", 1)[0]
        parts = folder[len(root) + 1 :].split("/")
        if len(parts) != 4:
            continue
        found.append(RemoteBundle(url=fs.unstrip_protocol(folder), name=parts[3], day="/".join(parts[:3])))
    return sorted(found, key=lambda b: (b.day, b.name))


def read_remote_json(url: str, *, storage_options: dict | None = None):
    fs, path = _fs(url, storage_options)
    return _read_json(fs, path)


def download_bundle(url: str, dest: str | Path, *, storage_options: dict | None = None, suffixes=(".json",)) -> Path:
    """Copy the files of a remote bundle whose names end in ``suffixes`` (all if None) to ``dest``."""
    fs, root = _fs(url, storage_options)
    root = root.rstrip("/")
    dest = Path(dest)
    fs.invalidate_cache()
    paths = fs.find(root)
    if not paths:
        raise FileNotFoundError(f"no bundle at {url}")
    if not any(p[len(root) + 1 :] in COMPLETION_MARKERS for p in paths):
        raise FileNotFoundError(f"{url} is an incomplete upload (no {', '.join(COMPLETION_MARKERS)} at its top); retry the upload")
    for path in paths:
        if suffixes and not path.endswith(tuple(suffixes)):
            continue
        target = dest / path[len(root) + 1 :]
        target.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(path, str(target))
    return dest
