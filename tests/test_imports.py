"""automon's packages import each other without a cycle, so they can be read (and tested) bottom up.

The graph has one node per package (automon/<name>/ or automon/<name>.py) and an edge A -> B for every
`import automon.B...` in A, wherever it is: an import inside a function hides a cycle from Python's
import machinery but not from a reader, so it counts too.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "automon"

# The packages whose function-local imports of automon's own modules each say why (a heavy optional
# dependency: torch, vllm, matplotlib, ...), on the import's line or the line above.
EXPLAINED = ("monitors", "backends", "ood", "probes", "report", "policy", "outdir", "subsets", "config", "evaluation",
             "pipeline", "training", "models", "data")


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "automon"


def _imports(f: Path) -> list[tuple[ast.stmt, str, bool]]:
    """(node, imported automon module, inside a function) for every import of automon in `f`."""
    tree = ast.parse(f.read_text(encoding="utf-8"))
    out: list[tuple[ast.stmt, str, bool]] = []

    def walk(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                out.extend((child, a.name, local) for a in child.names if a.name.split(".")[0] == "automon")
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and (child.module or "").split(".")[0] == "automon":
                if child.module == "automon":  # from automon import x: x is the package
                    out.extend((child, f"automon.{a.name}", local) for a in child.names)
                else:
                    out.append((child, child.module, local))  # type: ignore[arg-type]
            walk(child, inner)

    walk(tree, False)
    return out


def package_edges() -> dict[tuple[str, str], list[str]]:
    """(importer, imported) package -> the 'file:line' of each import behind the edge."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f in sorted(SRC.rglob("*.py")):
        rel = f.relative_to(SRC)
        src = rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 or rel.name != "__init__.py" else "automon"
        for node, module, _ in _imports(f):
            dst = _package(module)
            if dst != src:
                edges[(src, dst)].append(f"{rel}:{node.lineno}")
    return edges


def module_edges(src: Path = SRC) -> dict[tuple[str, str], list[str]]:
    """(importer, imported) module -> the 'file:line' of each import behind the edge, for every module of
    automon (a package is its __init__). `from automon.a import b` is an edge to automon.a.b when that is
    a module, else to automon.a; imports inside functions count, as in package_edges."""
    modules: dict[str, Path] = {}
    for f in sorted(src.rglob("*.py")):
        parts = list(f.relative_to(src.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f

    def resolve(name: str) -> str | None:
        while name not in modules and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in modules else None

    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for name, f in modules.items():
        for node, module, _ in _imports(f):
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else [""]
            for a in names:
                dst = resolve(f"{module}.{a}" if a and f"{module}.{a}" in modules else module)
                if dst and dst != name:
                    edges[(name, dst)].append(f"{f.relative_to(src)}:{node.lineno}")
    return edges


def find_cycle(edges: set[tuple[str, str]]) -> list[str] | None:
    graph: dict[str, set[str]] = defaultdict(set)
    for a, b in edges:
        graph[a].add(b)
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state and (found := visit(m)):
                return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_find_cycle_finds_one_and_only_one():
    assert find_cycle({("a", "b"), ("b", "c")}) is None
    assert find_cycle({("a", "b"), ("b", "c"), ("c", "a")}) == ["a", "b", "c", "a"]


def test_the_package_graph_has_no_cycle():
    edges = package_edges()
    cycle = find_cycle(set(edges))
    if cycle:
        steps = [f"  {a} -> {b}: {', '.join(edges[(a, b)][:3])}" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("automon's packages import each other in a cycle:\n" + "\n".join(steps))


def test_the_module_graph_has_no_cycle():
    """Inside a package too: a function-local import that only breaks a cycle between two of its modules
    (evaluation's documents -> identity -> robustness -> documents did) is a cycle a reader still follows."""
    edges = module_edges()
    cycle = find_cycle(set(edges))
    if cycle:
        steps = [f"  {a} -> {b}: {', '.join(edges[(a, b)][:3])}" for a, b in zip(cycle, cycle[1:])]
        raise AssertionError("automon's modules import each other in a cycle:\n" + "\n".join(steps))


def test_function_local_imports_of_automon_say_why():
    silent = []
    for pkg in EXPLAINED:
        files = [SRC / f"{pkg}.py"] if (SRC / f"{pkg}.py").exists() else sorted((SRC / pkg).rglob("*.py"))
        for f in files:
            lines = f.read_text(encoding="utf-8").splitlines()
            for node, _, local in _imports(f):
                here, above = lines[node.lineno - 1], lines[node.lineno - 2].strip()
                if local and "#" not in here and not above.startswith("#"):
                    silent.append(f"{f.relative_to(SRC)}:{node.lineno}: {here.strip()}")
    assert not silent, ("function-local imports of automon modules without a reason (import them at the top, or "
                        "say which heavy dependency keeps them local):\n" + "\n".join(silent))
