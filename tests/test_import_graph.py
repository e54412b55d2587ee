"""The project's modules import each other without a cycle (DESIGN.md §10: floors, never upward).

Every import of a project module counts: module-level, function-local and
`if TYPE_CHECKING:`. A function-local import hides a cycle from the
interpreter, not from the design, so a shared helper moves down into a lower
module instead (runs.episode_records, simulator.run_facts). The few
deliberately lazy imports are listed in LAZY with the reason; they still count
in the cycle check: being lazy is allowed, closing a cycle is not.
"""

from __future__ import annotations

import ast
import functools
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "connectors", "runs", "simulator", "lucia_site")

# (importer, imported) -> why the import is inside a function. Anything else function-local fails
# test_every_function_local_import_is_a_deliberate_lazy_one.
LAZY = {
    # AppConfig modules load while the app registry fills: models, and modules that import them, wait for ready().
    ("agents.apps", "agents.roles"): "post_migrate receiver; roles reads the auth models",
    ("runs.apps", "runs.answers"): "ready() registers the built-in answers to escalations",
    ("runs.apps", "runs.approvals"): "ready() registers the built-in answers to escalations",
    ("runs.apps", "runs.qworkers"): "ready() installs the lock-free wait only when LUCIA_Q_LOCK_FREE_WAIT is set",
    ("runs.apps", "runs.heartbeats"): "django-q2 post_spawn receiver",
    ("lucia_site.apps", "lucia_site.checks"): "ready() registers the system checks",
    ("lucia_site.apps", "lucia_site.webhooks.checks"): "ready() registers the system checks",
    ("lucia_site.studio", "lucia_site.dashboard"): "the admin site loads with the app registry, before models",
    # Heavy or optional dependencies.
    ("runs.llm.providers", "runs.llm.openai_provider"): "a scripted-only deployment never loads the openai SDK",
    ("simulator.scorecards", "simulator.engine"): "scorecards loads with the admin and API; the engine is the runtime",
    # The worker and dispatcher load without the model layer; the episode body pulls it in on first use.
    ("runs.execution", "runs.loop"): "the model layer is imported on the first episode",
    ("runs.execution", "runs.tool_executor"): "the model layer is imported on the first episode",
    ("runs.execution", "runs.human_sends"): "the model layer is imported on the first episode",
}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int
    function: str | None  # None: at module level
    type_checking: bool
    implied: bool = False  # a parent package that `import a.b.c` runs first

    def describe(self) -> str:
        where = f"in {self.function}()" if self.function else "module level"
        if self.type_checking:
            where += ", TYPE_CHECKING"
        if self.implied:
            where += ", parent package"
        return f"{self.importer} -> {self.imported} (line {self.line}, {where})"


@functools.cache
def project_modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _module_of(name: str, modules: dict[str, Path]) -> str | None:
    """The project module `name` lands on (the longest prefix that is one), None for a third-party name."""
    parts = name.split(".")
    while parts:
        if ".".join(parts) in modules:
            return ".".join(parts)
        parts.pop()
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, path: Path,
                    modules: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([node.module] if node.module else []))
    # `from a import b` imports the submodule a.b when there is one, else a name defined in a.
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]


@functools.cache
def imports_of(module: str) -> tuple[Import, ...]:
    modules = project_modules()
    path = modules[module]
    found: list[Import] = []

    def visit(node: ast.AST, function: str | None, type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                visit(child, function or child.name, type_checking)
            elif isinstance(child, ast.If) and _is_type_checking(child.test):
                for statement in child.body:
                    visit(ast.Module(body=[statement], type_ignores=[]), function, True)
                for statement in child.orelse:
                    visit(ast.Module(body=[statement], type_ignores=[]), function, type_checking)
            elif isinstance(child, ast.Import | ast.ImportFrom):
                for name in _imported_names(child, module, path, modules):
                    target = _module_of(name, modules)
                    if target is None or target == module:
                        continue
                    found.append(Import(module, target, child.lineno, function, type_checking))
                    # Importing a.b.c runs a/__init__ and a/b/__init__ first, unless `module` lives inside them.
                    parts = target.split(".")
                    for depth in range(1, len(parts)):
                        parent = ".".join(parts[:depth])
                        if parent in modules and not (module + ".").startswith(parent + "."):
                            found.append(Import(module, parent, child.lineno, function, type_checking, implied=True))
            else:
                visit(child, function, type_checking)

    visit(ast.parse(path.read_text(), filename=str(path)), None, False)
    return tuple(found)


@functools.cache
def import_graph() -> dict[str, dict[str, Import]]:
    """importer -> imported -> the first import that makes the edge."""
    graph: dict[str, dict[str, Import]] = defaultdict(dict)
    for module in project_modules():
        for edge in imports_of(module):
            graph[module].setdefault(edge.imported, edge)
    return graph


def cycles(graph: dict[str, dict[str, object]] | dict[str, set[str]]) -> list[list[str]]:
    """The shortest cycle through each module not on an earlier one, as [a, b, ..., a]."""
    found, seen = [], set()
    for start in sorted(graph):
        if start in seen:
            continue
        # Breadth-first from `start` back to itself: the shortest cycle through it, if any.
        parents: dict[str, str] = {}
        queue, closing = [start], None
        while queue and closing is None:
            following = []
            for node in queue:
                for target in sorted(graph.get(node, ())):
                    if target == start:
                        closing = node
                        break
                    if target not in parents:
                        parents[target] = node
                        following.append(target)
                if closing is not None:
                    break
            queue = following
        if closing is None:
            continue
        cycle = [start]
        node = closing
        while node != start:
            cycle.append(node)
            node = parents[node]
        cycle = [start] + cycle[1:][::-1] + [start]
        seen |= set(cycle)
        found.append(cycle)
    return found


def test_the_project_modules_import_each_other_without_a_cycle():
    graph = import_graph()
    named = ["\n  ".join(graph[a][b].describe() for a, b in zip(cycle, cycle[1:], strict=False))
             for cycle in cycles(graph)]
    assert not named, "import cycles (move the shared helpers down into a lower module):\n  " + "\n\n  ".join(named)


def test_every_function_local_import_is_a_deliberate_lazy_one():
    local = {(edge.importer, edge.imported): edge for module in project_modules() for edge in imports_of(module)
             if edge.function and not edge.implied and not edge.type_checking}
    unlisted = sorted(edge.describe() for key, edge in local.items() if key not in LAZY)
    assert not unlisted, "function-local imports (move them to the top, or list them in LAZY with why):\n" + \
        "\n".join(unlisted)
    assert not set(LAZY) - set(local), f"LAZY lists imports that are no longer lazy: {sorted(set(LAZY) - set(local))}"


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "runs.outbound" in graph["runs.tools"]  # from runs import outbound (a submodule)
    assert "runs.models" in graph["runs.tools"]  # from runs.models import Task (a name in a package)
    # from runs.policy import memory: runs/policy/__init__ runs first.
    assert any(edge.implied and edge.imported == "runs.policy" for edge in imports_of("runs.answers"))
    assert graph["runs.apps"]["runs.heartbeats"].function == "_worker_spawned"
    assert graph["simulator.persona_traits"]["simulator.documents"].function is None


def test_a_cycle_is_named_from_its_first_module_back_to_it():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
