"""Layers without cycles: the import graph of our packages has no cycle, and ``analysis``
reads results without importing the engine that wrote them.

Why a test: a cycle hidden by an import inside a function still ties the modules into one
unit — neither can be read, tested or moved without the other — and it returns as soon as
someone moves that import to the top. The graph is walked from the source (``ast``), so
it sees every import Python would execute:
- every ``import`` / ``from ... import`` anywhere in a module, inside functions too; only
  ``if TYPE_CHECKING:`` blocks are left out (they never run);
- ``from a.b import c`` names the module ``a.b.c`` when that is a module, else ``a.b``;
- importing ``a.b.c`` also runs the ``__init__`` of ``a.b`` (when that is not a package
  the importing module itself lives in), so it is an edge to that package too: a package
  whose ``__init__`` imports its members is where most real cycles close.

Run as a script (``python -m tests.test_layers``) it prints each cycle's modules and the
edges inside it, to see what to move (type-only imports counted; ``--runtime``: not).
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("trainables", "sweep_engine", "analysis")


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of ``PACKAGES``."""
    out = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            out[name] = path
    return out


def _runtime_imports(
    tree: ast.Module, typing: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: all but those under ``if TYPE_CHECKING``
    (those too with ``typing``: a type-only cycle still ties two modules' meaning)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        for child in ast.iter_child_nodes(node):
            if (
                not typing
                and isinstance(child, ast.If)
                and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                stack.extend(child.orelse)
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child
            stack.append(child)


def _known(name: str, known: dict[str, Path]) -> str | None:
    """The longest prefix of ``name`` that is one of our modules."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str, path: Path, known: dict[str, Path], typing: bool = False) -> set[str]:
    """The modules of ``known`` that importing ``module`` may run (``typing``: or name in
    an ``if TYPE_CHECKING`` block)."""
    is_package = path.name == "__init__.py"
    own = module if is_package else module.rpartition(".")[0]  # the package it lives in
    names: list[str] = []
    for node in _runtime_imports(ast.parse(path.read_text(), str(path)), typing):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
            continue
        base = node.module or ""
        if node.level:
            anchor = own.split(".")
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        names += [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    out: set[str] = set()
    for name in names:
        target = _known(name, known)
        if target is None:
            continue
        out.add(target)
        parent = target.rpartition(".")[0]
        while parent:  # the packages whose __init__ the import runs first
            if parent in known and not (own == parent or own.startswith(parent + ".")):
                out.add(parent)
            parent = parent.rpartition(".")[0]
    out.discard(module)
    return out


def import_graph(root: Path = ROOT, typing: bool = False) -> dict[str, set[str]]:
    known = modules(root)
    return {m: imports_of(m, p, known, typing) for m, p in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.parametrize("typing", [False, True], ids=["runtime", "with_type_checking"])
def test_no_import_cycles(typing: bool) -> None:
    """None that can run, and none counting ``if TYPE_CHECKING`` imports either: a cycle
    through type names still means neither module can be read without the other (hooks
    name the party they run on by a protocol, ``trainables/roles.py``)."""
    graph = import_graph(typing=typing)
    assert len(graph) > 100  # the walk found our modules
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_analysis_imports_no_sweep_engine() -> None:
    graph = import_graph()
    bad = sorted(
        f"{m} -> {d}"
        for m, deps in graph.items()
        if m.split(".")[0] == "analysis"
        for d in deps
        if d.split(".")[0] == "sweep_engine"
    )
    assert not bad, "analysis reads results without the engine: " + ", ".join(bad)


def test_the_walk_sees_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    """The checker itself: a lazy import and a package ``__init__`` each close a cycle."""
    pkg = tmp_path / "trainables"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from trainables import b\n")
    (pkg / "b.py").write_text("from trainables.a import f\n")
    (pkg / "sub" / "__init__.py").write_text("from trainables.sub import x\n")
    (pkg / "sub" / "x.py").write_text("from . import y\n")
    (pkg / "sub" / "y.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainables import c\n"
    )
    (pkg / "c.py").write_text("import trainables.sub.y\n")
    for name in ("sweep_engine", "analysis"):
        (tmp_path / name).mkdir()
    found = cycles(import_graph(tmp_path))
    assert ["trainables.a", "trainables.b"] in found
    assert not any("trainables.c" in c for c in found)  # TYPE_CHECKING does not run
    assert not any("trainables.sub.x" in c for c in found)  # own package: no edge back
    (pkg / "sub" / "y.py").write_text("from trainables import c\n")
    found = cycles(import_graph(tmp_path))  # c -> sub (its __init__) -> x -> y -> c
    assert ["trainables.c", "trainables.sub", "trainables.sub.x", "trainables.sub.y"] in found


if __name__ == "__main__":
    g = import_graph(typing="--runtime" not in sys.argv)
    for component in cycles(g):
        members = set(component)
        print(f"cycle of {len(component)}:")
        for m in component:
            inside = sorted(d for d in g[m] if d in members)
            print(f"  {m} -> {', '.join(inside)}")
    sys.exit(0)
