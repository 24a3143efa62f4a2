"""The import graph between vlgate's packages points down the layers of ARCHITECTURE.md,
lazy imports inside functions included (they are cycles all the same)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: package folder → the vlgate packages it may import (besides itself and the root modules)
ALLOWED = {
    "evaluators": set(),
    "dashboards": {"evaluators", "tracking"},
    "registry_hooks": {"evaluators", "tracking"},
    "gate": {"evaluators"},
    "flows": {"evaluators", "tracking", "gate", "dashboards", "registry_hooks"},
    "cli": {"evaluators", "tracking", "gate", "dashboards", "registry_hooks", "flows"},
}
ROOT_MODULES = {"config", "decisions", "history", "home", "power_plan", "tag_keys", "text", "values", "versions", "__init__"}


def imported_names(path: Path) -> set[str]:
    """Every module (and ``module.name``) this file imports, anywhere in it: inside
    functions and under ``TYPE_CHECKING`` too."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def imported_vlgate_packages(path: Path) -> set[str]:
    """The second component of every ``vlgate.X`` this file imports, anywhere in it."""
    return {name.split(".")[1] for name in imported_names(path) if name.split(".")[0] == "vlgate" and "." in name}


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_a_package_imports_only_the_layers_below_it(package):
    wrong = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        if "shipped" in path.parts:
            continue
        bad = imported_vlgate_packages(path) - ALLOWED[package] - ROOT_MODULES - {package, "__version__"}
        if bad:
            wrong[str(path.relative_to(ROOT))] = sorted(bad)
    assert wrong == {}


def test_mlflow_io_and_the_root_modules_import_no_service_package():
    for path in [*(ROOT / "vlgate" / "tracking").glob("*.py"), *(ROOT / "vlgate" / f"{module}.py" for module in ("config", "decisions", "history", "home", "power_plan", "tag_keys", "values", "versions"))]:
        assert imported_vlgate_packages(path) <= {"evaluators", "home", "config", "decisions", "history", "tag_keys", "text", "values", "versions", "tracking"}, path.name
    assert imported_vlgate_packages(ROOT / "vlgate" / "tag_keys.py") == set()
    assert imported_vlgate_packages(ROOT / "vlgate" / "versions.py") == {"text"}
    assert imported_vlgate_packages(ROOT / "vlgate" / "text.py") == set()
    assert imported_vlgate_packages(ROOT / "vlgate" / "values.py") == set()
    assert imported_vlgate_packages(ROOT / "vlgate" / "decisions.py") == {"config", "values"}
    assert imported_vlgate_packages(ROOT / "vlgate" / "history.py") == {"decisions"}
    assert imported_vlgate_packages(ROOT / "vlgate" / "power_plan.py") == {"decisions"}


#: the shared statistics and each paper package's metric math
METRIC_MATH = sorted([*(ROOT / "evaluators" / "metrics").glob("*.py"), *(ROOT / "evaluators").glob("*/metrics*.py")])


def test_metric_math_imports_no_model_mlflow_prefect_or_plotting():
    heavy = {"torch", "transformers", "mlflow", "prefect", "great_expectations", "diffusers", "matplotlib", "PIL"}
    assert {path.parent.name for path in METRIC_MATH} >= {"metrics", "vl_lcm", "vlind", "genception", "decc"}
    for path in METRIC_MATH:
        tree = ast.parse(path.read_text())
        modules = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        modules |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
        assert not modules & heavy, (path.name, modules & heavy)


#: The world's build-time modules (training, data generation); only the commands that
#: build a world (make-world, the demo's batches) and the world itself import them.
WORLD_BUILD = {"architectures", "curriculum", "faults", "tokenizer", "training", "vllm_padding", "generators", "datasets", "build"}
WORLD_BUILDERS = {"cli/commands/local.py", "cli/demo.py"}


def test_runtime_code_does_not_import_the_worlds_training_code():
    wrong = {}
    for package in ALLOWED:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative.startswith("evaluators/world/") or relative in WORLD_BUILDERS:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vlgate.evaluators.world"):
                    modules = {node.module.rsplit(".", 1)[-1]} | ({a.name for a in node.names} if node.module == "vlgate.evaluators.world" else set())
                    if modules & WORLD_BUILD:
                        wrong[relative] = sorted(modules & WORLD_BUILD)
    assert wrong == {}


