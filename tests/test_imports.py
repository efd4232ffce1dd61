"""Every module of ours imports on its own, and no two of our modules import each other.

- Alone: each module of ``contracts``, ``oracle`` and ``kernels`` is imported in a fresh interpreter of its
  own, so a module that only works because another one happened to be imported first fails here. To keep it
  cheap, one parent process imports the third-party packages (torch, numpy, pandas, jinja2, ...) and nothing
  of ours, then forks one child per module, a few at a time: each child starts with ``sys.modules`` holding
  none of our modules.
- No cycle: a static reading (``ast``) of every import statement in our packages gives a graph in which no
  module reaches itself. Function-level imports and those under ``if TYPE_CHECKING:`` count too: a cycle
  broken only by importing late is still two modules that each need the other (the shared piece belongs
  in a module below both).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("contracts", "oracle", "kernels")


def _modules() -> dict[str, Path]:
    """module name -> file, for every module of our packages (folders without ``__init__.py`` are scripts)."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if "__pycache__" in parts or not all((ROOT.joinpath(*parts[:i]) / "__init__.py").exists() for i in range(1, len(parts))):
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def test_the_module_list_is_not_empty():
    # A broken walk would make both tests below pass on nothing.
    assert {"contracts", "oracle", "kernels", "contracts.reports.bundle", "contracts.reports.html"} <= set(MODULES)
    assert len(MODULES) > 50, sorted(MODULES)


# ---------------------------------------------------------------- each module alone

_FORKER = textwrap.dedent(
    """
    import importlib, json, os, sys, traceback
    # Third-party only: the children share these, never a module of ours.
    import fsspec, hypothesis, jinja2, markupsafe, matplotlib, numpy, pandas, pytest, torch, tqdm
    ours = [m for m in sys.modules if m.split(".")[0] in {packages!r}]
    assert not ours, f"the parent imported modules of ours: {{ours}}"
    names = [n for n in json.loads(sys.argv[1]) if not n.endswith(".__main__")]  # __main__ runs its command
    failures, running = {{}}, {{}}

    def reap():
        pid, status = os.wait()
        name, read = running.pop(pid)
        with os.fdopen(read, "rb") as pipe:
            text = pipe.read().decode(errors="replace")
        if text or status:
            failures[name] = text or f"the child ended with status {{status}}"

    for name in names:
        while len(running) >= max(2, os.cpu_count() or 2):
            reap()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                importlib.import_module(name)
                message = b""
            except BaseException:
                message = traceback.format_exc(limit=6)[-1500:].encode()
            os.write(write, message)
            os._exit(0)
        os.close(write)
        running[pid] = (name, read)
    while running:
        reap()
    print(json.dumps(failures))
    """
).format(packages=PACKAGES)


# Slow: ~12 s of CPU (torch's own import is 4 s of it, then one child per module, about 200 of them), far more
# on a loaded machine; forking from one parent is already the cheapest way to give each module a fresh start.
@pytest.mark.slow
@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork (POSIX)")
def test_every_module_imports_alone_in_a_fresh_interpreter():
    names = sorted(MODULES)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _FORKER, json.dumps(names)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failures, f"{len(failures)} module(s) do not import on their own:\n" + "\n".join(
        f"--- {name}\n{text}" for name, text in failures.items()
    )


# ---------------------------------------------------------------- the import graph


def _imports(name: str, path: Path) -> set[str]:
    """The modules of ours that ``name`` imports (the deepest module each statement names)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if isinstance(node, ast.Import):
            bases = [alias.name for alias in node.names]
            for base in bases:
                while base and base not in MODULES:
                    base = base.rpartition(".")[0]
                if base:
                    targets.add(base)
            continue
        if node.level:
            anchor = package.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if base.split(".")[0] not in PACKAGES:
            continue
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in MODULES:  # ``from pkg import submodule``
                targets.add(sub)
            else:
                target = base
                while target and target not in MODULES:
                    target = target.rpartition(".")[0]
                if target:
                    targets.add(target)
    targets.discard(name)
    return targets


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(start: str) -> None:  # iterative, so a deep graph cannot hit the recursion limit
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        top = stack.pop()
                        on_stack.discard(top)
                        component.append(top)
                        if top == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _path_within(graph: dict[str, set[str]], component: list[str]) -> str:
    """One loop through the component, for the message: a -> b -> ... -> a."""
    members = set(component)
    start = component[0]
    seen = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & members):
            if nxt == start:
                return " -> ".join(seen[node] + [start])
            if nxt not in seen:
                seen[nxt] = seen[node] + [nxt]
                queue.append(nxt)
    return " <-> ".join(component)


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _path_within(graph, ["a", "b", "c"]) == "a -> b -> c -> a"
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_the_reader_sees_relative_lazy_and_submodule_imports(tmp_path):
    # contracts.reports.bundle imports .html inside a function: that edge must be seen.
    edges = _imports("contracts.reports.bundle", MODULES["contracts.reports.bundle"])
    assert {"contracts.reports.html", "contracts.reports.schema"} <= edges, edges


def test_no_import_cycle_within_our_packages():
    graph = {name: _imports(name, path) for name, path in MODULES.items()}
    cycles = _cycles(graph)
    assert not cycles, f"{len(cycles)} import cycle(s); move the shared piece into a module both can import:\n" + "\n".join(
        _path_within(graph, c) for c in cycles
    )
