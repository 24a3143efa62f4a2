"""The evaluators vlgate knows, in the order reports show them: the four packages of the
papers (:data:`BUILT_IN`), then any installed plugin's, found through the entry-point group
:data:`ENTRY_POINT_GROUP` (an entry point names an :class:`EvaluatorDefinition` or a
sequence of them; ``pyproject.toml``: ``[project.entry-points."vlgate.evaluators"]``).

Importing this module loads nothing and runs nothing: the packages and plugins are sources
resolved the first time anything asks the registry (as lm-evaluation-harness's registry
resolves its tasks), so a value type that names the registry costs no evaluator's import.
Every definition checks itself on its example records (:func:`check_definitions`) where a
broken one must be refused before it is used: ``vlgate serve`` at start-up, ``vlgate
check``, the tests, and :func:`register` (a plugin or a test adding one explicitly).
What a definition holds and who reads what: ``evaluators/definition.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points

from vlgate.evaluators.definition import DefinitionError, EvaluatorDefinition, Metric
from vlgate.evaluators.registries import Registry

#: The evaluators of the papers: each package's ``DEFINITIONS``, registered in this order.
BUILT_IN = ("vlgate.evaluators.vl_lcm", "vlgate.evaluators.vlind", "vlgate.evaluators.genception", "vlgate.evaluators.decc")

#: The entry-point group through which an installed package adds evaluators.
ENTRY_POINT_GROUP = "vlgate.evaluators"


class DefinitionConflict(ValueError):
    """A suite gives an entry name that another suite read by this process defined to an
    evaluator scored otherwise: one of the two would be read with the other's functions."""


class UnknownEvaluatorError(ValueError):
    pass


def _check_targets(definition: EvaluatorDefinition) -> None:
    for metric in definition.metrics:
        for target in metric.correlate_with:
            evaluator, _, name = target.partition("/")
            if not name:
                raise DefinitionError(f"{definition.name}/{metric.name}: correlate_with {target!r} is not EVALUATOR/METRIC")


def _built_in_and_plugins() -> Iterator[EvaluatorDefinition]:
    """The registry's sources: the built-in packages in order, then the installed plugins
    (unchecked: :func:`register_plugins` and :func:`check_definitions` check them)."""
    _PLUGINS_FOUND_FIRST.clear()
    for package in BUILT_IN:
        yield from importlib.import_module(package).DEFINITIONS
    for definition in _plugins():
        _PLUGINS_FOUND_FIRST.append(definition.name)
        yield definition


#: every evaluator, resolved on first use (``registries.Registry``)
EVALUATORS: Registry[EvaluatorDefinition] = Registry(
    "evaluator", lambda definition: definition.name, sources=_built_in_and_plugins, on_add=_check_targets, unknown=UnknownEvaluatorError, sorted_names=True
)
#: the evaluators whose self-check passed in this process
_CHECKED: set[str] = set()
#: the plugins the first resolution found
_PLUGINS_FOUND_FIRST: list[str] = []


def register(definition: EvaluatorDefinition) -> EvaluatorDefinition:
    """Add an evaluator (a plugin's or a test's), after the built-in ones, once it has
    checked itself on its example records (:meth:`EvaluatorDefinition.check`); its name
    must be new."""
    if definition.name in EVALUATORS:
        raise ValueError(f"evaluator {definition.name!r} is already registered")
    definition.check()
    _CHECKED.add(definition.name)
    return EVALUATORS.add(definition)


#: the evaluators built from a suite's entries (lmms-eval tasks), by name
_FROM_SUITES: set[str] = set()


def define(definition: EvaluatorDefinition) -> EvaluatorDefinition:
    """Add an evaluator that a suite entry builds (an lmms-eval task, ``evaluators/lmms/``),
    after the others: its functions are the task's own, so it has no example records to
    check itself on. Reading the same entry again replaces it; a name the packages or a
    plugin registered is refused, and so is a name another suite gave an evaluator scored
    otherwise (:class:`DefinitionConflict`: one process keeps one definition a name, and the
    records of the first would be aggregated with the second's functions)."""
    before = EVALUATORS.find(definition.name)
    if before is not None and definition.name not in _FROM_SUITES:
        raise ValueError(f"evaluator {definition.name!r} is already registered; name the suite entry otherwise")
    if before is not None and before.scored_by is not None and definition.scored_by is not None and before.scored_by[1] != definition.scored_by[1]:
        raise DefinitionConflict(
            f"another suite read by this process gives {definition.name!r} to {before.scored_by[0]}, scored otherwise than {definition.scored_by[0]}: give one of the entries another name"
        )
    _FROM_SUITES.add(definition.name)
    _CHECKED.add(definition.name)
    return EVALUATORS.replace(definition)


