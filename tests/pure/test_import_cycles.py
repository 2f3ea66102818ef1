"""No import cycle in reconciler/, not even between two modules of one folder (the floors,
tests/pure/test_layers.py, hold folders apart; this holds modules apart). The graph is the floors'
own walk (test_layers.imports, read with `ast`): an import inside a function or a method counts as
much as one at the top (a lazy import is still a dependency, only a later one), relative imports and
`from package import module` are resolved; what an `if TYPE_CHECKING:` block imports does not count
(it never runs). A cycle is a strongly connected component of that graph, or a module importing
itself; each is named with one way round it and the file:line of every import on the way."""
from __future__ import annotations

from pathlib import Path

from tests.pure.test_layers import PACKAGE, _module_name, _plant, imports

# module -> {module it imports: "reconciler/x/y.py:LINE", where the first such import stands}
Graph = dict[str, dict[str, str]]


def graph(root: Path) -> Graph:
    """The import graph of the package at `root`: every module (a package is its __init__.py) and
    the modules of the package it imports, at run time, wherever in it the import stands."""
    out: Graph = {}
    for path in sorted(root.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        edges = out.setdefault(_module_name(path, root), {})
        for line, target in imports(path, root, type_checking=False):
            edges.setdefault(target, f"{path.relative_to(root.parent).as_posix()}:{line}")
    return out


def _components(g: Graph) -> list[list[str]]:
    """The strongly connected components of `g` (Tarjan's), each sorted; only edges to modules in `g`."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g[v]):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            found.append(sorted(component))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def _way_round(g: Graph, component: list[str]) -> list[str]:
    """One shortest way from the component's first module back to it, inside the component."""
    start, inside = component[0], set(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v]):
                if w == start:
                    way = [v]
                    while way[-1] != start:
                        way.append(came_from[way[-1]])
                    return [start, *reversed(way[:-1]), start]
                if w in inside and w not in came_from:
                    came_from[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no way round {component}")  # a component always has one


def cycles(g: Graph) -> list[str]:
    """One line per cycle in `g`: its modules, one way round it, and where each import on it stands."""
    out = []
    for component in _components(g):
        if len(component) == 1 and component[0] not in g[component[0]]:
            continue
        way = _way_round(g, component)
        steps = "; ".join(f"{g[a][b]} imports {b}" for a, b in zip(way, way[1:]))
        out.append(f"{len(component)} module{'s' if len(component) > 1 else ''} in a cycle "
                   f"({', '.join(component)}): {' -> '.join(way)} ({steps})")
    return out


def test_the_package_has_no_import_cycle():
    g = graph(PACKAGE)
    assert {"reconciler.core.gate", "reconciler.core.sizing", "reconciler.loop.serve"} <= g.keys()  # the real tree
    found = cycles(g)
    assert found == [], "move what both sides need into a module below them:\n" + "\n".join(found)


def test_a_planted_cycle_is_named(tmp_path):
    """The check can fail: a cycle through a lazy import, a relative one and `from package import
    module` is found and named; an `if TYPE_CHECKING:` import and a chain that does not come back are not."""
    root = tmp_path / "reconciler"
    _plant(root, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/gate.py": "from reconciler.core import sizing\n",
        "core/sizing.py": ("from . import words\n"
                           "\n"
                           "\n"
                           "def size():\n"
                           "    from .gate import judge\n"
                           "    return judge\n"),
        "core/words.py": ("TYPE_CHECKING = False\n"
                          "if TYPE_CHECKING:\n"
                          "    from reconciler.core.gate import judge\n"),
        "loop/__init__.py": "",
        "loop/serve.py": ("from typing import TYPE_CHECKING\n"
                          "\n"
                          "import reconciler.core.gate\n"
                          "\n"
                          "if TYPE_CHECKING:\n"
                          "    from reconciler.loop.web import page\n"),
        "loop/web.py": "from reconciler.loop.serve import serve\n",
        "loop/self.py": "def f():\n    import reconciler.loop.self\n",
    })
    g = graph(root)
    assert g["reconciler.core.sizing"] == {"reconciler.core.words": "reconciler/core/sizing.py:1",
                                           "reconciler.core.gate": "reconciler/core/sizing.py:5"}
    assert g["reconciler.core.words"] == {} and "reconciler.loop.web" not in g["reconciler.loop.serve"]
    assert cycles(g) == [
        "2 modules in a cycle (reconciler.core.gate, reconciler.core.sizing): reconciler.core.gate -> "
        "reconciler.core.sizing -> reconciler.core.gate (reconciler/core/gate.py:1 imports reconciler.core.sizing; "
        "reconciler/core/sizing.py:5 imports reconciler.core.gate)",
        "1 module in a cycle (reconciler.loop.self): reconciler.loop.self -> reconciler.loop.self "
        "(reconciler/loop/self.py:2 imports reconciler.loop.self)",
    ]


def test_a_longer_cycle_is_named_by_its_shortest_way_round():
    g: Graph = {"a": {"b": "a.py:1"}, "b": {"c": "b.py:1", "d": "b.py:2"}, "c": {"a": "c.py:1"},
                "d": {"e": "d.py:1"}, "e": {"b": "e.py:1", "os": "e.py:2"}, "f": {"a": "f.py:1"}}
    assert cycles(g) == ["5 modules in a cycle (a, b, c, d, e): a -> b -> c -> a "
                         "(a.py:1 imports b; b.py:1 imports c; c.py:1 imports a)"]
