"""Where an engine's files are: a directory the user names, or the installed distribution.

Resolution, per package key (``sglang``, ``vllm``, ``lmdeploy``, ``flashinfer``, ``tvm-ffi``):

1. a directory named for that key (``set_engine_path("sglang=DIR")``), or for
   every key (``set_engine_path("DIR")``), or the same in the environment
   variable ``ROUTER_ENGINE_PATH`` (``"DIR"`` or ``"sglang=DIR,flashinfer=DIR2"``),
   which child processes inherit. The directory is laid out like
   site-packages (``DIR/sglang/srt/layers/moe/topk.py``), so a directory
   written by ``python -m kernels.engines.extract --to DIR`` and an unpacked
   wheel both work. A named directory is never silently replaced by an
   installed package: a file missing there is an error that says so.
2. otherwise the installed distribution (``importlib.metadata``): its files
   are read where pip put them; the package itself is never imported.

Every failure is an ``EngineUnavailable`` whose message names the package,
the version tested, the file, and the fix.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ENV_ENGINE_PATH",
    "PACKAGES",
    "VERSIONS_FILE",
    "EngineUnavailable",
    "Package",
    "Root",
    "engine_paths",
    "locate",
    "root",
    "set_engine_path",
]

ENV_ENGINE_PATH = "ROUTER_ENGINE_PATH"
VERSIONS_FILE = "versions.json"  # written by kernels.engines.extract: {distribution: version}


class EngineUnavailable(RuntimeError):
    """An engine's package, version or file is missing; the message says which and how to fix it."""


@dataclass(frozen=True)
class Package:
    key: str  # the name used in --engine-path KEY=DIR
    distribution: str  # the name pip knows
    version: str  # the version these adapters were written against and tested with
    top: str  # the top-level import directory inside the distribution

    @property
    def pin(self) -> str:
        return f"{self.distribution}=={self.version}"

    def install_hint(self) -> str:
        return (
            f"pip install --no-deps {self.pin} (never with its dependencies: they replace torch), "
            f"or name a directory of extracted files: --engine-path {self.key}=DIR "
            f"(python -m kernels.engines.extract --to DIR)"
        )


PACKAGES: dict[str, Package] = {
    p.key: p
    for p in (
        Package("sglang", "sglang", "0.5.23", "sglang"),
        Package("vllm", "vllm", "0.33.0", "vllm"),
        Package("lmdeploy", "lmdeploy", "0.18.0", "lmdeploy"),
        Package("flashinfer", "flashinfer-python", "0.7.2", "flashinfer"),
        # tvm-ffi: only its C++ headers, which SGLang's and FlashInfer's CUDA sources include.
        Package("tvm-ffi", "apache-tvm-ffi", "0.1.11", "tvm_ffi"),
    )
}

_paths: dict[str, Path] = {}  # set by set_engine_path; "*" applies to every key


def _parse(spec: str) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for item in (part.strip() for part in spec.split(",")):
        if not item:
            continue
        key, sep, path = item.partition("=")
        if not sep:
            key, path = "*", item
        key = key.strip()
        if key != "*" and key not in PACKAGES:
            raise ValueError(f"engine path {item!r} names {key!r}, which is not one of {', '.join(PACKAGES)}; use KEY=DIR")
        out[key] = Path(path.strip()).expanduser()
    return out


def set_engine_path(spec: str | None) -> None:
    """Name directories of engine files: ``"DIR"`` (every engine) or ``"sglang=DIR,flashinfer=DIR2"``.

    Also written to ``ROUTER_ENGINE_PATH`` so isolated workers see it. ``None`` clears both.
    """
    _paths.clear()
    if spec is None:
        os.environ.pop(ENV_ENGINE_PATH, None)
        return
    _paths.update(_parse(spec))
    os.environ[ENV_ENGINE_PATH] = ",".join(f"{k}={v}" if k != "*" else str(v) for k, v in _paths.items())


def engine_paths() -> dict[str, Path]:
    """The directories in force: those set here, else the environment variable's."""
    if _paths:
        return dict(_paths)
    spec = os.environ.get(ENV_ENGINE_PATH, "")
    return _parse(spec) if spec else {}


@dataclass(frozen=True)
class Root:
    """Where one package's files are read from."""

    package: Package
    path: Path
    version: str | None  # None when a named directory records none
    origin: str  # "--engine-path sglang=DIR" or "installed sglang 0.5.23"

    def describe(self) -> str:
        tested = ""
        if self.version is not None and self.version != self.package.version:
            tested = f" (tested with {self.package.version})"
        version = self.version or "version unrecorded"
        return f"{self.package.distribution} {version}{tested} from {self.origin}"


def root(key: str) -> Root:
    """The root of package ``key``'s files; EngineUnavailable if there is none."""
    pkg = PACKAGES[key]
    named = engine_paths()
    if key in named or "*" in named:
        path = named.get(key, named.get("*"))
        origin = f"--engine-path {key}={path}" if key in named else f"--engine-path {path}"
        if not path.is_dir():
            raise EngineUnavailable(f"{pkg.distribution}: {origin} is not a directory; {pkg.install_hint()}")
        version = None
        versions = path / VERSIONS_FILE
        if versions.is_file():
            try:
                version = json.loads(versions.read_text()).get(pkg.distribution)
            except (OSError, ValueError):
                version = None
        return Root(pkg, path, version, origin)
    try:
        dist = importlib.metadata.distribution(pkg.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise EngineUnavailable(f"{pkg.pin} is not installed; {pkg.install_hint()}") from None
    return Root(pkg, Path(dist.locate_file("")), dist.version, f"installed {pkg.distribution} {dist.version}")


def locate(key: str, relpath: str) -> Path:
    """The file ``relpath`` (``sglang/srt/layers/moe/topk.py``) of package ``key``; EngineUnavailable if missing."""
    where = root(key)
    path = where.path / relpath
    if not path.exists():
        raise EngineUnavailable(
            f"{relpath} is missing from {where.describe()} ({where.path}); "
            f"these adapters need {where.package.pin}: {where.package.install_hint()}"
        )
    return path