def check_definitions() -> list[str]:
    """Every registered evaluator checked on its example records (each once per process);
    the names checked. A definition that disagrees with itself raises
    :class:`DefinitionError` naming the evaluator and every disagreement."""
    for definition in EVALUATORS.values():
        if definition.name not in _CHECKED and definition.name not in _FROM_SUITES:  # a suite's are the task's own functions
            try:
                definition.check()
            except DefinitionError as error:
                raise DefinitionError(f"evaluator {definition.name!r}: {error}") from None
            _CHECKED.add(definition.name)
    return list(EVALUATORS.names())


def unregister(name: str) -> None:
    EVALUATORS.remove(name)
    _CHECKED.discard(name)
    _FROM_SUITES.discard(name)


def names() -> tuple[str, ...]:
    """Every registered evaluator, in registration order (the order reports show them in)."""
    return EVALUATORS.names()


def definitions() -> tuple[EvaluatorDefinition, ...]:
    return EVALUATORS.values()


def get(name: str) -> EvaluatorDefinition:
    return EVALUATORS.get(name)


def split_metric(qualified: str) -> tuple[str, str]:
    """``genception/gc@3`` → (``genception``, ``gc@3``); ``decc/reliable_rate/multi`` → (``decc``, ``reliable_rate/multi``)."""
    evaluator, _, metric = qualified.partition("/")
    return evaluator, metric


def metric(qualified: str) -> Metric | None:
    """The definition of ``EVALUATOR/METRIC``, or None for an unknown evaluator or metric."""
    evaluator, name = split_metric(qualified)
    definition = EVALUATORS.find(evaluator)
    return definition.metric(name) if definition is not None and name else None


def correlated_pairs(available: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(label-free, labelled) pairs of qualified metric names among ``available`` (e.g. the
    columns of the across-versions table), templates matched against what is there."""
    for definition in EVALUATORS.values():
        for spec in definition.metrics:
            if not spec.correlate_with:
                continue
            xs = [name for name in available if split_metric(name)[0] == definition.name and spec.matches(split_metric(name)[1])]
            for x in xs:
                for y in spec.correlate_with:
                    yield x, y


def register_plugins() -> list[str]:
    """Register every evaluator the installed packages name in :data:`ENTRY_POINT_GROUP`
    that is not registered yet (a package installed while vlgate runs), each checked on its
    example records; the names registered. A plugin that cannot be loaded or whose
    definition fails its check raises :class:`DefinitionError` naming the entry point, and
    is not registered."""
    found_first = list(_PLUGINS_FOUND_FIRST) if EVALUATORS.resolve() else []
    for name in found_first:  # found by this call's resolution: checked as the rest
        definition = EVALUATORS.get(name)
        try:
            definition.check()
        except DefinitionError:
            EVALUATORS.remove(name)
            raise
        _CHECKED.add(name)
    added = []
    for definition in _plugins():
        if definition.name not in EVALUATORS:
            definition.check()
            _CHECKED.add(definition.name)
            EVALUATORS.add(definition)
            added.append(definition.name)
    return found_first + added


def _plugins() -> Iterator[EvaluatorDefinition]:
    """The definitions the installed packages name in :data:`ENTRY_POINT_GROUP` that the
    registry does not hold yet."""
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as error:  # an import error of any kind inside the plugin
            raise DefinitionError(f"entry point {point.name!r} ({point.value}) of group {ENTRY_POINT_GROUP!r} cannot be loaded: {error}") from error
        found = (loaded,) if isinstance(loaded, EvaluatorDefinition) else tuple(loaded)
        for definition in found:
            if not isinstance(definition, EvaluatorDefinition):
                raise DefinitionError(f"entry point {point.name!r} ({point.value}) names {type(definition).__name__}, not an EvaluatorDefinition")
            if definition.name not in EVALUATORS:
                yield definition

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "UnknownEvaluatorError",
    "check_definitions",
    "correlated_pairs",
    "define",
    "definitions",
    "get",
    "metric",
    "names",
    "register",
    "register_plugins",
    "split_metric",
    "unregister",
]
