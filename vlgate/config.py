"""Reading the YAML files vlgate is configured with (suites, gate policies) into pydantic models,
with one error line that names the file and the offending field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

Model = TypeVar("Model", bound=BaseModel)


class ConfigError(ValueError):
    """A configuration file that cannot be used, in one line naming it; the CLI reports it
    as bad input (exit 2) whichever command read the file."""


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's several-line message as one line: where, and what."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(str(problem).split())


def _problem(error: Any) -> str:
    """``loc: msg``; a model's own cross-field check (no location) names its field in its message."""
    where = ".".join(map(str, error["loc"]))
    message = str(error["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def load_yaml_model(model_class: type[Model], path: str | Path, what: str) -> Model:
    """``model_class`` validated from the YAML at ``path``; ConfigError("{what} {path}: ...") otherwise."""
    try:
        return model_class.model_validate(yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {})
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
