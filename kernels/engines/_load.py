"""Load an engine's published Python functions from its installed file, without importing its package.

Importing ``sglang.srt.layers.moe.topk`` or vLLM's router modules pulls in
the engine's whole runtime (its CUDA extension, distributed state, configs).
The routing functions themselves need only torch. So::

    ns = load_definitions(path, ["biased_grouped_topk_impl"], provide={...},
                          decorators={"torch.compile": "strip"})
    ns["biased_grouped_topk_impl"](...)

1. The file is parsed with ``ast``; the named top-level definitions are
   taken, and with them, transitively, the module-level definitions,
   constants and imports they use (found with ``symtable``, so a function's
   locals are never mistaken for globals; default values and kept
   decorators are module-scope expressions and are walked too).
2. A needed name bound by an import of a library in ``ALLOWED_IMPORTS``
   keeps its import statement (reduced to that name). A needed name bound by
   any other import (the engine's own modules) must be in ``provide``, a
   stand-in the adapter chooses and documents; otherwise ``LoadError`` names
   it, so a new dependency in a later engine version is never papered over.
3. Every decorator of a taken definition must be named in ``decorators``
   (by its dotted name, ``torch.compile``, ``triton.jit``): ``"strip"``
   drops it, ``"keep"`` keeps it. An unlisted decorator is a ``LoadError``.
4. The statements are compiled with the installed file's name and their own
   line numbers (so tracebacks, ``inspect.getsource`` and therefore
   ``triton.jit`` see the real file), under ``from __future__ import
   annotations`` (annotations are never evaluated, so type-only imports are
   not needed), and executed in a fresh namespace.
5. Imports inside function bodies run at call time through a stand-in
   ``__import__``: modules in ``provide_modules`` answer them, libraries in
   ``ALLOWED_IMPORTS`` import as usual, and any other import (the engine's
   own packages) raises ImportError naming it.

The functions' bodies are the engine's own, byte for byte; nothing is copied
into this repository.
"""

from __future__ import annotations

import __future__
import ast
import builtins
import symtable
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["ALLOWED_IMPORTS", "LoadError", "load_definitions"]

# Libraries a published routing function may import for itself.
ALLOWED_IMPORTS = frozenset(
    {"torch", "triton", "math", "functools", "typing", "dataclasses", "abc", "enum", "logging", "numbers", "collections"}
)


class LoadError(RuntimeError):
    """A published function could not be loaded from its file (the message names the file and the name)."""


def _dotted(expr: ast.expr) -> str:
    """``torch.compile`` for ``@torch.compile(...)``, ``triton.jit`` for ``@triton.jit``."""
    if isinstance(expr, ast.Call):
        expr = expr.func
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return ".".join(reversed(parts))
    return ast.unparse(expr)


def _names_in(nodes) -> set[str]:
    out: set[str] = set()
    for node in nodes:
        if node is None:
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                out.add(sub.id)
    return out


def _table_globals(table: symtable.SymbolTable) -> set[str]:
    out = {s.get_name() for s in table.get_symbols() if s.is_referenced() and s.is_global()}
    for child in table.get_children():
        out |= _table_globals(child)
    return out


def _bound_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.value is not None:
        return [stmt.target.id]
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    return []


def _import_for(stmt: ast.Import | ast.ImportFrom, name: str) -> ast.stmt:
    """The import statement reduced to the alias that binds ``name``."""
    alias = next(a for a in stmt.names if (a.asname or a.name).split(".")[0] == name)
    if isinstance(stmt, ast.Import):
        new = ast.Import(names=[alias])
    else:
        new = ast.ImportFrom(module=stmt.module, names=[alias], level=stmt.level)
    return ast.copy_location(new, stmt)


def _import_root(stmt: ast.Import | ast.ImportFrom, name: str) -> str:
    if isinstance(stmt, ast.ImportFrom):
        return "." if stmt.level else (stmt.module or "").split(".")[0]
    alias = next(a for a in stmt.names if (a.asname or a.name).split(".")[0] == name)
    return alias.name.split(".")[0]


def _import_text(stmt: ast.stmt) -> str:
    return ast.unparse(stmt).splitlines()[0]


def _make_import(path: Path, provide_modules: Mapping[str, object]):
    def _import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and name in provide_modules:
            return provide_modules[name]
        if level > 0 or name.split(".")[0] not in ALLOWED_IMPORTS | {"__future__"}:
            raise ImportError(
                f"{path}: a published function imports {'.' * level}{name} when called; "
                f"the adapter provides no stand-in for it (the engine's package is never imported)"
            )
        return builtins.__import__(name, globals, locals, fromlist, level)

    return _import


