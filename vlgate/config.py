"""Reading the YAML files vlgate is configured with (suites, gate policies, ``vlgate.yaml``)
into pydantic models, with one error line that names the file and the offending field.

A configuration says exactly what it reads as, or it is refused when it is read:

- a key written twice in one mapping is an error naming the key and both lines (YAML
  would keep the last copy: a policy with two ``floors:`` blocks would lose the first's
  floors, a gate weaker than its file reads);
- every configuration model refuses unknown keys and numbers that are not finite
  (:data:`CONFIG_MODEL`): a floor of ``.nan`` would reject every candidate "on the
  numbers", a ``max_age_s`` of ``.inf`` would overflow on first use."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError
from pydantic_core import ErrorDetails

Model = TypeVar("Model", bound=BaseModel)

#: The settings of every model a configuration file is read into.
CONFIG_MODEL = ConfigDict(extra="forbid", allow_inf_nan=False)


class UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        first_line: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # "<<: *defaults": explicit keys override merged ones
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                seen = first_line.setdefault(key, key_node.start_mark.line)
            except TypeError:  # an unhashable key: the safe loader's own error follows
                continue
            if seen != key_node.start_mark.line:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r} (first at line {seen + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str) -> Any:
    """YAML text as data, with :class:`UniqueKeyLoader`."""
    return yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass


class ConfigError(ValueError):
    """A configuration file that cannot be used, in one line naming it; the CLI reports it
    as bad input (exit 2) whichever command read the file."""


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: where, and what."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def _problem(error: ErrorDetails) -> str:
    """``loc: msg``; a model's own cross-field check (no location) names its field in its message."""
    where = ".".join(map(str, error["loc"]))
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def load_yaml_model(model_class: type[Model], path: str | Path, what: str, context: dict[str, Any] | None = None) -> Model:
    """``model_class`` validated from the YAML at ``path`` (``context``: pydantic's validation
    context, for validators that read more than the values); ConfigError("{what} {path}: ...") otherwise."""
    try:
        return model_class.model_validate(parse_yaml(Path(path).read_text(encoding="utf-8")) or {}, context=context)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {path}: is a folder, not a YAML file") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"{what} {path}: not UTF-8 text (byte {error.start})") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{what} {path}: not valid YAML: {_yaml_problem(error)}") from None
    except ValidationError as error:
        raise ConfigError(f"{what} {path}: {'; '.join(_problem(e) for e in error.errors())}") from None