@pytest.mark.world
@pytest.mark.parametrize("script", sorted((ROOT / "benchmarks").glob("*.py")), ids=lambda path: path.name)
def test_every_name_a_benchmark_imports_from_vlgate_exists(script):
    """Benchmarks run by hand, not in the suite: a renamed function must not leave one
    failing at its first line (bench_vllm.py imported a removed constant for a while)."""
    import importlib.util

    missing = []
    for node in ast.walk(ast.parse(script.read_text(), str(script))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("vlgate") and node.level == 0:
            module = importlib.import_module(node.module)
            is_package = hasattr(module, "__path__")
            missing += [
                f"{node.module}.{alias.name}"
                for alias in node.names
                if not hasattr(module, alias.name) and not (is_package and importlib.util.find_spec(f"{node.module}.{alias.name}"))
            ]
    assert missing == []


def test_scoring_records_loads_no_runner_model_code_or_matplotlib():
    """The definitions name their runners and figures through ``imported_when_called``, so
    ``vlgate score`` (the registry and scoring) imports none of them."""
    import subprocess
    import sys

    probe = "import sys; from vlgate.evaluators import registry, scoring; registry.names(); print(' '.join(sorted(sys.modules)))"
    loaded = set(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split())
    assert "vlgate.evaluators.registry" in loaded and "vlgate.evaluators.vlind.definition" in loaded
    assert not {name for name in loaded if name.endswith((".runner", ".figures")) and name.startswith("vlgate.evaluators.") and name != "vlgate.evaluators.figures"}
    assert not {name for name in loaded if name.split(".")[0] in ("matplotlib", "torch", "transformers", "vllm")}


def test_every_package_folder_is_in_the_wheel():
    """pyproject.toml lists the packages (the folders are mapped onto ``vlgate.*``): an
    editable install finds a folder missing from the list, a wheel silently lacks it."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {name: ROOT / folder for name, folder in setuptools["package-dir"].items()}
    found = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            parts = init.parent.relative_to(folder).parts
            if "shipped" not in parts and not any(part.startswith(".") for part in parts):
                found.add(".".join((name, *parts)))
    assert "vlgate.cli.commands" in found and found - set(setuptools["packages"]) == set()


#: the folders mapped onto ``vlgate.*`` (pyproject.toml's package-dir), by import prefix
FOLDERS = {
    "vlgate.evaluators": "evaluators", "vlgate.gate": "gate", "vlgate.flows": "flows", "vlgate.cli": "cli",
    "vlgate.registry_hooks": "registry_hooks", "vlgate.dashboards": "dashboards", "vlgate": "vlgate",
}  # fmt: skip


def room(module: str) -> str | None:
    """The room a ``vlgate.*`` module lives in: a folder's sub-package or module
    (``evaluators/runners``, ``gate/fixed``), a root module (``vlgate/decisions``) or
    ``vlgate/tracking``; None for a package itself."""
    for prefix, folder in FOLDERS.items():  # the longer prefixes first
        if module == prefix or module.startswith(prefix + "."):
            rest = module[len(prefix) + 1 :].split(".") if module != prefix else []
            return f"{folder}/{rest[0]}" if rest and rest[0] not in ("__init__", "__version__") else None
    return None


def room_graph() -> dict[str, set[str]]:
    """Every room's arrows to the other rooms it imports, anywhere in its files (inside
    functions and under ``TYPE_CHECKING`` too: they are arrows all the same)."""
    graph: dict[str, set[str]] = {}
    for prefix, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT / folder)
            if "shipped" in relative.parts or (folder == "vlgate" and relative.parts[0] != "tracking" and len(relative.parts) > 1):
                continue
            source = room(".".join((prefix, *relative.with_suffix("").parts)))
            if source is None:
                continue
            targets = {room(name) for name in imported_names(path) if name.startswith("vlgate")}
            graph.setdefault(source, set()).update(target for target in targets if target is not None and target != source)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected sets of more than one room (Tarjan's algorithm), each sorted."""
    index: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = lowest[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                lowest[node] = min(lowest[node], lowest[target])
            elif target in stack:
                lowest[node] = min(lowest[node], index[target])
        if lowest[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | {target for targets in graph.values() for target in targets}):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle_and_only_cycles():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "d": {"a", "c"}}) == []
    assert room("vlgate.evaluators.runners.base") == "evaluators/runners" and room("vlgate.gate.fixed") == "gate/fixed"
    assert room("vlgate.decisions") == "vlgate/decisions" and room("vlgate.tracking.server") == "vlgate/tracking" and room("vlgate.evaluators") is None


