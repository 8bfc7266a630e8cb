"""The package's import graph, drawn from the code: every arrow points down the layer
order of madara_cli/layers.py, no imports make a circle, and no two modules share a
file name.

Every import counts: module level, inside functions, under ``TYPE_CHECKING``, and
``import_module("...")`` / ``__import__("...")`` calls whose name is a string. An
f-string name (``f"madara_cli.strategies.{name}"``) counts as an import of the package
its literal start names for the layer order; which module of it loads is not known, so
it draws no arrow into the circle check."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from madara_cli.layers import LAYERS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "madara_cli"

# Imports allowed to break the order, as (importer, imported) -> why: none. An entry the
# code no longer has fails test_known_list_is_current, so the list can only shrink.
KNOWN: dict[tuple[str, str], str] = {}

# Module file names allowed twice (besides __init__.py): none.
KNOWN_TWINS: set[str] = set()


# --------------------------------------------------------------------------- #
# Reading the graph
# --------------------------------------------------------------------------- #


def package_modules(root: Path, package: str) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under ``root/package``."""
    modules = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The module of the package that importing ``name`` runs: ``name`` itself, or its
    longest parent that is a module (``pkg.mod.attr`` -> ``pkg.mod``)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in modules:
            return candidate
        parts.pop()
    return None


