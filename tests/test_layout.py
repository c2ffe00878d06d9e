"""The package layout holds: no import circle anywhere in fedinit_jax/ or experiments/
(function-level imports included), so every module can be read and loaded on its own."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _modules() -> dict:
    found = {}
    for package in ("fedinit_jax", "experiments"):
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if name.endswith(".py"):
                    path = os.path.join(folder, name)
                    module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[module.removesuffix(".__init__")] = path
    return found


def _imports(module: str, path: str, modules: dict) -> set:
    """The project modules `module` imports anywhere in its file (`from a import b` is a.b
    when that is a module, else a)."""
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    edges = set()
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            edges.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                edges.add(full if full in modules else base)
    return {e for e in edges if e in modules and e != module}


def test_no_import_circle():
    modules = _modules()
    graph = {m: _imports(m, p, modules) for m, p in modules.items()}
    state, path, circles = {}, [], []

    def visit(module):
        state[module] = "open"
        path.append(module)
        for other in sorted(graph[module]):
            if state.get(other) == "open":
                circles.append(" -> ".join(path[path.index(other):] + [other]))
            elif other not in state:
                visit(other)
        path.pop()
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module)
    assert not circles, "\n".join(circles)
