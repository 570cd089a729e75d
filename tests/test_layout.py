"""The package's layout: each subpackage states its public names (``__all__`` lists modules that exist and import,
each named in the package's docstring); no import circle, top-level or inside functions; no word of the experiments."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import unreal_demo

PACKAGES = sorted(m.name for m in pkgutil.walk_packages(unreal_demo.__path__, "unreal_demo.") if m.ispkg)


def test_every_subpackage_is_checked():
    assert {"unreal_demo.core", "unreal_demo.evaluation.longcontext", "unreal_demo.ui.tabs"} <= set(PACKAGES)


@pytest.mark.parametrize("name", PACKAGES)
def test_all_names_modules_that_import(name):
    package = importlib.import_module(name)
    assert package.__all__ == sorted(package.__all__)
    for public in package.__all__:
        assert public in package.__doc__
        importlib.import_module(f"{name}.{public}")


# --- the package's own import graph: every import, at the top of a module or inside a function ---

ROOT = Path(unreal_demo.__file__).resolve().parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(name: str, path: Path) -> set[str]:
    """The package's modules that ``name`` imports anywhere in its body (``import`` and ``from … import``, top
    level, in functions, under ``if``), resolved to the module a name comes from."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:  # `from pkg import module` imports the module, else a name of `source`
                found.add(f"{source}.{alias.name}" if f"{source}.{alias.name}" in MODULES else source)
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that returns to its start, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return None


def test_the_import_graph_is_read():
    assert "unreal_demo.retrieval.registry" in GRAPH["unreal_demo.cli.ask"]  # `from ..retrieval import registry`
    assert "unreal_demo.pipeline" in GRAPH["unreal_demo.cli.ask"]  # imported inside the handler
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_circle_in_the_package():
    """import-linter's layers cannot see a circle inside one layer; this walks every import of every module."""
    assert _cycle(GRAPH) is None, " → ".join(_cycle(GRAPH))
    networkx = pytest.importorskip("networkx")  # an independent second check
    assert networkx.is_directed_acyclic_graph(networkx.DiGraph([(a, b) for a, bs in GRAPH.items() for b in bs]))


def test_the_package_never_names_the_experiments():
    """`grep -rn experiments unreal_demo/` finds nothing: the library neither imports nor points to the studies
    above it (they import it)."""
    hits = [f"{p.relative_to(ROOT.parent)}:{n}" for p in sorted(ROOT.rglob("*")) if p.is_file() and p.suffix != ".pyc"
            for n, line in enumerate(p.read_text(errors="ignore").splitlines(), 1) if "experiments" in line]
    assert not hits, hits


def _defined(path: Path) -> set[str]:
    """The names a module defines at its top level (not the ones it imports)."""
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return out


@pytest.mark.parametrize("service", ["unreal_demo.pipeline", "unreal_demo.serving"])
def test_front_ends_import_each_name_from_where_it_lives(service):
    """The service modules re-export nothing: what is imported from them is defined there (an error type, a method
    list or a constant is imported from its own module)."""
    own = _defined(MODULES[service])
    users = [*MODULES.items(), ("app", ROOT.parent / "app.py")]
    wrong = []
    for name, path in users:
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                if ".".join([*base, *([node.module] if node.module else [])]) == service:
                    wrong += [f"{name}: {a.name}" for a in node.names if a.name not in own]
    assert not wrong, wrong