def _string_target(node: ast.expr) -> str | None:
    """The module name an ``import_module``/``__import__`` argument names, if it is a
    string; for an f-string, the package its literal start names."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        head = str(node.values[0].value)
        return head.rsplit(".", 1)[0] if "." in head else None
    return None


def imports_of(module: str, path: Path, modules: dict[str, Path], dynamic: bool = True) -> set[str]:
    """The package's modules that ``module`` (file ``path``) imports, anywhere in it;
    ``dynamic``: with the packages that f-string names in ``import_module`` start with."""
    is_package = path.name == "__init__.py"
    here = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = here.split(".")
                base_parts = base_parts[: len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                names.append(sub if sub in modules else base)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
            if called in ("import_module", "__import__"):
                target = _string_target(node.args[0])
                if target and (dynamic or not isinstance(node.args[0], ast.JoinedStr)):
                    names = [target]
        for name in names:
            target = _resolve(name, modules)
            if target and target != module:
                found.add(target)
    return found


def import_graph(root: Path = ROOT, package: str = PACKAGE, dynamic: bool = True) -> dict[str, set[str]]:
    modules = package_modules(root, package)
    return {m: imports_of(m, p, modules, dynamic) for m, p in modules.items()}


def layer_of(module: str, layers=LAYERS, package: str = PACKAGE) -> int | None:
    """Index in ``layers`` of the longest entry naming ``module`` or a parent of it."""
    if module == package:
        return 0
    rel = module[len(package) + 1 :]
    best: tuple[int, int] | None = None  # (entry length, layer)
    for i, layer in enumerate(layers):
        for entry in layer:
            if (rel == entry or rel.startswith(entry + ".")) and (best is None or len(entry) > best[0]):
                best = (len(entry), i)
    return None if best is None else best[1]


def upward_imports(graph: dict[str, set[str]], layers=LAYERS, package: str = PACKAGE, known=()) -> list[str]:
    out = []
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            if (src, dst) in known:
                continue
            a, b = layer_of(src, layers, package), layer_of(dst, layers, package)
            if a is not None and b is not None and b > a:
                out.append(f"{src} (layer {a}) imports {dst} (layer {b})")
    return out


def circles(graph: dict[str, set[str]], known=()) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), sorted."""
    edges = {m: sorted(d for d in ds if (m, d) not in known and d in graph) for m, ds in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
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
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def _describe(component: list[str], graph: dict[str, set[str]], known=()) -> str:
    members = set(component)
    arrows = [f"{a} -> {b}" for a in component for b in sorted(graph[a]) if b in members and (a, b) not in known]
    return "circle: " + "; ".join(arrows)


# --------------------------------------------------------------------------- #
# The package
# --------------------------------------------------------------------------- #


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph()


def test_every_module_has_a_layer(graph):
    missing = [m for m in sorted(graph) if layer_of(m) is None]
    assert not missing, f"modules with no layer in madara_cli/layers.py: {missing}"


def test_layer_entries_name_real_modules(graph):
    for layer in LAYERS:
        for entry in layer:
            assert f"{PACKAGE}.{entry}" in graph, f"madara_cli/layers.py names {entry}, which is no module of the package"


def test_layer_entries_appear_once():
    entries = [e for layer in LAYERS for e in layer]
    assert len(entries) == len(set(entries)), entries


def test_no_import_points_up(graph):
    bad = upward_imports(graph, known=KNOWN)
    assert not bad, "imports that point up the order of madara_cli/layers.py:\n" + "\n".join(bad)


def room_of(module: str, layers=LAYERS, package: str = PACKAGE) -> str | None:
    """The entry of ``layers`` that places ``module`` (a room: a top-level module or package)."""
    rel = module[len(package) + 1 :]
    names = [e for layer in layers for e in layer if rel == e or rel.startswith(e + ".")]
    return max(names, key=len) if names else None


def test_rooms_of_one_layer_do_not_import_each_other(graph):
    """A layer is a floor: its rooms import only the layers below (and themselves), so the
    house is as tall as the order is long."""
    bad = []
    for src in sorted(graph):
        for dst in sorted(graph[src]):
            a, b = room_of(src), room_of(dst)
            if a and b and a != b and layer_of(src) == layer_of(dst):
                bad.append(f"{src} ({a}) imports {dst} ({b}), a room of its own layer")
    assert not bad, "\n".join(bad)
    assert len(LAYERS) <= 11, f"{len(LAYERS)} floors; the house aims at 11 or fewer"


def test_no_import_circle():
    graph = import_graph(dynamic=False)
    found = circles(graph, known=KNOWN)
    assert not found, "\n".join(_describe(c, graph, KNOWN) for c in found)


def test_known_list_is_current(graph):
    stale = [f"{a} -> {b}" for a, b in KNOWN if b not in graph.get(a, set())]
    assert not stale, f"KNOWN names imports the code no longer has; remove them: {stale}"


def test_module_file_names_are_unique():
    by_name = defaultdict(list)
    for path in (ROOT / PACKAGE).rglob("*.py"):
        if path.name != "__init__.py":
            by_name[path.name].append(str(path.relative_to(ROOT)))
    twins = {name: sorted(paths) for name, paths in by_name.items() if len(paths) > 1}
    assert not {n: p for n, p in twins.items() if n not in KNOWN_TWINS}, f"module file names used twice: {twins}"
    assert not KNOWN_TWINS - set(twins), f"KNOWN_TWINS names files no longer used twice; remove them: {KNOWN_TWINS - set(twins)}"


# --------------------------------------------------------------------------- #
# The reader itself, on a package made for the purpose
# --------------------------------------------------------------------------- #


def _toy(tmp_path: Path, files: dict[str, str], dynamic: bool = True) -> dict[str, set[str]]:
    for rel, text in files.items():
        p = tmp_path / "toy" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return import_graph(tmp_path, "toy", dynamic)


TOY_LAYERS = (("core",), ("mid",), ("top",))


def test_reader_sees_every_kind_of_import(tmp_path):
    graph = _toy(
        tmp_path,
        {
            "__init__.py": "",
            "core.py": "def f():\n    from toy.top import thing\n",  # lazy import, up
            "mid/__init__.py": "",
            "mid/a.py": "from . import b\nfrom ..core import f\n",  # relative imports
            "mid/b.py": "import importlib\nM = importlib.import_module('toy.top')\n",
            "mid/c.py": "def g(x):\n    __import__(f'toy.mid.{x}')\n",  # f-string: the package
            "top.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import toy.mid.a\n",
        },
    )
    assert graph["toy.core"] == {"toy.top"}
    assert graph["toy.mid.a"] == {"toy.mid.b", "toy.core"}
    assert graph["toy.mid.b"] == {"toy.top"}
    assert graph["toy.mid.c"] == {"toy.mid"}
    assert graph["toy.top"] == {"toy.mid.a"}
    up = upward_imports(graph, TOY_LAYERS, "toy")
    assert up == ["toy.core (layer 0) imports toy.top (layer 2)", "toy.mid.b (layer 1) imports toy.top (layer 2)"]
    assert upward_imports(graph, TOY_LAYERS, "toy", known={("toy.core", "toy.top"), ("toy.mid.b", "toy.top")}) == []
    fixed = import_graph(tmp_path, "toy", dynamic=False)  # what the circle check reads
    assert fixed["toy.mid.c"] == set() and fixed["toy.mid.b"] == {"toy.top"}


def test_reader_finds_a_circle_within_one_layer(tmp_path):
    graph = _toy(
        tmp_path,
        {
            "__init__.py": "",
            "mid/__init__.py": "",
            "mid/a.py": "from toy.mid.b import x\n",
            "mid/b.py": "def x():\n    from toy.mid import a\n",
            "mid/c.py": "from toy.mid.a import y\n",
        },
    )
    assert upward_imports(graph, TOY_LAYERS, "toy") == []
    assert circles(graph) == [["toy.mid.a", "toy.mid.b"]]
    assert circles(graph, known={("toy.mid.b", "toy.mid.a")}) == []


def test_layer_of_takes_the_longest_entry():
    layers = (("a",), ("a.b",))
    assert layer_of("p.a.x", layers, "p") == 0
    assert layer_of("p.a.b.c", layers, "p") == 1
    assert layer_of("p.ab", layers, "p") is None
    assert layer_of("p", layers, "p") == 0
