"""The evaluators vlgate knows, in the order reports show them: the four packages of the
papers (:data:`BUILT_IN`), then any installed plugin's, found through the entry-point group
:data:`ENTRY_POINT_GROUP` (an entry point names an :class:`EvaluatorDefinition` or a
sequence of them; ``pyproject.toml``: ``[project.entry-points."vlgate.evaluators"]``).
Every definition checks itself on its example records when it is registered, so a broken
plugin is refused when vlgate starts, naming what is wrong, not when a run uses it.
What a definition holds and who reads what: ``evaluators/definition.py``.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Sequence
from importlib.metadata import entry_points

from vlgate.evaluators.definition import DefinitionError, EvaluatorDefinition, Metric

#: The evaluators of the papers: each package's ``DEFINITIONS``, registered in this order.
BUILT_IN = ("vlgate.evaluators.vl_lcm", "vlgate.evaluators.vlind", "vlgate.evaluators.genception", "vlgate.evaluators.decc")

#: The entry-point group through which an installed package adds evaluators.
ENTRY_POINT_GROUP = "vlgate.evaluators"


class UnknownEvaluatorError(ValueError):
    pass


_REGISTRY: dict[str, EvaluatorDefinition] = {}


def register(definition: EvaluatorDefinition) -> EvaluatorDefinition:
    """Add an evaluator (a plugin's or a test's) once it has checked itself on its example
    records (:meth:`EvaluatorDefinition.check`); its name must be new."""
    if definition.name in _REGISTRY:
        raise ValueError(f"evaluator {definition.name!r} is already registered")
    for metric in definition.metrics:
        for target in metric.correlate_with:
            evaluator, _, name = target.partition("/")
            if not name:
                raise DefinitionError(f"{definition.name}/{metric.name}: correlate_with {target!r} is not EVALUATOR/METRIC")
    definition.check()
    _REGISTRY[definition.name] = definition
    return definition


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def names() -> tuple[str, ...]:
    """Every registered evaluator, in registration order (the order reports show them in)."""
    return tuple(_REGISTRY)


def definitions() -> tuple[EvaluatorDefinition, ...]:
    return tuple(_REGISTRY.values())


def get(name: str) -> EvaluatorDefinition:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownEvaluatorError(f"unknown evaluator {name!r}; expected one of {', '.join(sorted(_REGISTRY))}") from None


def split_metric(qualified: str) -> tuple[str, str]:
    """``genception/gc@3`` → (``genception``, ``gc@3``); ``decc/reliable_rate/multi`` → (``decc``, ``reliable_rate/multi``)."""
    evaluator, _, metric = qualified.partition("/")
    return evaluator, metric


def metric(qualified: str) -> Metric | None:
    """The definition of ``EVALUATOR/METRIC``, or None for an unknown evaluator or metric."""
    evaluator, name = split_metric(qualified)
    definition = _REGISTRY.get(evaluator)
    return definition.metric(name) if definition is not None and name else None


def correlated_pairs(available: Sequence[str]) -> Iterator[tuple[str, str]]:
    """(label-free, labelled) pairs of qualified metric names among ``available`` (e.g. the
    columns of the across-versions table), templates matched against what is there."""
    for definition in _REGISTRY.values():
        for spec in definition.metrics:
            if not spec.correlate_with:
                continue
            xs = [name for name in available if split_metric(name)[0] == definition.name and spec.matches(split_metric(name)[1])]
            for x in xs:
                for y in spec.correlate_with:
                    yield x, y


def register_plugins() -> list[str]:
    """Register every evaluator the installed packages name in :data:`ENTRY_POINT_GROUP`
    that is not registered yet; the names registered. A plugin that cannot be loaded or
    whose definition fails its check raises :class:`DefinitionError` naming the entry point."""
    added = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            loaded = point.load()
        except Exception as error:  # an import error of any kind inside the plugin
            raise DefinitionError(f"entry point {point.name!r} ({point.value}) of group {ENTRY_POINT_GROUP!r} cannot be loaded: {error}") from error
        found = (loaded,) if isinstance(loaded, EvaluatorDefinition) else tuple(loaded)
        for definition in found:
            if not isinstance(definition, EvaluatorDefinition):
                raise DefinitionError(f"entry point {point.name!r} ({point.value}) names {type(definition).__name__}, not an EvaluatorDefinition")
            if definition.name not in _REGISTRY:
                register(definition)
                added.append(definition.name)
    return added


for _package in BUILT_IN:
    for _definition in importlib.import_module(_package).DEFINITIONS:
        register(_definition)
register_plugins()

__all__ = [
    "BUILT_IN",
    "ENTRY_POINT_GROUP",
    "UnknownEvaluatorError",
    "correlated_pairs",
    "definitions",
    "get",
    "metric",
    "names",
    "register",
    "register_plugins",
    "split_metric",
    "unregister",
]