def test_no_cycle_between_rooms_anywhere_in_the_package():
    """Arrows run one way between the rooms of every folder (a sub-package or a module):
    the evaluators' value types and math at the bottom, each paper's parts, the runner
    loop, the papers' runners, the registry, running suites, the world at the top."""
    graph = room_graph()
    assert {"evaluators/runners", "evaluators/running", "evaluators/world", "gate/fixed", "cli/commands", "vlgate/tracking"} <= set(graph)
    assert "evaluators/runners" in graph["evaluators/running"]  # arrows are read (a graph of nothing has no cycle)
    assert cycles(graph) == []


def test_importing_a_value_type_loads_a_handful_of_modules_and_runs_nothing():
    """``EvaluatorOutput`` (what crosses every step) and the registry itself import no
    evaluator's package: the registry's sources are resolved when it is first asked, and
    the self-checks run where they are asked for (``vlgate serve``, ``vlgate check``)."""
    import subprocess
    import sys

    probe = (
        "import sys; from vlgate.evaluators.output import EvaluatorOutput; print(' '.join(sorted(m for m in sys.modules if m.startswith('vlgate')))); "
        "from vlgate.evaluators import registry; print(registry.EVALUATORS.is_resolved, len(registry._CHECKED))"
    )
    lines = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.splitlines()
    loaded = lines[0].split()
    assert len(loaded) <= 15 and "vlgate.evaluators.output" in loaded and not [name for name in loaded if name.endswith(".definition")]
    assert lines[1] == "False 0"  # nothing resolved, nothing checked


def signatures_mentioning_any(path: Path) -> tuple[int, int]:
    """(functions, functions whose annotations name ``Any``) in one file."""
    functions = with_any = 0
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
            annotations = [a.annotation for a in arguments if a is not None and a.annotation is not None] + ([node.returns] if node.returns else [])
            annotations = [ast.parse(a.value, mode="eval") if isinstance(a, ast.Constant) and isinstance(a.value, str) else a for a in annotations]  # quoted ones
            functions += 1
            with_any += any((isinstance(n, ast.Name) and n.id == "Any") or (isinstance(n, ast.Attribute) and n.attr == "Any") for a in annotations for n in ast.walk(a))
    return functions, with_any


