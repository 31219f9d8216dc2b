"""The import graph of gpstudy has no cycle, its wings are layered, and no wing reaches into another's internals.

Every ``import``/``from ... import`` of a gpstudy module, at the top of a file or inside a function,
is an edge (``from gpstudy.x import y`` points at ``gpstudy.x.y`` when that is a module); a package
is its ``__init__``. A wing is a top-level module or folder of the package. A module imports its own wing
and the wings of the layers below its own (:data:`LAYERS`), never one of its layer or above: so ``linalg``
imports no kernels, likelihoods, methods, nets, training, study or report; ``runtime`` only the base modules;
``study`` never ``report`` or ``training``; and config flows one way, config.yaml -> ``gpstudy.study`` -> rules
and scripts -> ``gpstudy.training`` -> methods.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpstudy"
LAYERS = [  # the wings, lowest first: a wing imports only the wings of the layers below its own
    {"gpstudy", "io", "paths", "numerics", "generators"},  # the base modules
    {"runtime"},  # the machine: devices, process flags, host syncs, the job's process, its environment
    {"linalg", "data"},
    {"kernels", "likelihoods", "gaussian"},
    {"metrics", "nets"},
    {"methods", "paper"},
    {"study"},
    {"training", "report"},
    {"diagnostics", "notebook"},
    {"cli"},
    {"__main__"},  # python -m gpstudy: the cli's main
]


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
                targets |= {
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                    for alias in node.names
                }
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
                return path[path.index(target) :] + [target]
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


def wing(module: str) -> str:
    """The wing of a dotted module name: ``gpstudy.linalg.factor`` -> ``linalg``; the package itself -> gpstudy."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of(name: str) -> int:
    return next(index for index, wings in enumerate(LAYERS) if name in wings)


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(module, target) for each import of a wing of the module's own layer or above, other than its own."""
    return sorted(
        (module, target)
        for module, targets in graph.items()
        for target in targets
        if wing(module) != wing(target) and layer_of(wing(target)) >= layer_of(wing(module))
    )


def test_every_wing_has_a_layer():
    wings = {wing(module) for module in module_files()}
    assert wings == set().union(*LAYERS)


def test_the_layer_check_finds_an_import_up_or_across():
    assert upward_imports({"gpstudy.linalg.factor": {"gpstudy.kernels.base", "gpstudy.numerics"}}) == [
        ("gpstudy.linalg.factor", "gpstudy.kernels.base")
    ]
    assert upward_imports({"gpstudy.study.jobs": {"gpstudy.report.tables"}}) == [
        ("gpstudy.study.jobs", "gpstudy.report.tables")
    ]
    assert upward_imports({"gpstudy.runtime.job": {"gpstudy.io", "gpstudy.runtime.devices"}}) == []


def test_each_wing_imports_only_the_layers_below_it():
    graph = import_graph(module_files())
    assert upward_imports(graph) == []


def private_reaches(modules: dict[str, Path]) -> list[str]:
    """``file:line name`` for each private name (``_x``) a module takes from another wing: imported by name, or
    read as an attribute of a module of another wing that it imported."""
    found = []
    for name, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        bound = {}  # local name -> the gpstudy module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module in modules:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if target in modules:
                        bound[alias.asname or alias.name] = target
                    elif alias.name.startswith("_") and wing(node.module) != wing(name):
                        found.append(f"{path.name}:{node.lineno} {node.module}.{alias.name}")
            elif isinstance(node, ast.Import):
                bound.update(
                    {alias.asname: alias.name for alias in node.names if alias.asname and alias.name in modules}
                )
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
                and node.value.id in bound
                and wing(bound[node.value.id]) != wing(name)
            ):
                found.append(f"{path.name}:{node.lineno} {bound[node.value.id]}.{node.attr}")
    return found


def test_the_private_check_finds_a_reach_into_another_wing(tmp_path):
    (tmp_path / "gpstudy" / "linalg").mkdir(parents=True)
    (tmp_path / "gpstudy" / "methods").mkdir()
    for file in ("__init__.py", "linalg/__init__.py", "linalg/products.py", "methods/__init__.py"):
        (tmp_path / "gpstudy" / file).write_text("")
    (tmp_path / "gpstudy" / "methods" / "svgp.py").write_text(
        "from gpstudy.linalg import products\nfrom gpstudy.linalg.products import _into\nproducts._halves(1)\n"
    )
    (tmp_path / "gpstudy" / "linalg" / "factor.py").write_text("from gpstudy.linalg.products import _into\n")
    assert private_reaches(module_files(tmp_path / "gpstudy")) == [
        "svgp.py:2 gpstudy.linalg.products._into",
        "svgp.py:3 gpstudy.linalg.products._halves",
    ]


def test_no_wing_reaches_into_another_wing_s_internals():
    assert private_reaches(module_files()) == []
