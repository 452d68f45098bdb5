"""The tree's layers point one way: no import cycles, each package of ``loglake`` imports only
the packages below it in the declared order (docs/architecture.md, "Packages and layer order"),
``loglake`` never imports ``spark_jobs``, the library never imports the CLI, Spark jobs
(``loglake.jobs.registry``) share code through shared modules, never by importing one another.

Every import counts, also those inside functions (a lazy import is still a dependency):
the graph is read from the source with ``ast``, nothing is imported.
``python -m tests.unit.test_layers`` prints the graph's cycles (none) and its edges.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

from loglake.jobs.registry import APPLICATIONS
from loglake.jobs.registry import JOBS as REGISTRY

ROOT = Path(__file__).resolve().parents[2]
# Package roots: (directory that is on sys.path, top-level packages or modules under it).
SOURCES = [(ROOT, ["loglake", "spark_jobs", "bench", "soak", "dags"]), (ROOT / "plugins", ["loglake_airflow", "loglake_view"])]
JOBS = {job.module for job in REGISTRY.values()}
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def declared_layers() -> list[set[str]]:
    """The packages of ``loglake``, lowest layer first, as docs/architecture.md declares them:
    the fenced block after the heading "Packages and layer order", one layer per line
    (``1. core``, ``5. speed, maintenance, lifecycle, ops``)."""
    text = ARCHITECTURE.read_text()
    section = text.split("## Packages and layer order", 1)[1]
    block = section.split("```", 2)[1]
    layers = []
    for line in block.splitlines():
        m = re.match(r"\s*\d+\.\s+(.+?)\s*(#.*)?$", line)
        if m:
            layers.append({f"loglake.{name.strip()}" for name in m.group(1).split(",")})
    return layers


def package_of(module: str) -> str:
    """``loglake.<package>`` for a module of the library (``loglake.cli`` is its own)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def project_modules() -> dict[str, Path]:
    """Module name → file of every project module (DAG files as ``dags.<stem>``)."""
    out = {}
    for base, tops in SOURCES:
        for top in tops:
            single = base / f"{top}.py"
            if single.is_file():
                out[top] = single
            for f in sorted((base / top).rglob("*.py")) if (base / top).is_dir() else []:
                parts = list(f.relative_to(base).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                out[".".join(parts)] = f
    return out


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` refers to (itself, or the package holding it), if any."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(path: Path, package: str, modules: dict[str, Path]) -> list[tuple[str, bool]]:
    """Every name ``path`` imports, and whether at its top (module level, also under an
    ``if``/``try`` there) rather than inside a function or class."""
    tree = ast.parse(path.read_text(), str(path))
    top = {id(x) for n in tree.body for x in (ast.walk(n) if isinstance(n, (ast.If, ast.Try)) else [n])}
    out = []
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            targets = [f"{base}.{a.name}" for a in node.names]
            # ``from pkg import module`` depends on the module, not on what pkg/__init__ defines.
            if not all(t in modules for t in targets):
                targets.append(base)
        out.extend((t, id(node) in top) for t in targets)
    return out


def import_graph(top_only: bool = False) -> dict[str, set[str]]:
    """Module → the project modules it imports (anywhere in its body; ``top_only``: at its top)."""
    modules = project_modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for name, at_top in imports(path, package, modules):
            found = _resolve(name, modules)
            if found and found != mod and (at_top or not top_only):
                graph[mod].add(found)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_every_package_imports_only_those_below_it():
    layers = declared_layers()
    rank = {pkg: i for i, layer in enumerate(layers) for pkg in layer}
    library = {package_of(m) for m in project_modules() if m.startswith("loglake.")}
    assert library - set(rank) == set(), "packages missing from docs/architecture.md's layer order"
    graph = import_graph()
    upward = sorted((m, d) for m, deps in graph.items() if m.startswith("loglake.") for d in deps
                    if d.startswith("loglake.") and package_of(d) != package_of(m)
                    and rank[package_of(d)] >= rank[package_of(m)])
    assert upward == []


def test_the_library_never_imports_spark_jobs():
    graph = import_graph()
    offenders = {m: sorted(d for d in deps if d.startswith("spark_jobs")) for m, deps in graph.items()
                 if m.split(".")[0] == "loglake" and any(d.startswith("spark_jobs") for d in deps)}
    assert offenders == {}


def test_every_registered_job_has_its_module():
    modules = project_modules()
    assert {job.module for job in REGISTRY.values()} <= set(modules)
    assert all(job.application.is_file() for job in REGISTRY.values())


def test_the_library_never_imports_the_cli():
    graph = import_graph()
    cli = {m for m in graph if m == "loglake.cli" or m.startswith("loglake.cli.")}
    offenders = {m: sorted(deps & cli) for m, deps in graph.items()
                 if deps & cli and m not in cli and m != "loglake.__main__"}
    assert offenders == {}


def test_spark_jobs_do_not_import_one_another():
    graph = import_graph()
    crossing = {m: sorted(graph[m] & JOBS) for m in JOBS if graph[m] & JOBS}
    assert crossing == {}


def test_the_library_and_spark_jobs_never_import_airflow_code():
    graph = import_graph()
    airflow_side = {m for m in graph if m.startswith(("loglake_airflow", "loglake_view", "dags."))}
    offenders = {m: sorted(graph[m] & airflow_side) for m in graph
                 if m.startswith(("loglake", "spark_jobs")) and not m.startswith("loglake_")
                 and graph[m] & airflow_side}
    assert offenders == {}


SPARK_LIBRARIES = ("pyspark", "delta", "py4j")


def declared_spark_halves() -> tuple[set[str], set[str]]:
    """The Spark modules docs/architecture.md lists ("Where Spark code lives": ``package: module,
    ...`` per line), and those its ``deferred:`` line allows to import Spark inside a function."""
    block = ARCHITECTURE.read_text().split("## Where Spark code lives", 1)[1].split("```", 2)[1]
    spark, deferred = set(), set()
    for line in block.strip().splitlines():
        package, _, names = line.partition(":")
        for name in (n.strip() for n in names.split(",")):
            if package.strip() == "deferred":
                deferred.add(f"loglake.{name}")
            else:
                spark.add(f"loglake.{package.strip()}.{name}")
    return spark, deferred


# Libraries that take a second or more to import: the command line's start and DAG parsing never
# load them (a module they load imports such a library inside the function that needs it).
HEAVY_LIBRARIES = (*SPARK_LIBRARIES, "pyarrow", "deltalake", "boto3", "great_expectations", "pandas")


def spark_imports(libraries: tuple[str, ...] = SPARK_LIBRARIES) -> tuple[set[str], set[str]]:
    """The project's modules that import one of ``libraries`` at their top, and those that do
    inside a function."""
    top, inside = set(), set()
    modules = project_modules()
    for mod, path in modules.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for name, at_top in imports(path, package, modules):
            if name.split(".")[0] in libraries:
                (top if at_top else inside).add(mod)
    return top, inside


def test_the_spark_halves_are_the_declared_modules_and_import_spark_at_their_top():
    declared, deferred = declared_spark_halves()
    top, inside = spark_imports()
    library = {m for m in top | inside if m.startswith("loglake.")}
    assert {m for m in top if m.startswith("loglake.")} == declared
    assert library - declared - deferred == set(), "Spark imported inside a function outside the declared modules"
    assert declared <= set(project_modules())


def test_starting_the_cli_or_parsing_dags_loads_no_spark_module_nor_a_heavy_library():
    graph = import_graph(top_only=True)
    top, _ = spark_imports(HEAVY_LIBRARIES)
    starts = ["loglake.cli", *(m for m in graph if m.startswith(("dags.", "loglake_airflow", "loglake_view")))]
    seen, todo = set(), list(starts)
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(graph[m])
    assert seen & top == set()
    assert "loglake.cli" in seen and len(seen) > 20  # the walk followed the imports


def test_spark_jobs_holds_only_entry_points():
    """Each file under spark_jobs/ is a few lines calling into a component (no code of its own)."""
    for path in (ROOT / "spark_jobs").glob("*.py"):
        if path.name == "__init__.py":
            continue
        tree = ast.parse(path.read_text())
        defined = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert defined == [] and len(path.read_text().splitlines()) <= 15, path
    # Each a job of the registry, or one of its long-lived applications, which runs its module.
    applications = {job.application.name for job in REGISTRY.values()} | {a.path.name for a in APPLICATIONS.values()}
    assert {p.name for p in (ROOT / "spark_jobs").glob("*.py")} == applications | {"__init__.py"}
    for app in APPLICATIONS.values():
        assert f"from {app.module} import " in app.path.read_text(), app


if __name__ == "__main__":
    g = import_graph()
    found = cycles(g)
    print(f"{len(g)} modules, {sum(len(d) for d in g.values())} import edges, {len(found)} cycle(s)")
    for c in found:
        print("cycle: " + " ↔ ".join(c))
    if "-v" in sys.argv:
        for m in sorted(g):
            print(f"{m} -> {', '.join(sorted(g[m])) or '-'}")
