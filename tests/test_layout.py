"""The layout keeps data flowing one way: no import circles in ``kbench`` or
``kbench_models``, every stage imports only the stages its ``__init__`` names
("May import: ..."), ``models/`` imports nothing of kbench, and setup.cfg installs
every package. Each stage owns its logic: study files, claims, verdicts, sweep plans
and round rules are defined only in ``kbench.studies`` (``views`` renders); what a
figure means (the interval type, ratios, tolerances, peak memory, utilization) only in
``kbench.measure.stats`` and the analysis modules of ``kbench.results``; and the CLI
parses, calls and prints: it takes no store lock, runs no pre-run checks and builds no
``argparse.Namespace`` to call another command. Computed from the source with ``ast``,
imports inside functions included; nothing is imported.

The checks run first on a small package made here, with a known circle and a known
import the stage does not allow, so a checker that found nothing would fail.
"""

from __future__ import annotations

import ast
import configparser
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Set

ROOT = Path(__file__).resolve().parent.parent
# The package each top-level source folder installs as (setup.cfg: package_dir).
FOLDERS = {"kbench": "kbench", "models": "kbench_models"}


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # the module it imports, resolved to one that exists
    line: int


def modules(root: Path, folders: Dict[str, str]) -> Dict[str, Path]:
    """Dotted module name -> file, for every .py under each folder."""
    found = {}
    for folder, package in folders.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [package, *path.relative_to(root / folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


@functools.cache
def syntax_tree(path: Path) -> ast.Module:
    """The file's tree, parsed once per session (several tests read every module)."""
    return ast.parse(path.read_text(), str(path))


@functools.cache
def nodes(path: Path) -> Sequence[ast.AST]:
    """Every node of the file's tree."""
    return tuple(ast.walk(syntax_tree(path)))


def imports(found: Dict[str, Path]) -> Iterator[Import]:
    """Every import of one module of ``found`` by another (a package's own
    ``__init__`` excepted: a module importing its package is no circle)."""

    def resolve(name: str) -> Optional[str]:
        while name and name not in found:
            name = name.rpartition(".")[0]
        return name or None

    for module, path in found.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in nodes(path):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join(parts + ([node.module] if node.module else []))
                names = [f"{base}.{alias.name}" for alias in node.names] + [base]
            else:
                continue
            for target in {resolve(name) for name in names} - {None, module}:
                if not module.startswith(target + "."):
                    yield Import(module, target, node.lineno)


def circles(found: Dict[str, Path]) -> List[List[str]]:
    """The import circles (strongly connected components of two or more modules)."""
    graph: Dict[str, Set[str]] = {m: set() for m in found}
    for edge in imports(found):
        graph[edge.module].add(edge.target)
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    out: List[List[str]] = []

    def visit(node: str) -> None:  # Tarjan; the graph has ~150 nodes, recursion is fine
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def stage_of(module: str, top: str) -> str:
    """``kbench.run.runner`` -> ``kbench.run``; ``kbench_models.gluon`` -> ``kbench_models``."""
    parts = module.split(".")
    return ".".join(parts[:2] if parts[0] == top else parts[:1])


def allowed_imports(found: Dict[str, Path], top: str) -> Dict[str, Optional[Set[str]]]:
    """Each stage of ``top`` (its subpackages) with the "May import:" list of its
    ``__init__`` docstring (None: every stage)."""
    allowed: Dict[str, Optional[Set[str]]] = {}
    for module, path in found.items():
        if path.name != "__init__.py" or module.rpartition(".")[0] != top:
            continue
        doc = ast.get_docstring(syntax_tree(path)) or ""
        match = re.search(r"May import:(.*?)(?:\.\s*$|\.\s)", doc, re.S)
        assert match, f"{path}: its docstring has no 'May import: ...' sentence"
        text = match.group(1)
        if "every other stage" in text:
            allowed[module] = None
        else:
            names = re.findall(rf"\b{top}(?:\.\w+)?\b|\bkbench_models\b", text)
            allowed[module] = {name for name in names if name != top}
    return allowed


def upward_imports(found: Dict[str, Path], top: str = "kbench") -> List[str]:
    """Imports of a stage of ``top`` that its ``__init__`` does not allow, as readable lines."""
    allowed = allowed_imports(found, top)
    worst: Dict[tuple, Import] = {}  # one line per import statement and stage imported
    for edge in imports(found):
        source, target = stage_of(edge.module, top), stage_of(edge.target, top)
        if source == target or target in (top, f"{top}.{LEAF}") or source not in allowed:
            continue  # within a stage; the root (root_imports); the leaf; top-level modules
        if allowed[source] is None or target in allowed[source]:
            continue
        key = (edge.module, edge.line, target)
        if key not in worst or len(edge.target) > len(worst[key].target):
            worst[key] = edge
    out = []
    for (module, line, _), edge in sorted(worst.items()):
        source = stage_of(module, top)
        may = ", ".join(sorted(allowed[source])) or "nothing"
        path = found[module]
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
        out.append(
            f"{where}:{line}: {module} imports {edge.target}, but {source} may import only "
            f"{may}. Move the shared part down into a stage both may import."
        )
    return out


# The leaf every stage may import: the package's facts (version, project root).
LEAF = "facts"


def root_imports(found: Dict[str, Path], top: str = "kbench") -> List[str]:
    """Where a module of ``top`` reads the root package itself (``import kbench``, ``from
    kbench import __version__``) instead of a stage or the leaf (``from kbench import
    datasets`` names a stage: allowed); and any import of ``top`` by the leaf."""
    out = []
    for module, path in sorted(found.items()):
        if module == top or not module.startswith(top + "."):
            continue
        for node in nodes(path):
            if isinstance(node, ast.Import):
                named = [a.name for a in node.names if a.name == top]
            elif isinstance(node, ast.ImportFrom) and node.module == top and not node.level:
                named = [f"{top}.{a.name}" for a in node.names if f"{top}.{a.name}" not in found]
            else:
                named = []
            if module == f"{top}.{LEAF}" and isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                named += [n for n in names if n.split(".")[0] == top]
            out += [f"{module}:{node.lineno} imports {name}" for name in named]
    return out


# Names of study logic: what a study file says, how a claim is judged, how a sweep is
# planned and run, when rounds stop. Each is defined in kbench.studies and nowhere else.
STUDY_LOGIC = (
    "Study", "Claim", "ClaimOutcome", "StudyError", "load_study", "find_study",
    "evaluate_claim", "Sweep", "SweepRun", "load_sweep", "PlannedSweep", "planned_sweep",
    "run_planned", "select_runs", "ratio_stop", "run_plan",
)  # fmt: skip
# What only a stage below the CLI does: hold a store's writer lock, look at the machine
# before runs, open a runner's session; and a Namespace built to call another command.
CLI_FORBIDDEN_IMPORTS = ("kbench.run.before_runs",)
CLI_FORBIDDEN_CALLS = ("Namespace", "session", "writer_lock", "look_before_runs")


def top_level_names(path: Path) -> Set[str]:
    tree = syntax_tree(path)
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds)}


