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
    "flows": {"evaluators", "tracking", "dashboards", "registry_hooks"},
}
ROOT_MODULES = {"config", "decisions", "home", "tag_keys", "text", "versions", "__init__"}


def imported_vlgate_packages(path: Path) -> set[str]:
    """The second component of every ``vlgate.X`` this file imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "vlgate" and len(parts) > 1:
                found.add(parts[1])
    return found


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
    for path in [*(ROOT / "vlgate" / "tracking").glob("*.py"), *(ROOT / "vlgate" / f"{module}.py" for module in ("config", "decisions", "home", "tag_keys", "versions"))]:
        assert imported_vlgate_packages(path) <= {"evaluators", "home", "config", "decisions", "tag_keys", "tracking"}, path.name
    assert imported_vlgate_packages(ROOT / "vlgate" / "tag_keys.py") == set()
    assert imported_vlgate_packages(ROOT / "vlgate" / "versions.py") == set()
    assert imported_vlgate_packages(ROOT / "vlgate" / "text.py") == set()
    assert imported_vlgate_packages(ROOT / "vlgate" / "decisions.py") == {"config"}


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
WORLD_BUILD = {"checkpoints", "generators", "datasets", "build"}
WORLD_BUILDERS = {"flows/commands/local.py", "flows/demo.py"}


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

    probe = "import sys; import vlgate.evaluators.scoring; print(' '.join(sorted(sys.modules)))"
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
    assert "vlgate.flows.commands" in found and found - set(setuptools["packages"]) == set()
