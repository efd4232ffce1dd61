"""Extract only the engine files the adapters read, for a host that cannot install the engines.

    python -m kernels.engines.extract --to .engines [--wheels DIR] [--packages sglang,flashinfer,...]

Sources, per package: its pinned wheel in ``--wheels`` (default
``~/.cache/router-contracts/wheels``, where ``scripts/engines.sh download``
puts them), else the installed distribution. What is taken:

- the Python files the torch adapters load (``FILES`` of each module);
- for the CUDA adapters, exactly the include closure of our shims: each
  shim is preprocessed with its own build flags (``nvcc -M``) against the
  package trees, and every engine file it reads is kept (needs nvcc here).

The result is a tree laid out like site-packages plus ``versions.json``
(well under 20 MB; about 1.5 MB for all five packages), which
``--engine-path DIR`` / ``ROUTER_ENGINE_PATH=DIR`` reads as it reads an
installed distribution.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from ._locate import ENV_ENGINE_PATH, PACKAGES, VERSIONS_FILE, EngineUnavailable, set_engine_path

__all__ = ["extract", "main"]

DEFAULT_WHEELS = Path.home() / ".cache" / "router-contracts" / "wheels"
# Trees a shim's include closure is computed from (staged whole from a wheel, then reduced to the closure).
CUDA_TREES = {
    "sglang": ("sglang/kernels/jit/csrc/", "sglang/kernels/jit/include/"),
    "flashinfer": ("flashinfer/data/csrc/", "flashinfer/data/include/"),
    "tvm-ffi": ("tvm_ffi/include/",),
}


def _python_files() -> dict[str, list[str]]:
    from . import lmdeploy_torch, sglang_torch, sglang_triton, vllm_torch

    return {
        "sglang": [sglang_torch.FILE, sglang_triton.FILE],
        "vllm": list(vllm_torch.FILES.values()),
        "lmdeploy": list(lmdeploy_torch.FILES.values()),
        "flashinfer": [],
        "tvm-ffi": [],
    }


def _wheel(wheels: Path, key: str) -> Path | None:
    pkg = PACKAGES[key]
    stem = pkg.distribution.replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-{pkg.version}-*.whl")) if wheels.is_dir() else []
    return found[-1] if found else None


def _stage(key: str, wheels: Path, tmp: Path, wanted: list[str]) -> tuple[Path, str, str]:
    """A root holding package ``key``'s needed trees: ``(root, version, where from)``."""
    pkg = PACKAGES[key]
    wheel = _wheel(wheels, key)
    if wheel is not None:
        root = tmp / key
        prefixes = tuple(CUDA_TREES.get(key, ()))
        with zipfile.ZipFile(wheel) as zf:
            for name in zf.namelist():
                if name in wanted or (prefixes and name.startswith(prefixes) and not name.endswith("/")):
                    zf.extract(name, root)
        return root, pkg.version, wheel.name
    try:
        dist = importlib.metadata.distribution(pkg.distribution)
    except importlib.metadata.PackageNotFoundError:
        raise EngineUnavailable(f"{pkg.pin}: no wheel in {wheels} and not installed; run scripts/engines.sh download") from None
    return Path(dist.locate_file("")), dist.version, f"installed {pkg.distribution} {dist.version}"


def _closure(shim: Path, flags: list[str]) -> list[Path]:
    if shutil.which("nvcc") is None:
        raise SystemExit("nvcc is not on PATH: it computes the shims' include closure (run this on a host with nvcc)")
    proc = subprocess.run(["nvcc", *flags, "-M", str(shim)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"nvcc -M {shim.name} failed:\n{(proc.stdout + proc.stderr)[-3000:]}")
    text = proc.stdout.replace("\\\n", " ")
    deps = text.split(":", 1)[1].split() if ":" in text else []
    return [Path(d).resolve() for d in deps]


def extract(to: Path, *, wheels: Path = DEFAULT_WHEELS, packages: list[str] | None = None, arch: str = "sm_90") -> dict:
    """Write the needed files under ``to``; return ``{package: {"files": n, "bytes": b, "from": ...}}``."""
    from . import flashinfer_noaux, sglang_radix

    keys = packages or list(PACKAGES)
    if "sglang" in keys or "flashinfer" in keys:
        keys = list(dict.fromkeys([*keys, "tvm-ffi"]))
    python_files = _python_files()
    summary: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        roots: dict[str, Path] = {}
        versions: dict[str, str] = {}
        chosen: dict[str, set[Path]] = {}
        for key in keys:
            root, version, origin = _stage(key, wheels, tmp, python_files[key])
            roots[key], versions[PACKAGES[key].distribution] = root, version
            chosen[key] = {root / rel for rel in python_files[key]}
            summary[key] = {"from": origin}
        saved = os.environ.get(ENV_ENGINE_PATH)
        set_engine_path(",".join(f"{k}={v}" for k, v in roots.items()))
        try:
            shims = []
            if "sglang" in keys:
                shims.append((sglang_radix.SHIM, sglang_radix.compile_flags(arch)))
            if "flashinfer" in keys:
                shims.append((flashinfer_noaux.SHIM, flashinfer_noaux.compile_flags(arch)[0]))
            for shim, flags in shims:
                for dep in _closure(shim, flags):
                    for key, root in roots.items():
                        if dep.is_relative_to(root.resolve()):
                            chosen[key].add(dep)
        finally:
            set_engine_path(saved)
        to.mkdir(parents=True, exist_ok=True)
        for key, files in chosen.items():
            root = roots[key].resolve()
            total = 0
            for path in sorted(files):
                rel = Path(path).resolve().relative_to(root)
                target = to / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                total += target.stat().st_size
            summary[key].update(files=len(files), bytes=total)
        previous = {}
        if (to / VERSIONS_FILE).is_file():
            previous = json.loads((to / VERSIONS_FILE).read_text())
        (to / VERSIONS_FILE).write_text(json.dumps({**previous, **versions}, indent=1, sort_keys=True) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.engines.extract", description=__doc__.splitlines()[0])
    parser.add_argument("--to", type=Path, required=True, help="output directory (e.g. .engines)")
    parser.add_argument("--wheels", type=Path, default=DEFAULT_WHEELS, help="directory of downloaded wheels")
    parser.add_argument("--packages", default="", help=f"comma-separated subset of {','.join(PACKAGES)}")
    parser.add_argument("--arch", default="sm_90", help="the architecture whose include closure is taken")
    args = parser.parse_args(argv)
    packages = [p for p in args.packages.split(",") if p] or None
    unknown = [p for p in packages or [] if p not in PACKAGES]
    if unknown:
        parser.error(f"--packages {','.join(unknown)}: not one of {','.join(PACKAGES)}")
    try:
        summary = extract(args.to, wheels=args.wheels, packages=packages, arch=args.arch)
    except EngineUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    for key, info in summary.items():
        print(f"{key:11s} {info['files']:4d} files {info['bytes'] / 1e6:7.2f} MB  from {info['from']}")
    print(f"total {sum(i['bytes'] for i in summary.values()) / 1e6:.2f} MB under {args.to}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