def misplaced_logic(
    found: Dict[str, Path], names: Sequence[str], home: str, top: str = "kbench"
) -> List[str]:
    """Top-level definitions of ``names`` in a stage of ``top`` other than ``home``."""
    out = []
    for module, path in sorted(found.items()):
        if not module.startswith(top + ".") or stage_of(module, top) == home:
            continue
        for name in sorted(top_level_names(path) & set(names)):
            out.append(f"{module} defines {name}: study logic belongs in {home}")
    return out


# What a figure means, defined once: the interval type (and the statistics on it) in
# kbench.measure.stats, the lowest layer (a worker's precision tracker needs it); ratios,
# tolerances and grouping in the analysis module; the readings of one result (peak memory,
# utilization, throughput by round) beside it. Each name is defined in its home only.
ANALYSIS_HOMES = {
    "kbench.measure.stats": ("MedianInterval", "median_interval", "rate_percentiles",
                             "rounds_needed"),
    "kbench.results.analysis": ("Tolerance", "differences", "what_differs", "round_ratios",
                                "half_width", "widest_ratio_half_width", "clear",
                                "quality_flags", "setup_flags", "group_key", "Spread"),
    "kbench.results.readings": ("MemoryPeak", "memory_peaks", "Utilization", "utilization",
                                "round_throughputs", "no_gpu_reason"),
}  # fmt: skip
# The copies those replaced: no module may define them again.
RETIRED_COPIES = ("RatioInterval", "memory_by_kind", "_peak", "_utilization", "_gpu_kernel_time")


