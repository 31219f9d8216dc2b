"""The import graph of gpstudy has no cycle, and config flows one way (issue #28, item 1).

Every ``import``/``from ... import`` of a gpstudy module, at the top of a file or inside a function,
is an edge (``from gpstudy.x import y`` points at ``gpstudy.x.y`` when that is a module); a package
is its ``__init__``. Config flows config.yaml -> gpstudy.study -> rules and scripts -> gpstudy.training
-> methods: the study never imports training or the command line, training never the command line.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpstudy"
DOWNSTREAM = {  # a package -> what it must never import (the arrow would run back up)
    "gpstudy.study": ("gpstudy.training", "gpstudy.cli"),
    "gpstudy.training": ("gpstudy.cli",),
}


def module_files(root: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package, dotted name -> file (a package's name -> its __init__.py)."""
    modules = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the gpstudy modules it imports (anywhere in its file)."""
    graph = {}
    for name, path in modules.items():
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets |= {f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                            for alias in node.names}
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str]:
    """One cycle of the graph as a path ``[a, b, ..., a]``, or [] if it has none (depth-first search)."""
    state: dict[str, str] = {}  # module -> "open" while on the search path, "done" after
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = "open"
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                return path[path.index(target):] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        state[node] = "done"
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_the_cycle_finder_finds_a_cycle_and_only_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_package_imports_form_no_cycle():
    graph = import_graph(module_files())
    assert "gpstudy.study.settings" in graph["gpstudy.study.validate"]  # the graph sees the package's imports
    assert find_cycle(graph) == [], "import cycle: " + " -> ".join(find_cycle(graph))


def test_config_flows_one_way():
    graph = import_graph(module_files())
    back = [(module, target) for module, targets in graph.items() for package, banned in DOWNSTREAM.items()
            if module == package or module.startswith(package + ".")
            for target in targets if target.startswith(banned)]
    assert back == []