def test_signatures_counting_any_finds_it_in_parameters_and_returns(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("from typing import Any\ndef a(x: Any) -> int: ...\ndef b(x: int) -> dict[str, Any]: ...\ndef c(x: int) -> int: ...\ndef d(x: 'list[Any]') -> None: ...\n")
    assert signatures_mentioning_any(source) == (4, 3)


def test_at_most_five_percent_of_the_packages_signatures_say_any():
    """Values are typed: ``Any`` is left only where a library's own types cannot say more."""
    counts = [signatures_mentioning_any(path) for folder in sorted(set(FOLDERS.values())) for path in (ROOT / folder).rglob("*.py") if "shipped" not in path.parts]
    functions, with_any = sum(c[0] for c in counts), sum(c[1] for c in counts)
    assert functions > 1000 and with_any / functions <= 0.05, (with_any, functions)


def test_the_backends_never_import_the_world_or_its_scenes():
    """The world's generator registers itself as a kind (entry point ``vlgate.image_generators``):
    the backends it registers with know nothing of it."""
    found = {name for path in (ROOT / "evaluators" / "backends").rglob("*.py") for name in imported_names(path)}
    assert not {name for name in found if name.startswith(("vlgate.evaluators.scenes", "vlgate.evaluators.world"))}
    assert "vlgate.evaluators.backends.base" in found  # imports are read


def package_sources() -> list[Path]:
    """Every module of the package (the shipped world's copy left out)."""
    return [path for folder in sorted(set(FOLDERS.values())) for path in sorted((ROOT / folder).rglob("*.py")) if "shipped" not in path.parts]


def call_sites(paths: list[Path], pattern: str) -> list[str]:
    """``file:line`` of every call whose callee, as written, fully matches ``pattern``."""
    import re

    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and re.fullmatch(pattern, ast.unparse(node.func)):
                found.append(f"{path.name}:{node.lineno}")
    return found


def functions_with_many_parameters(paths: list[Path], at_least: int = 8) -> list[str]:
    """``file:line name`` of every function taking ``at_least`` parameters (``self``/``cls`` not counted, ``*args``/``**kwargs`` counted)."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = node.args
                names = [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs) if a.arg not in ("self", "cls")]
                if len(names) + (arguments.vararg is not None) + (arguments.kwarg is not None) >= at_least:
                    found.append(f"{path.name}:{node.lineno} {node.name}")
    return found


def functions_taking_a_bare_version(paths: list[Path]) -> list[str]:
    """``file:line name`` of every function taking a model's name and its version as two texts
    side by side (a ``version: str`` beside ``model_name``, ``model`` or ``name``), not one
    ``VersionRef``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                arguments = {a.arg: a.annotation for a in (*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs)}
                version = arguments.get("version")
                if version is not None and ast.unparse(version).startswith("str") and {"model_name", "model", "name"} & set(arguments):
                    found.append(f"{path.name}:{node.lineno} {node.name}")
    return found


def test_the_counters_find_what_they_count(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "def f(a, b, c, d, e, f, g, *rest): return prepare_environment()\n"
        "class C:\n    def m(self, a, b, c, d, e, f, g): return settings.ServiceConfig.load(home)\n"
        "def g(**options): return str(version), record.model_copy(update={})\n"
        "def h(model: str, version: str | None): pass\n"
        "def i(subject: VersionRef, version: int): pass\n"
    )
    assert call_sites([source], r"(\w+\.)*prepare_environment|(\w+\.)*ServiceConfig\.load") == ["m.py:1", "m.py:3"]
    assert functions_with_many_parameters([source]) == ["m.py:1 f"]  # self does not count
    assert call_sites([source], r"\w+\.model_copy") == ["m.py:4"]
    assert functions_taking_a_bare_version([source]) == ["m.py:5 h"]


#: how much of the call tree re-reads state, patches records after they are made, passes a
#: version as a bare string and takes long parameter lists: each limit is the figure
#: measured when a change last lowered it (ARCHITECTURE.md lists them, with what each
#: one left counts, and the command that prints them); a limit only comes down
LIMITS = {
    "state read again": 8, "model_copy": 3, "str(version)": 2, "functions with 8+ parameters": 1, "lines of the longest module": 500,
    "a version as bare text beside its model": 7,
}  # fmt: skip


def measured_figures(paths: list[Path]) -> dict[str, int]:
    """Each figure :data:`LIMITS` bounds, counted on ``paths``."""
    return {
        "state read again": len(call_sites(paths, r"(\w+\.)*prepare_environment|(\w+\.)*ServiceConfig\.load|tracking\.connect")),
        "model_copy": sum(path.read_text().count(".model_copy(update") for path in paths),
        "str(version)": sum(path.read_text().count("str(version)") for path in paths),
        "functions with 8+ parameters": len(functions_with_many_parameters(paths)),
        "a version as bare text beside its model": len(functions_taking_a_bare_version(paths)),
        "lines of the longest module": max(len(path.read_text().splitlines()) for path in paths),
    }


def test_state_is_read_where_the_work_enters_and_the_call_tree_stays_small():
    """The home, ``vlgate.yaml`` and the MLflow client are built once where the work enters
    (``flows/context.py``: ``ServiceContext``) and handed down, not read again deeper in the
    call tree; modules stay under 500 lines. Each figure is kept at most its limit."""
    figures = measured_figures(package_sources())
    assert {name: figure for name, figure in figures.items() if figure > LIMITS[name]} == {}