def misplaced_analysis(
    found: Dict[str, Path],
    homes: Dict[str, Sequence[str]],
    retired: Sequence[str] = RETIRED_COPIES,
    top: str = "kbench",
) -> List[str]:
    """Top-level definitions of the names of ``homes`` outside the module each belongs to,
    and of a ``retired`` copy anywhere."""
    home_of = {name: home for home, names in homes.items() for name in names}
    out = []
    for module, path in sorted(found.items()):
        if not module.startswith(top + "."):
            continue
        defined = top_level_names(path)
        for name in sorted(defined & set(home_of)):
            if module != home_of[name]:
                out.append(f"{module} defines {name}: analysis defined in {home_of[name]} only")
        for name in sorted(defined & set(retired)):
            out.append(f"{module} defines {name}: a retired copy; read {_home_of_copy(name)}")
    return out


def _home_of_copy(name: str) -> str:
    return {
        "RatioInterval": "kbench.measure.stats.MedianInterval",
        "memory_by_kind": "kbench.results.readings.memory_peaks",
    }.get(name, "kbench.results.readings")


def cli_orchestration(found: Dict[str, Path], cli: str = "kbench.cli") -> List[str]:
    """What the CLI does that a stage below it should: imports of a lock or the pre-run
    checks, calls of a runner's rounds or session, an argparse.Namespace built by hand."""
    out = [
        f"{edge.module}:{edge.line} imports {edge.target}"
        for edge in imports(found)
        if edge.module.startswith(cli) and edge.target in CLI_FORBIDDEN_IMPORTS
    ]
    for module, path in sorted(found.items()):
        if not module.startswith(cli):
            continue
        for node in nodes(path):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name in CLI_FORBIDDEN_CALLS:
                    out.append(f"{module}:{node.lineno} calls {name}(...)")
    return out


# ---------------------------------------------------------------- the checkers, proven