def load_definitions(
    path: Path,
    names: Sequence[str],
    *,
    provide: Mapping[str, object] | None = None,
    provide_modules: Mapping[str, object] | None = None,
    decorators: Mapping[str, str] | None = None,
    module_name: str | None = None,
) -> dict[str, object]:
    """Execute the named top-level definitions of ``path`` (and what they use); return the namespace.

    ``provide``: stand-ins for module-level names the file imports from the
    engine's own package. ``provide_modules``: stand-in modules for imports
    made inside function bodies. ``decorators``: dotted decorator name ->
    ``"strip"`` or ``"keep"``. Raises LoadError (file missing, a name not
    defined, an engine import without a stand-in, an unlisted decorator).
    """
    path = Path(path)
    provide = dict(provide or {})
    decorators = dict(decorators or {})
    try:
        source = path.read_text()
    except OSError as exc:
        raise LoadError(f"cannot read {path}: {exc}") from exc
    try:
        tree = ast.parse(source, filename=str(path))
        table = symtable.symtable(source, str(path), "exec")
    except SyntaxError as exc:
        raise LoadError(f"{path} does not parse with this Python: {exc}") from exc

    children: dict[tuple[str, int], symtable.SymbolTable] = {}
    for child in table.get_children():
        children[(child.get_name(), child.get_lineno())] = child

    bindings: dict[str, list[ast.stmt]] = {}
    future_annotations = False
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__":
            future_annotations = future_annotations or any(a.name == "annotations" for a in stmt.names)
            continue
        for name in _bound_names(stmt):
            bindings.setdefault(name, []).append(stmt)

    taken: dict[int, ast.stmt] = {}  # id(original stmt) -> statement to compile
    order = {id(stmt): i for i, stmt in enumerate(tree.body)}
    pending = list(names)
    seen: set[str] = set()
    wanted = set(names)
    while pending:
        name = pending.pop()
        if name in seen or name in provide:
            continue
        seen.add(name)
        stmts = bindings.get(name)
        if not stmts:
            if name in wanted:
                raise LoadError(f"{path} defines no top-level {name!r}; this adapter was written against another version")
            if hasattr(builtins, name):
                continue
            raise LoadError(
                f"{path}: {name!r} is used by the loaded functions but not bound at the file's top level "
                f"(defined under a condition?); the adapter must provide a stand-in"
            )
        for stmt in stmts:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                root_module = _import_root(stmt, name)
                if root_module not in ALLOWED_IMPORTS:
                    raise LoadError(
                        f"{path}: the loaded functions use {name!r}, bound by `{_import_text(stmt)}`, "
                        f"an import of the engine's runtime; the adapter must provide a stand-in for it"
                    )
                taken[id(stmt), name] = _import_for(stmt, name)
                continue
            used: set[str] = set()
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                kept = []
                for dec in stmt.decorator_list:
                    rule = decorators.get(_dotted(dec))
                    if rule == "keep":
                        kept.append(dec)
                    elif rule != "strip":
                        raise LoadError(
                            f"{path}: {stmt.name} is decorated with @{_dotted(dec)}, which this adapter neither "
                            f"strips nor keeps; decide how to treat it (decorators={{...: 'strip'|'keep'}})"
                        )
                new = ast.copy_location(type(stmt)(**{f: getattr(stmt, f) for f in stmt._fields}), stmt)
                new.decorator_list = kept
                new.end_lineno = stmt.end_lineno
                taken[id(stmt), name] = new
                used |= _names_in(kept)
                if isinstance(stmt, ast.ClassDef):
                    used |= _names_in(stmt.bases) | _names_in(k.value for k in stmt.keywords)
                else:
                    used |= _names_in(stmt.args.defaults) | _names_in(stmt.args.kw_defaults)
                child = children.get((stmt.name, stmt.lineno)) or next(
                    (t for (n, _), t in children.items() if n == stmt.name), None
                )
                if child is not None:
                    used |= _table_globals(child)
            else:
                taken[id(stmt), name] = stmt
                used |= _names_in([stmt.value]) if getattr(stmt, "value", None) is not None else set()
            pending.extend(sorted(used - seen))

    body: list[ast.stmt] = [
        ast.ImportFrom(module="__future__", names=[ast.alias(name="annotations")], level=0, lineno=1, col_offset=0)
    ]
    body += [stmt for (_, stmt) in sorted(((order[k[0]], v) for k, v in taken.items()), key=lambda kv: kv[0])]
    module = ast.Module(body=body, type_ignores=[])
    ast.fix_missing_locations(module)
    flags = __future__.annotations.compiler_flag
    try:
        code = compile(module, str(path), "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:
        raise LoadError(f"{path}: the taken definitions do not compile: {exc}") from exc
    own_builtins = dict(vars(builtins))
    own_builtins["__import__"] = _make_import(path, provide_modules or {})
    namespace: dict[str, object] = {
        "__name__": module_name or f"router_contracts_engines.{path.stem}",
        "__file__": str(path),
        "__builtins__": own_builtins,
        **provide,
    }
    try:
        exec(code, namespace)  # noqa: S102 -- the engine's own published code, read from its installed file
    except Exception as exc:
        raise LoadError(f"{path}: executing the taken definitions failed: {type(exc).__name__}: {exc}") from exc
    return namespace


def stand_in(**attrs) -> types.SimpleNamespace:
    """A small attribute bag for the adapters' stand-ins (``envs``, ``current_platform``)."""
    return types.SimpleNamespace(**attrs)
