"""Is this checkout already installed here, with EXTRAS, every package at its locked version? (exit 0: yes, 1: no)

    python scripts/installed.py [EXTRAS]          e.g. test,parquet,upload,models

scripts/setup.sh asks this before it calls pip, so that a second run reinstalls nothing: pip would rebuild
the editable install (a setuptools build in an isolated environment) every time. "Yes" needs all of:
router-contracts installed editable from this folder; its recorded requirements equal to what
pyproject.toml asks now (for the runtime and the extras asked for); and every package those need,
transitively, installed at the version requirements/lock.txt pins for this Python. The first thing that
is missing or different is printed, as the reason setup.sh installs. Standard library and pip's own
vendored ``packaging`` only: it runs before anything is installed.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import sys
from pathlib import Path

try:
    from packaging.markers import Marker
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # a bare virtualenv: pip brings its own copy
    from pip._vendor.packaging.markers import Marker
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PROJECT = "router-contracts"


def _locked() -> dict[str, str]:
    """package -> the version the lock pins for this interpreter (lines whose marker does not apply are skipped)."""
    pins = {}
    for line in (ROOT / "requirements" / "lock.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        spec, _, marker = line.partition(";")
        if marker.strip() and not Marker(marker.strip()).evaluate():
            continue
        name, _, version = spec.partition("==")
        pins[canonicalize_name(name.strip())] = version.strip()
    return pins


def _wanted(extras: set[str]) -> set[str]:
    """The requirement strings pyproject.toml gives now for the runtime and ``extras`` (normalized)."""
    try:
        import tomllib
    except ImportError:  # Python 3.10: tomli is one of our dependencies, so it may be absent before the install
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    strings = list(project["dependencies"])
    for extra in extras:
        strings += project.get("optional-dependencies", {}).get(extra, [])
    return {str(Requirement(s)).replace(" ", "") for s in strings}


def why_not(extras: set[str]) -> str | None:
    """None when nothing needs installing; else the first reason pip must run."""
    try:
        dist = metadata.distribution(PROJECT)
    except metadata.PackageNotFoundError:
        return f"{PROJECT} is not installed"
    url = json.loads(dist.read_text("direct_url.json") or "{}")
    if not url.get("dir_info", {}).get("editable") or Path(url.get("url", "").removeprefix("file://")).resolve() != ROOT:
        return f"{PROJECT} is installed from {url.get('url', 'a wheel')}, not editable from {ROOT}"
    recorded = set()
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or "extra" not in str(req.marker):
            recorded.add(str(req).replace(" ", ""))
        elif any(req.marker.evaluate({"extra": e}) for e in extras):
            # pyproject.toml lists an extra's requirements without the extra's clause, but with any other
            # ('transformers>=5.24; python_version >= "3.11"' is recorded with 'and extra == "models"')
            rest = re.sub(r'\s*\band\s+extra\s*==\s*"[^"]*"|\bextra\s*==\s*"[^"]*"\s*(and\b)?\s*', "", str(req.marker)).strip()
            req.marker = Marker(rest) if rest else None
            recorded.add(str(req).replace(" ", ""))
    try:
        wanted = _wanted(extras)
    except ImportError:
        return "no TOML reader yet (tomli)"
    if wanted != recorded:
        return f"pyproject.toml asks for {sorted(wanted - recorded) or 'less'} beyond the installed metadata"
    pins = _locked()
    todo = [(Requirement(t), extras) for t in dist.requires or []]
    seen: set[tuple[str, frozenset]] = set()
    while todo:
        req, req_extras = todo.pop()
        if req.marker is not None and not any(req.marker.evaluate({"extra": e}) for e in (req_extras or {""})):
            continue
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        try:
            have = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            return f"{req.name} is not installed"
        version = have.version
        if name == "torch":
            pass  # never in the lock: the installed torch (a GPU host's build) is kept whatever its version
        elif name in pins and version != pins[name]:
            return f"{req.name} {version} is installed, the lock pins {pins[name]}"
        elif not req.specifier.contains(version, prereleases=True):
            return f"{req.name} {version} does not satisfy {req}"
        if name != "torch":
            todo += [(Requirement(t), set(req.extras)) for t in have.requires or []]
    return None


if __name__ == "__main__":
    asked = {e for e in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if e}
    reason = why_not(asked)
    if reason:
        print(reason)
    sys.exit(1 if reason else 0)