def write(root: Path, files: Dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checkers_find_a_circle_and_an_import_the_stage_does_not_allow(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": '"""Top."""\n',
            "pkg/low/__init__.py": '"""Low stage.\n\nMay import: nothing else in pkg.\n"""\n',
            "pkg/low/a.py": "def f():\n    from pkg.high import b  # inside a function\n",
            "pkg/high/__init__.py": '"""High stage.\n\nMay import: pkg.low.\n"""\n',
            "pkg/high/b.py": "from pkg.low import a\nfrom . import c\n",
            "pkg/high/c.py": "import pkg\n",
        },
    )
    found = modules(tmp_path, {"pkg": "pkg"})
    assert circles(found) == [["pkg.high.b", "pkg.low.a"]]
    upward = upward_imports(found, top="pkg")
    assert len(upward) == 1 and "pkg.low.a imports pkg.high.b" in upward[0], upward
    assert "may import only nothing" in upward[0]


def test_the_checker_finds_a_stage_that_reads_the_root_and_a_leaf_that_imports(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": '"""Top."""\n__version__ = "1"\n',
            "pkg/facts.py": "from pkg.low import a\n",
            "pkg/low/__init__.py": '"""Low stage.\n\nMay import: nothing else in pkg.\n"""\n',
            "pkg/low/a.py": "from pkg import __version__\nfrom pkg import facts, low\n",
            "pkg/low/b.py": "import pkg\nimport pkg.low.a\n",
        },
    )
    found = modules(tmp_path, {"pkg": "pkg"})
    assert root_imports(found, top="pkg") == [
        "pkg.facts:1 imports pkg.low",
        "pkg.low.a:1 imports pkg.__version__",
        "pkg.low.b:1 imports pkg",
    ]
    assert upward_imports(found, top="pkg") == []  # the leaf is every stage's to import


def test_no_stage_reads_the_root_package_and_the_leaf_imports_nothing_of_kbench():
    assert root_imports(modules(ROOT, FOLDERS)) == []


def test_the_checkers_find_study_logic_outside_studies_and_orchestration_in_the_cli(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": '"""Top."""\n',
            "pkg/studies/__init__.py": '"""Studies."""\n',
            "pkg/studies/claims.py": "def evaluate(study, results):\n    return []\n",
            "pkg/views/__init__.py": '"""Views."""\n',
            "pkg/views/claims.py": "class Claim:\n    pass\n\n\ndef render():\n    pass\n",
            "pkg/cli/__init__.py": '"""CLI."""\n',
            "pkg/cli/go.py": "import argparse\nfrom kbench.run.before_runs import look\n"
            "def go():\n    return argparse.Namespace(file=None)\n",
        },
    )
    found = modules(tmp_path, {"pkg": "pkg"})
    assert misplaced_logic(found, STUDY_LOGIC, "pkg.studies", top="pkg") == [
        "pkg.views.claims defines Claim: study logic belongs in pkg.studies"
    ]
    found["kbench.run.before_runs"] = tmp_path / "pkg/__init__.py"  # the import's target
    said = cli_orchestration(found, cli="pkg.cli")
    assert said == [
        "pkg.cli.go:2 imports kbench.run.before_runs",
        "pkg.cli.go:4 calls Namespace(...)",
    ]


def test_the_checker_finds_analysis_defined_outside_its_home(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": '"""Top."""\n',
            "pkg/measure/__init__.py": '"""Measure."""\n',
            "pkg/measure/stats.py": "class MedianInterval:\n    pass\n",
            "pkg/results/__init__.py": '"""Results."""\n',
            "pkg/results/analysis.py": "class Tolerance:\n    pass\n\n\ndef half_width():\n"
            "    pass\n",
            "pkg/studies/__init__.py": '"""Studies."""\n',
            "pkg/studies/tune.py": "class Tolerance:\n    pass\n\n\ndef half_width():\n"
            "    pass\n\n\ndef search():\n    def half_width():\n        pass\n",
            "pkg/views/__init__.py": '"""Views."""\n',
            "pkg/views/significance.py": "class RatioInterval:\n    pass\n",
        },
    )
    found = modules(tmp_path, {"pkg": "pkg"})
    homes = {"pkg.measure.stats": ("MedianInterval",),
             "pkg.results.analysis": ("Tolerance", "half_width")}  # fmt: skip
    assert misplaced_analysis(found, homes, top="pkg") == [
        "pkg.studies.tune defines Tolerance: analysis defined in pkg.results.analysis only",
        "pkg.studies.tune defines half_width: analysis defined in pkg.results.analysis only",
        "pkg.views.significance defines RatioInterval: a retired copy; read "
        "kbench.measure.stats.MedianInterval",
    ]  # a function's own helper of the name (inside search) is no definition of it


def test_analysis_is_defined_once_in_its_home():
    found = modules(ROOT, FOLDERS)
    for home, names in ANALYSIS_HOMES.items():  # the names are still real, in their homes
        assert set(names) <= top_level_names(found[home]), (
            home,
            set(names) - top_level_names(found[home]),
        )
    assert misplaced_analysis(found, ANALYSIS_HOMES) == []


def test_no_import_circles_in_kbench_or_the_models():
    found = modules(ROOT, FOLDERS)
    assert len(found) > 100, sorted(found)  # the walk saw the whole tree
    assert circles(found) == []


def test_every_stage_imports_only_what_its_init_allows():
    found = modules(ROOT, FOLDERS)
    stages = set(allowed_imports(found, "kbench"))
    for stage in ("cli", "studies", "views", "run", "results", "measure", "backends"):
        assert f"kbench.{stage}" in stages
    assert upward_imports(found) == []


def stages_above(found: Dict[str, Path], stage: str, top: str = "kbench") -> Set[str]:
    """The stages that build on ``stage``: those whose "May import:" names it, and the
    stages that build on those, and so on (a stage allowed every other stage excepted)."""
    allowed = allowed_imports(found, top)
    above: Set[str] = set()
    todo = [stage]
    while todo:
        below = todo.pop()
        for name, may in allowed.items():
            if may is not None and below in may and name not in above | {stage}:
                above.add(name)
                todo.append(name)
    return above


def downward_only(found: Dict[str, Path], stage: str, top: str = "kbench") -> List[str]:
    """Where ``stage`` reaches a stage that builds on it: in its own "May import:" list,
    or in an import of one of its modules."""
    above = stages_above(found, stage, top)
    may = allowed_imports(found, top)[stage] or set()
    out = [f"{stage} may import {name}, which builds on it" for name in sorted(may & above)]
    worst: Dict[tuple, Import] = {}  # one line per import statement and stage imported
    for edge in imports(found):
        target = stage_of(edge.target, top)
        key = (edge.module, edge.line, target)
        if stage_of(edge.module, top) == stage and target in above:
            if key not in worst or len(edge.target) > len(worst[key].target):
                worst[key] = edge
    for edge in sorted(worst.values(), key=lambda e: (e.module, e.line)):
        out.append(f"{edge.module}:{edge.line} imports {edge.target}, which builds on {stage}")
    return out


def test_the_checker_finds_a_stage_that_reaches_one_built_on_it(tmp_path):
    write(
        tmp_path,
        {
            "pkg/__init__.py": '"""Top."""\n',
            "pkg/run/__init__.py": '"""Low.\n\nMay import: pkg.measure, pkg.dist.\n"""\n',
            "pkg/run/runner.py": "def go():\n    from pkg.dist import launcher\n",
            "pkg/dist/__init__.py": '"""High.\n\nMay import: pkg.run.\n"""\n',
            "pkg/dist/launcher.py": "from pkg.run import runner\n",
            "pkg/measure/__init__.py": '"""Lowest.\n\nMay import: nothing else in pkg.\n"""\n',
        },
    )
    found = modules(tmp_path, {"pkg": "pkg"})
    assert stages_above(found, "pkg.run", top="pkg") == {"pkg.dist"}
    assert downward_only(found, "pkg.run", top="pkg") == [
        "pkg.run may import pkg.dist, which builds on it",
        "pkg.run.runner:2 imports pkg.dist.launcher, which builds on pkg.run",
    ]
    assert downward_only(found, "pkg.measure", top="pkg") == []


def test_run_imports_no_stage_built_on_it_and_the_data_parallel_launcher_builds_on_run():
    found = modules(ROOT, FOLDERS)
    assert "kbench.distributed" in stages_above(found, "kbench.run")  # the walk sees it
    assert downward_only(found, "kbench.run") == []


def test_the_models_import_nothing_of_kbench():
    found = modules(ROOT, FOLDERS)
    edges = [e for e in imports(found) if e.module.startswith("kbench_models")]
    assert edges, "the models import nothing of each other: the walk is broken"
    assert [e for e in edges if e.target.split(".")[0] == "kbench"] == []
    for path in (ROOT / "models").rglob("*.py"):
        for node in nodes(path):
            if isinstance(node, ast.Import):
                assert all(a.name.split(".")[0] != "kbench" for a in node.names), path
            elif isinstance(node, ast.ImportFrom) and not node.level:
                assert (node.module or "").split(".")[0] != "kbench", path


def test_setup_cfg_installs_every_package():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    packages = {m for m, p in modules(ROOT, FOLDERS).items() if p.name == "__init__.py"}
    assert listed == packages, (sorted(packages - listed), sorted(listed - packages))


def test_git_ignores_no_source_file():
    """A clean checkout must hold every module: a ``.gitignore`` pattern such as an
    unanchored ``results/`` once hid ``kbench/results/`` from git, and CI failed on
    an import that passed here."""
    import shutil
    import subprocess

    if shutil.which("git") is None or not (ROOT / ".git").exists():
        import pytest

        pytest.skip("not a git checkout")
    sources = [
        str(p.relative_to(ROOT))
        for folder in ("kbench", "models", "tests", "benchmarks", "scripts")
        for p in (ROOT / folder).rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    ]
    ignored = subprocess.run(
        ["git", "check-ignore", "--no-index", "--stdin"],
        input="\n".join(sources),
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout.split()
    assert ignored == [], (
        f"git ignores these source files: {ignored}; anchor the pattern in .gitignore"
    )


def test_study_logic_lives_in_studies_and_the_cli_only_parses_calls_and_prints():
    found = modules(ROOT, FOLDERS)
    homes = [m for m in found if m.startswith("kbench.studies.")]
    defined = set().union(*(top_level_names(found[m]) for m in homes))
    assert set(STUDY_LOGIC) <= defined, sorted(set(STUDY_LOGIC) - defined)  # names still real
    assert misplaced_logic(found, STUDY_LOGIC, "kbench.studies") == []
    assert cli_orchestration(found) == []
