"""No import circles between the apps' modules.

The graph is read with `ast`, never by importing. Every import statement counts, those inside
functions too (a local import that only dodges a circle still ties the two modules together),
except those under `if TYPE_CHECKING:`, which never run.
"""

import ast
import itertools
from collections import defaultdict, deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Named so that losing one (a moved apps.py, a renamed folder) fails loudly instead of shrinking
# the graph; any other top-level package with an apps.py is found on its own.
NAMED_PACKAGES = ("footprint_site", "tenancy", "ledger", "artifacts")
SKIPPED_DIRS = {"migrations", "tests"}

Site = tuple[int, str]  # the import's line, and the function it sits in ("" outside any)
Graph = dict[str, dict[str, list[Site]]]  # module -> imported project module -> sites


def app_packages(root: Path) -> list[str]:
    return sorted(
        p.name
        for p in root.iterdir()
        if (p / "__init__.py").is_file() and (p.name in NAMED_PACKAGES or (p / "apps.py").is_file())
    )


def app_modules(root: Path) -> dict[str, Path]:
    modules = {}
    for package in app_packages(root):
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if not SKIPPED_DIRS & set(parts[:-1]) and not parts[-1].startswith(("test_", "conftest")):
                modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


class _Imports(ast.NodeVisitor):
    """Collects, for every import that can run, its candidate targets (best first) and its site."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module.split(".") if is_package else module.split(".")[:-1]
        self.scope: list[str] = []
        self.found: list[tuple[list[str], Site]] = []

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_If(self, node: ast.If) -> None:
        test = node.test  # `TYPE_CHECKING` or `typing.TYPE_CHECKING`
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        for child in node.orelse if name == "TYPE_CHECKING" else node.body + node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        site = node.lineno, ".".join(self.scope)
        self.found += [([alias.name], site) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = self.package[: len(self.package) - node.level + 1] if node.level else []
        pkg = ".".join(base + ([node.module] if node.module else []))
        site = node.lineno, ".".join(self.scope)
        self.found += [([f"{pkg}.{alias.name}", pkg], site) for alias in node.names]


def import_graph(root: Path) -> Graph:
    modules = app_modules(root)
    graph: Graph = {name: defaultdict(list) for name in modules}
    for name, path in modules.items():
        visitor = _Imports(name, path.name == "__init__.py")
        visitor.visit(ast.parse(path.read_text(), filename=str(path)))
        for candidates, site in visitor.found:
            # The deepest project module named: `pkg.name` if it is one, else `pkg` (or its parent).
            prefixes = [".".join(c.split(".")[:n]) for c in candidates for n in range(c.count(".") + 1, 0, -1)]
            target = next((p for p in prefixes if p in modules), None)
            # `from a import b, c` is one statement, shown once.
            if target is not None and site not in graph[name][target]:
                graph[name][target].append(site)
    return graph


def _reached_from(graph: Graph, start: str) -> dict[str, str]:
    """Every module reachable from `start`, mapped to the module it is first reached from."""
    came_from: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ in sorted(graph[node]):
            if succ not in came_from:
                came_from[succ] = node
                queue.append(succ)
    return came_from


def _chain(graph: Graph, cycle: list[str]) -> str:
    links = [cycle[0]]
    for source, target in itertools.pairwise(cycle):
        sites = "; ".join(
            f"line {line}, inside function {function}" if function else f"line {line}"
            for line, function in graph[source][target]
        )
        links.append(f"{target} ({sites})")
    return " -> ".join(links)


def import_circles(root: Path) -> list[str]:
    """Each self-import, and each strongly connected component of several modules."""
    graph = import_graph(root)
    reached = {module: _reached_from(graph, module) for module in graph}
    circles = [_chain(graph, [m, m]) for m in sorted(graph) if m in graph[m]]
    # A component is a set of modules that all reach each other; fine for a few hundred modules.
    components = {tuple(sorted({m} | {n for n in reached[m] if m in reached[n]})) for m in graph}
    for members in sorted(c for c in components if len(c) > 1):
        # One shortest cycle per import inside the component not yet shown, so none is missed.
        chains, shown = [], set()
        for source, target in ((s, t) for s in members for t in sorted(graph[s]) if t in members):
            if source != target and (source, target) not in shown:
                back = [source]
                while back[-1] != target:
                    back.append(reached[target][back[-1]])
                cycle = [source, *reversed(back)]
                shown.update(itertools.pairwise(cycle))
                chains.append(_chain(graph, cycle))
        circles.append(f"{len(members)} modules: {', '.join(members)}\n      " + "\n      ".join(chains))
    return circles


def test_the_apps_import_no_circles() -> None:
    assert set(NAMED_PACKAGES) <= set(app_packages(ROOT))
    if circles := import_circles(ROOT):
        pytest.fail(
            f"{len(circles)} import circle(s); each (line ...) is the import statement in the"
            " module before the arrow:\n  " + "\n  ".join(circles),
            pytrace=False,
        )


# Which app may import which: the site's shared rules below everything, tenancy below the rooms,
# and the artifact store beside the ledger, never on it (docs/architecture.md).
MAY_NOT_IMPORT = {"tenancy": ("ledger", "artifacts"), "artifacts": ("ledger",)}


def test_the_apps_depend_one_way() -> None:
    crossings = [
        f"{module} -> {target} (line {line})"
        for module, targets in import_graph(ROOT).items()
        for target, sites in targets.items()
        for line, _ in sites
        if target.split(".")[0] in MAY_NOT_IMPORT.get(module.split(".")[0], ())
    ]
    assert not crossings, "imports against the apps' direction:\n  " + "\n  ".join(crossings)


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_the_checker_finds_a_circle_through_a_function_local_import(tmp_path: Path) -> None:
    files = {
        "shop/__init__.py": "",
        "shop/apps.py": "",
        "shop/orders.py": "from shop.stock import reserve\n",
        "shop/stock.py": "def reserve():\n    from .orders import total\n",
        "shop/basket.py": "import shop.basket\n",
    }
    assert import_circles(_write(tmp_path, files)) == [
        "shop.basket -> shop.basket (line 1)",
        "2 modules: shop.orders, shop.stock\n"
        "      shop.orders -> shop.stock (line 1) -> shop.orders (line 2, inside function reserve)",
    ]


def test_the_checker_ignores_type_checking_imports_and_passes_a_clean_tree(tmp_path: Path) -> None:
    files = {
        "shop/__init__.py": "from shop import orders\n",
        "shop/apps.py": "",
        "shop/orders.py": "import shop.stock\nfrom . import stock\n",
        "shop/stock.py": "import typing\nif typing.TYPE_CHECKING:\n    from shop.orders import Order\n",
        "shop/migrations/0001_initial.py": "from shop import stock\nfrom shop import orders\n",
        "shop/tests/test_stock.py": "from shop import stock, orders\n",
    }
    graph = import_graph(_write(tmp_path, files))
    assert sorted(graph) == ["shop", "shop.apps", "shop.orders", "shop.stock"]
    assert graph["shop.orders"] == {"shop.stock": [(1, ""), (2, "")]}
    assert import_circles(tmp_path) == []
